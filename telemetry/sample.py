"""The record every telemetry parser returns, and the plausibility rules they share.

Parsers never touch the database. A *parse error* (:class:`TelemetryParseError`) rejects the whole body,
as Prometheus rejects a whole scrape; a bad *value* (a DCGM sentinel, NaN, an impossible temperature) drops
that one field to ``None`` and is counted in :attr:`ParsedBatch.rejected` under a short reason.
Formats and quirks: ``shared/design/telemetry-formats.md``.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

# Plausibility bounds (inclusive). Outside them a field becomes None, counted "out_of_range".
TEMP_MIN_C, TEMP_MAX_C = -40.0, 150.0
TLIMIT_MIN_C, TLIMIT_MAX_C = -100.0, 150.0  # T.Limit is headroom to slowdown: negative past the limit
POWER_MAX_W = 5000.0
SM_CLOCK_MAX_MHZ = 10000.0
COUNTER_MAX = 2**62
MASK_MAX = 2**63 - 1  # the NVML clocks-event-reasons mask is a 64-bit field
XID_MAX = 2**31 - 1
# A device timestamp further ahead of ``now`` than this is not trusted: ts None, stamp at ingest.
FUTURE_TOLERANCE = timedelta(minutes=5)

# DCGM "blank" values (dcgm_structs.h): BLANK, NOT_FOUND, NOT_SUPPORTED, NOT_PERMISSIONED, ... up to +15.
# Older exporters print them as values (README: ``DCGM_FI_DEV_MEMORY_TEMP ... 9223372036854775794``).
DCGM_INT32_BLANK = 0x7FFFFFF0  # 2147483632 .. 2147483647
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0  # 9223372036854775792 and above
DCGM_FP64_BLANK = 140737488355328.0  # 2**47 .. 2**47 + 15

# Reasons counted in ParsedBatch.rejected.
SENTINEL, NAN, INF, NEGATIVE, OUT_OF_RANGE, FUTURE_TIMESTAMP = (
    "sentinel", "nan", "inf", "negative", "out_of_range", "future_timestamp")


@dataclass(slots=True)
class GpuSample:
    uuid: str | None = None  # normalised with inventory.identity.normalize_uuid
    host: str | None = None  # hostname, lower-cased
    pci_bus_id: str = ""  # normalised with inventory.identity.normalize_pci_bus_id ("00000000:53:00.0")
    ts: datetime | None = None  # device/exporter timestamp if the source gave one (aware UTC), else None
    gpu_temp_c: float | None = None
    mem_temp_c: float | None = None
    tlimit_c: float | None = None  # T.Limit HEADROOM to throttling (not a temperature)
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    throttle_mask: int | None = None  # NVML clocks-event-reasons bitmask
    ecc_sbe: int | None = None  # corrected (single-bit) ECC, volatile/total counter
    ecc_dbe: int | None = None  # uncorrected (double-bit)
    remap_corr: int | None = None
    remap_unc: int | None = None
    remap_failure: bool | None = None
    pcie_replay: int | None = None
    xid: int | None = None  # DCGM_FI_DEV_XID_ERRORS: LAST xid seen (a gauge), 0 = none
    sram_threshold_exceeded: bool | None = None


@dataclass(slots=True)
class XidLine:
    """One kernel-log ``NVRM: Xid`` event."""

    host: str | None
    pci_bus_id: str
    uuid: str | None
    xid: int
    pid: int | None
    process: str
    message: str
    ts_text: str
    line_no: int


@dataclass
class ParsedBatch:
    samples: list[GpuSample] = field(default_factory=list)
    xids: list[XidLine] = field(default_factory=list)
    # reason -> count of values or lines dropped or clamped ("sentinel", "nan", "out_of_range", ...)
    rejected: collections.Counter[str] = field(default_factory=collections.Counter)
    lines: int = 0  # input lines read
    notices: list[str] = field(default_factory=list)  # harmless things read past (columns a newer driver added)


class TelemetryParseError(ValueError):
    """The body is refused as a whole. ``reason`` is a short key ("syntax", "label_too_long",
    "body_too_large", "not_text"); ``line_no`` is 1-based, ``None`` for the body as a whole."""

    def __init__(self, message: str, *, reason: str = "syntax", line_no: int | None = None) -> None:
        super().__init__(f"line {line_no}: {message}" if line_no is not None else message)
        self.message = message
        self.reason = reason
        self.line_no = line_no


def is_dcgm_sentinel(value: float | int) -> bool:
    """A DCGM blank / not-found / not-supported / not-permissioned value (INT32, INT64 or FP64 family)."""
    return (value >= DCGM_INT64_BLANK or DCGM_INT32_BLANK <= value <= 0x7FFFFFFF
            or DCGM_FP64_BLANK <= value <= DCGM_FP64_BLANK + 15)


def checked_float(value: float | int | None, low: float, high: float,
                  rejected: collections.Counter[str]) -> float | None:
    """``value`` as a float when plausible; else None, counted under its reason."""
    if value is None:
        return None
    if low <= value <= high:  # the common case first; False for NaN
        return float(value)
    if value != value:  # NaN
        rejected[NAN] += 1
    elif math.isinf(value):
        rejected[INF] += 1
    elif is_dcgm_sentinel(value):
        rejected[SENTINEL] += 1
    else:
        rejected[OUT_OF_RANGE] += 1
    return None


def checked_int(value: float | int | None, high: int, rejected: collections.Counter[str]) -> int | None:
    """A counter, mask or code as an int when ``0 <= value <= high`` and whole; else None, counted."""
    if value is None:
        return None
    if 0 <= value <= high and value == int(value) and (value < DCGM_INT32_BLANK or not is_dcgm_sentinel(value)):
        return int(value)
    if value != value:
        rejected[NAN] += 1
    elif math.isinf(value):
        rejected[INF] += 1
    elif is_dcgm_sentinel(value):
        rejected[SENTINEL] += 1
    elif value < 0:
        rejected[NEGATIVE] += 1
    else:
        rejected[OUT_OF_RANGE] += 1  # too large, or not a whole number
    return None


def checked_bool(value: float | int | None, rejected: collections.Counter[str]) -> bool | None:
    """A 0/1 flag (``DCGM_FI_DEV_ROW_REMAP_FAILURE``); anything else None, counted."""
    number = checked_int(value, 1, rejected)
    return None if number is None else bool(number)


def checked_ts(ts: datetime | None, now: datetime, rejected: collections.Counter[str]) -> datetime | None:
    """A device timestamp, or None when it lies more than FUTURE_TOLERANCE after ``now``."""
    if ts is not None and ts > now + FUTURE_TOLERANCE:
        rejected[FUTURE_TIMESTAMP] += 1
        return None
    return ts
