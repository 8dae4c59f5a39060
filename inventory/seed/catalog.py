"""What the demo fleet is made of: GPU generations with their HGX platforms and firmware, sites, and the
shares of the fleet in each state. Versions are realistic demo values, not a support matrix."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from inventory.models import Cooling, GpuState

S = GpuState
DAY, HOUR = dt.timedelta(days=1), dt.timedelta(hours=1)
SLOTS = 8
# HGX baseboard PCI bus per module (module id = position + 1), as nvidia-smi reports it on HGX H100/H200/B200.
HGX_BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
# Share of the fleet per state. GPUs in servers: in service, burn-in (whole new servers), drained.
IN_SERVER_SHARE = 0.95
BURN_IN_SHARE, DRAINED_SHARE = 0.03, 0.02
UNPLACED_WEIGHTS = {S.SPARE: 2.5, S.RMA: 1.0, S.DECOMMISSIONING: 0.5, S.RECEIVED: 0.5, S.ORDERED: 0.5}
MASKED_SERVER_SHARE = 0.003  # cloud pass-through hosts that report 0000000000000: ~300 GPUs at 100k
SERVERS_PER_RACK, RACKS_PER_ROW, ROWS_PER_HALL = 4, 10, 12
LAG = {S.RECEIVED: 21, S.BURN_IN: 14}  # days before in-service
DRAIN_REASONS = ("XID 79: GPU has fallen off the bus", "XID 119: GSP RPC timeout", "XID 48: double-bit ECC error",
                 "XID 94: contained ECC error", "NVLink errors on link 3", "planned maintenance")
RMA_REASONS = ("XID 64: row-remapping failure", "XID 79 repeating after reseat", "HBM uncorrectable errors",
               "thermal: slowdown at idle")


@dataclass(frozen=True)
class Sku:
    sku: str
    name: str  # as nvidia-smi reports it
    architecture: str
    memory_gib: int
    tdp_w: int
    slowdown_c: int
    shutdown_c: int
    platform: str
    vendor: str
    height_u: int
    server_kw: float
    cooling: str
    board_part_number: str
    serial_prefix: str
    vbios: tuple[tuple[str, float], ...]
    inforom: str
    drivers: tuple[tuple[str, float], ...]
    bmc: tuple[tuple[str, float], ...]
    sbios: tuple[tuple[str, float], ...]
    hmc: tuple[tuple[str, float], ...]
    age_days: tuple[int, int]  # how long ago rows of this platform went into service


SKUS = (
    Sku("H100-SXM5-80GB", "NVIDIA H100 80GB HBM3", "Hopper", 80, 700, 87, 92, "HGX H100 8-GPU", "Supermicro", 8,
        10.2, Cooling.AIR, "692-2G520-0200-000", "165012",
        (("96.00.74.00.1C", 0.2), ("96.00.99.00.01", 0.8)), "G520.0200.00.05",
        (("550.90.07", 0.3), ("560.35.03", 0.2), ("570.124.06", 0.5)),
        (("01.01.16", 0.3), ("01.03.19", 0.7)), (("2.1", 0.35), ("2.4", 0.65)),
        (("HGX-22.10-1-rc80", 0.25), ("HGX-24.04-1-rc12", 0.75)), (420, 900)),
    Sku("H200-SXM5-141GB", "NVIDIA H200", "Hopper", 141, 700, 87, 92, "HGX H200 8-GPU", "Dell", 6,
        11.5, Cooling.AIR, "692-2G520-0280-000", "165032",
        (("96.00.A5.00.01", 0.7), ("96.00.AF.00.03", 0.3)), "G520.0280.00.01",
        (("550.90.07", 0.2), ("560.35.03", 0.3), ("570.124.06", 0.5)),
        (("7.00.00.173", 0.4), ("7.10.70.00", 0.6)), (("2.2.8", 0.5), ("2.3.5", 0.5)),
        (("HGX-24.04-1-rc12", 0.6), ("HGX-24.10-1-rc30", 0.4)), (180, 540)),
    Sku("B200-SXM6-180GB", "NVIDIA B200", "Blackwell", 180, 1000, 87, 92, "HGX B200 8-GPU", "Supermicro", 10,
        14.3, Cooling.LIQUID, "692-2G525-0220-000", "178012",
        (("97.00.6B.00.03", 0.6), ("97.00.82.00.01", 0.4)), "G525.0220.00.02",
        (("570.86.15", 0.15), ("570.124.06", 0.85)),
        (("01.04.02", 0.5), ("01.04.08", 0.5)), (("1.2", 0.4), ("1.3", 0.6)),
        (("HGX-B200-24.11-1-rc33", 0.5), ("HGX-B200-25.03-1-rc10", 0.5)), (30, 240)),
)
# code, name, timezone, share of the fleet, platform mix (H100, H200, B200)
SITES = (
    ("sjc1", "San Jose 1", "America/Los_Angeles", 0.35, (0.6, 0.3, 0.1)),
    ("dfw2", "Dallas 2", "America/Chicago", 0.30, (0.4, 0.3, 0.3)),
    ("iad3", "Ashburn 3", "America/New_York", 0.20, (0.3, 0.4, 0.3)),
    ("ams1", "Amsterdam 1", "Europe/Amsterdam", 0.15, (0.2, 0.3, 0.5)),
)
