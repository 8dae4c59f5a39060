"""dcgm-exporter ``/metrics`` text -> one :class:`GpuSample` per GPU.

Series are keyed by the ``UUID`` label (``uuid`` with ``--use-old-namespace``), else by ``Hostname`` (or
the caller's ``default_host``) plus ``pci_bus_id``. MIG rows (label ``GPU_I_ID``) carry the parent GPU's
UUID and repeat its device-level fields once per instance: they roll up to the parent, and a GPU-level
row, when there is one, wins. Metrics Fleet does not keep are ignored (they are normal).
Sentinels, NaN and impossible values drop that field and are counted (``telemetry.sample``).
Format notes: ``shared/design/telemetry-formats.md`` §4-§5.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from inventory.identity import normalize_pci_bus_id, normalize_uuid
from telemetry import prom
from telemetry.prom import Number
from telemetry.sample import (
    COUNTER_MAX,
    DCGM_INT32_BLANK,
    MASK_MAX,
    POWER_MAX_W,
    SM_CLOCK_MAX_MHZ,
    TEMP_MAX_C,
    TEMP_MIN_C,
    TLIMIT_MAX_C,
    TLIMIT_MIN_C,
    XID_MAX,
    GpuSample,
    ParsedBatch,
    checked_bool,
    checked_float,
    checked_int,
    checked_ts,
)

# NVML clocks-event (throttle) reasons, shared by NVML, nvidia-smi and DCGM (clock_events_collector.go).
THROTTLE_REASONS = {
    0x1: "idle", 0x2: "app clocks", 0x4: "SW power cap", 0x8: "HW slowdown", 0x10: "sync boost",
    0x20: "SW thermal", 0x40: "HW thermal", 0x80: "HW power brake", 0x100: "display clocks",
}
# "Throttling that matters": power cap, hardware slowdown, thermal (SW and HW), power brake.
THROTTLE_HW_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
THROTTLE_THERMAL_MASK = THROTTLE_HW_MASK  # the same bits; both names are used by callers


def throttle_reason_names(mask: int | None) -> list[str]:
    """``0x41`` -> ``["idle", "HW thermal"]``; unknown bits as ``"0x200"``."""
    if not mask:
        return []
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    names.extend(f"0x{1 << bit:x}" for bit in range(unknown.bit_length()) if unknown >> bit & 1)
    return names


# Slots of the per-series value list.
(GPU_TEMP, MEM_TEMP, TLIMIT, POWER, POWER_INSTANT, SM_CLOCK, EVENTS, THROTTLE, SBE_VOL, DBE_VOL, SBE_AGG,
 DBE_AGG, REMAP_CORR, REMAP_UNC, REMAP_FAILURE, PCIE_REPLAY, XID) = range(17)
_SLOTS = 17
FIELDS = {
    "DCGM_FI_DEV_GPU_TEMP": GPU_TEMP,
    "DCGM_FI_DEV_MEMORY_TEMP": MEM_TEMP,
    "DCGM_FI_DEV_GPU_TEMP_LIMIT": TLIMIT,  # field 153, thermal margin: T.Limit headroom (opt-in)
    "DCGM_FI_DEV_POWER_USAGE": POWER,
    "DCGM_FI_DEV_POWER_USAGE_INSTANT": POWER_INSTANT,
    "DCGM_FI_DEV_SM_CLOCK": SM_CLOCK,
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": EVENTS,
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": THROTTLE,  # the older name
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": SBE_VOL,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": DBE_VOL,
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": SBE_AGG,
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": DBE_AGG,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": REMAP_CORR,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": REMAP_UNC,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": REMAP_FAILURE,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": PCIE_REPLAY,
    "DCGM_FI_DEV_XID_ERRORS": XID,
}
NO_IDENTITY = "no_identity"  # a series with neither a UUID nor a PCI bus id: counted, dropped


# The same GPUs report every scrape: normalising their identities once per process is enough.
_uuid = functools.lru_cache(maxsize=1 << 18)(normalize_uuid)


@functools.lru_cache(maxsize=4096)
def _pci(raw: str | None) -> str:
    try:
        return normalize_pci_bus_id(raw)
    except ValueError:
        return ""


def _identity(labels: dict[str, str], default_host: str | None) -> tuple[str | None, str | None, str]:
    uuid_raw = labels.get("UUID", labels.get("uuid"))
    host = (labels.get("Hostname") or labels.get("host") or default_host or "").strip().lower() or None
    return _uuid(uuid_raw), host, _pci(labels.get("pci_bus_id"))


def _temp(value: Number | None, rejected: collections.Counter[str]) -> float | None:
    if value is not None and TEMP_MIN_C <= value <= TEMP_MAX_C:
        return float(value)
    return checked_float(value, TEMP_MIN_C, TEMP_MAX_C, rejected)


def _counter(value: Number | None, rejected: collections.Counter[str]) -> int | None:
    if value is not None and 0 <= value < DCGM_INT32_BLANK and value == int(value):
        return int(value)
    return checked_int(value, COUNTER_MAX, rejected)


def _either(first: Number | None, second: Number | None, rejected: collections.Counter[str],
            check: Callable[[Number | None, collections.Counter[str]], Any]) -> Any:
    """The first value if it checks out, else the second (a sentinel counts as missing)."""
    result = check(first, rejected)
    return check(second, rejected) if result is None and second is not None else result


def _mask(value: Number | None, rejected: collections.Counter[str]) -> int | None:
    return checked_int(value, MASK_MAX, rejected)


def _sample(uuid: str | None, host: str | None, pci: str, values: list, now: datetime,
            rejected: collections.Counter[str]) -> GpuSample:
    ts_ms = values[_TS]
    ts = None if ts_ms is None else checked_ts(datetime.fromtimestamp(ts_ms / 1000, UTC), now, rejected)
    power = values[POWER]
    if power is None or not 0 <= power <= POWER_MAX_W:
        power = _either(power, values[POWER_INSTANT], rejected,
                        lambda value, rejected: checked_float(value, 0.0, POWER_MAX_W, rejected))
    clock = values[SM_CLOCK]
    if clock is None or not 0 <= clock <= SM_CLOCK_MAX_MHZ:
        clock = checked_float(clock, 0.0, SM_CLOCK_MAX_MHZ, rejected)
    xid = values[XID]
    if xid is not None:
        xid = checked_int(xid, XID_MAX, rejected)
    tlimit = values[TLIMIT]
    if tlimit is not None:
        tlimit = checked_float(tlimit, TLIMIT_MIN_C, TLIMIT_MAX_C, rejected)
    failure = values[REMAP_FAILURE]
    return GpuSample(
        uuid=uuid, host=host, pci_bus_id=pci, ts=ts,
        gpu_temp_c=_temp(values[GPU_TEMP], rejected), mem_temp_c=_temp(values[MEM_TEMP], rejected),
        tlimit_c=tlimit, power_w=None if power is None else float(power),
        sm_clock_mhz=None if clock is None else float(clock),
        throttle_mask=_either(values[EVENTS], values[THROTTLE], rejected, _mask),
        ecc_sbe=_either(values[SBE_VOL], values[SBE_AGG], rejected, _counter),
        ecc_dbe=_either(values[DBE_VOL], values[DBE_AGG], rejected, _counter),
        remap_corr=_counter(values[REMAP_CORR], rejected), remap_unc=_counter(values[REMAP_UNC], rejected),
        remap_failure=None if failure is None else checked_bool(failure, rejected),
        pcie_replay=_counter(values[PCIE_REPLAY], rejected), xid=xid,
    )


_LABELS, _TS = _SLOTS, _SLOTS + 1  # a row also keeps its labels and its latest timestamp (ms)


def _new_row(_raw: str, labels: dict[str, str]) -> list:  # noqa: ANN001
    row: list = [None] * (_SLOTS + 2)
    row[_LABELS] = labels
    return row


def parse_dcgm(text: str, *, now: datetime, default_host: str | None = None) -> ParsedBatch:
    """Parse a dcgm-exporter scrape (one or many hosts); raise TelemetryParseError on a syntax error."""
    rows: list[list] = []

    def new_row(raw: str, labels: dict[str, str]) -> list:
        row = _new_row(raw, labels)
        rows.append(row)
        return row

    # The hot loop: the parser has already looked up the metric (slot) and the label text (row).
    for slot, row, value, ts in prom.iter_keyed(text, key_for=new_row, wanted=FIELDS):
        row[slot] = value
        if ts is not None and (row[_TS] is None or ts > row[_TS]):
            row[_TS] = ts
    batch = ParsedBatch(samples=[], xids=[], rejected=collections.Counter(),
                        lines=text.count("\n") + (1 if text and not text.endswith("\n") else 0))
    # Roll the per-label-text rows up to one per GPU: GPU-level rows first, then MIG rows fill the gaps.
    gpus: dict[tuple[str | None, str | None, str], _Gpu] = {}
    rows.sort(key=lambda row: "GPU_I_ID" in row[_LABELS])  # stable: GPU-level rows first, in text order
    for row in rows:
        labels = row[_LABELS]
        uuid, host, pci = _identity(labels, default_host)
        if uuid is None and not pci:
            batch.rejected[NO_IDENTITY] += 1
            continue
        err_code = labels.get("err_code", "")
        if row[XID] is not None and err_code.isdigit():
            row[XID] = int(err_code)
        key = (uuid, None, "") if uuid else (None, host, pci)
        gpu = gpus.get(key)
        if gpu is None:
            gpus[key] = _Gpu(uuid, host, pci, row)
        else:
            gpu.merge(host, pci, row)
    batch.samples = [_sample(gpu.uuid, gpu.host, gpu.pci, gpu.row, now, batch.rejected) for gpu in gpus.values()]
    return batch


class _Gpu:
    __slots__ = ("host", "pci", "row", "uuid")

    def __init__(self, uuid: str | None, host: str | None, pci: str, row: list) -> None:
        self.uuid, self.host, self.pci, self.row = uuid, host, pci, row

    def merge(self, host: str | None, pci: str, row: list) -> None:
        """Another row of this GPU (a MIG instance): fill what is missing; a non-zero XID beats "no XID"."""
        self.host, self.pci = self.host or host, self.pci or pci
        kept = self.row
        for index in range(_SLOTS):
            value = row[index]
            if value is not None and (kept[index] is None or (index == XID and not kept[index])):
                kept[index] = value
        if row[_TS] is not None and (kept[_TS] is None or row[_TS] > kept[_TS]):
            kept[_TS] = row[_TS]
