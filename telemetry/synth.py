"""The demo fleet (SYNTHETIC, for ``make run``'s demo only): every GPU's seeded level and a few seeded problems.

The 24 h backfill (``demo.telemetry_demo_backfill``) and the demo dcgm-exporter (``python -m world.dcgm_exporter
--demo``, which imports this module: plain Python, no Django) both read each GPU's level and problems from here,
keyed by its UUID, so the live scrapes continue the history (same band, same counters, same last XID) instead of
starting a cliff. The exporter's text itself is generated in ``world.dcgm_exporter.text``.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Sequence
from typing import NamedTuple

DEMO_SEED = 1
# About 0.5 % of the fleet has a problem (12 of 2,000 GPUs), in this order: a small fleet gets the first ones.
DEMO_PROBLEM_SHARE = 0.006
DEMO_ROLES = ("remap_failure", "xid79", "thermal", "xid13", "dbe_rate", "xid48", "thermal", "xid74", "xid43",
              "xid95", "thermal", "remap_failure")
# The DCGM XID gauge from a problem's onset on: the values it takes in turn, 30 s apart (the gauge holds the last
# one). 48 is followed by its 171 detail (a DBE in DRAM: an RMA); 13 and 43 are application faults (never flagged).
DEMO_XIDS = {"xid79": (79,), "xid48": (48, 171), "xid74": (74,), "xid95": (95,), "xid13": (13,), "xid43": (43,)}
DEMO_XID_GAP = dt.timedelta(seconds=30)
DEMO_DBE_EVERY = dt.timedelta(minutes=100)
DEMO_TEMP_MID = 57.0  # GPU temperatures at base power spread 52-62 C (a heat wave adds up to 22 C)  # "dbe_rate": a double-bit ECC error every 100 minutes


class DemoGpu(NamedTuple):
    temp: float  # GPU temperature (C) at its base power, before any heat wave
    power: float  # base power draw (W)
    role: str = ""  # "" (healthy) or one of DEMO_ROLES
    extra_c: float = 0.0  # "thermal": this much hotter than its rack peers at the same power (10-20 C)
    onset: float = 0.0  # when the problem starts, as a fraction of the backfill window (the exporter: long ago)


class DemoReading(NamedTuple):
    power_w: float
    throttle_mask: int
    gpu_temp_c: int
    mem_temp_c: int
    tlimit_c: int
    sm_clock_mhz: int
    ecc_sbe: int
    ecc_dbe: int
    remap_corr: int
    remap_unc: int
    remap_failure: bool
    xid: int


def demo_fleet(uuids: Sequence[str], *, seed: int = DEMO_SEED) -> dict[str, DemoGpu]:
    """Every GPU's level, deterministic by ``seed`` and UUID (not by order); the first ``DEMO_PROBLEM_SHARE`` of
    the GPUs in a seeded order get the problems of :data:`DEMO_ROLES` in turn."""
    drawn = {}
    for uuid in uuids:
        rng = random.Random(f"{seed}:{uuid}")
        # (order key, temperature, power, a thermal outlier's excess, onset of a problem)
        drawn[uuid] = (rng.random(), DEMO_TEMP_MID + (rng.random() - 0.5) * 10, 370 + rng.random() * 20,
                       10 + rng.random() * 10, 0.2 + rng.random() * 0.6)
    fleet = {uuid: DemoGpu(temp, power) for uuid, (_, temp, power, _, _) in drawn.items()}
    problems = round(len(drawn) * DEMO_PROBLEM_SHARE)
    for index, uuid in enumerate(sorted(drawn, key=lambda u: (drawn[u][0], u))[:problems]):
        _, temp, power, extra, onset = drawn[uuid]
        role = DEMO_ROLES[index % len(DEMO_ROLES)]
        if role == "thermal":  # from the middle of the band, so it stands 10-20 C above its peers' median
            fleet[uuid] = DemoGpu(DEMO_TEMP_MID, power, role, extra, onset)
        else:
            fleet[uuid] = DemoGpu(temp, power, role, 0.0, onset)
    return fleet


def demo_reading(gpu: DemoGpu, *, at: dt.datetime, heat: float, started: bool, rng: random.Random) -> DemoReading:
    """One sample of ``gpu`` at ``at``: its level plus ``heat`` (C; it draws 9 W more per degree) and noise;
    its problem shows once ``started``."""
    temp = gpu.temp + gpu.extra_c + heat + rng.uniform(-1.5, 1.5)
    power = gpu.power + heat * 9 + rng.uniform(-25, 25)
    hot = temp > 82
    role = gpu.role if started else ""
    dbe = 0
    if gpu.role == "dbe_rate":  # volatile counter: since the (synthetic) driver reload at the start of the month
        month = at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        dbe = int((at - month) / DEMO_DBE_EVERY)
    remap_failure = role == "remap_failure"
    return DemoReading(round(power, 1), 0x40 if hot else 0, round(temp), round(temp + 6), round(88 - temp),
                       1980 - (150 if hot else 0), dbe * 3, dbe, 3 if gpu.role == "remap_failure" else 0,
                       (9 if remap_failure else 6) if gpu.role == "remap_failure" else 0, remap_failure,
                       DEMO_XIDS[role][-1] if role in DEMO_XIDS else 0)
