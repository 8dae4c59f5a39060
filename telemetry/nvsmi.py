"""Thermal and health samples from ``nvidia-smi -q -x`` XML and ``nvidia-smi --query-gpu`` CSV.

The documents are read with the inventory importers' own hardening, value cleaning and header handling
(``inventory.importers.nvsmi_xml`` / ``nvsmi_csv`` / ``base``); this module only maps the thermal and
health elements, across the driver generations of ``shared/design/telemetry-formats.md`` §4-§5:
power ``power_readings/power_draw`` (<=525) -> ``gpu_power_readings/power_draw`` (535) ->
``average_power_draw`` / ``instant_power_draw`` (570+); throttle reasons ``clocks_throttle_reasons`` ->
``clocks_event_reasons``; three ECC layouts. Neither format carries a time zone, so ``ts`` stays None
(the sample is stamped at ingest). The host comes from the caller (or the CSV ``hostname`` column).
"""

from __future__ import annotations

import collections
import csv
import io
import re

from lxml import etree

from fleet import safexml
from inventory.identity import normalize_pci_bus_id, normalize_uuid
from inventory.importers.base import RecordError, clean, parse_int
from inventory.importers.nvsmi_csv import check_header, ignored_notice
from inventory.importers.nvsmi_xml import ROOT_TAG
from telemetry.sample import (
    COUNTER_MAX,
    MASK_MAX,
    POWER_MAX_W,
    SM_CLOCK_MAX_MHZ,
    TEMP_MAX_C,
    TEMP_MIN_C,
    TLIMIT_MAX_C,
    TLIMIT_MIN_C,
    GpuSample,
    ParsedBatch,
    TelemetryParseError,
    checked_float,
    checked_int,
)

UNPARSEABLE = "unparseable"  # a value that is neither a number nor a placeholder: counted, dropped
# <clocks_event_reason_X> / <clocks_throttle_reason_X> -> NVML bit (telemetry.dcgm.THROTTLE_REASONS)
REASON_BITS = {
    "gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
    "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80, "display_clocks_setting": 0x100,
}
_MEASURE = re.compile(r"^(-?\d+(?:\.\d+)?)\s*[A-Za-z%]*$")  # "41 C", "67.03 W", "1275 MHz", "-2 C"


def _measure(raw: str | None, rejected: collections.Counter[str]) -> float | None:
    """``'41 C'`` -> 41.0; placeholders (``N/A``...) -> None; anything else None, counted."""
    value = clean(raw)
    if value is None:
        return None
    match = _MEASURE.match(value)
    if match is None:
        rejected[UNPARSEABLE] += 1
        return None
    return float(match.group(1))


def _count(raw: str | None, rejected: collections.Counter[str]) -> int | None:
    """A counter (``'0'``, ``'12'``) with the importers' ``parse_int``; a bad value None, counted."""
    try:
        return parse_int(raw, "", maximum=COUNTER_MAX)
    except RecordError:
        rejected[UNPARSEABLE] += 1
        return None


def _yes_no(raw: str | None, rejected: collections.Counter[str]) -> bool | None:
    value = clean(raw)
    if value is None:
        return None
    if value.lower() in ("yes", "1", "true"):
        return True
    if value.lower() in ("no", "0", "false"):
        return False
    rejected[UNPARSEABLE] += 1
    return None


def _sum(values: list[int | None]) -> int | None:
    """The sum of the parts reported; None when none is."""
    present = [value for value in values if value is not None]
    return sum(present) if present else None


# ---- XML ---------------------------------------------------------------------------------------------


def _find(gpu: etree._Element, path: str) -> str | None:
    element = gpu.find(path)
    return None if element is None else element.text


def _throttle(gpu: etree._Element) -> int | None:
    block = gpu.find("clocks_event_reasons")
    if block is None:
        block = gpu.find("clocks_throttle_reasons")
    if block is None:
        return None
    mask, seen = 0, False
    for child in block:
        if not isinstance(child.tag, str):
            continue
        reason = child.tag.removeprefix("clocks_event_reason_").removeprefix("clocks_throttle_reason_")
        state = clean(child.text)
        if reason in REASON_BITS and state is not None:
            seen = True
            if state.lower() == "active":
                mask |= REASON_BITS[reason]
    return mask if seen else None


def _ecc(gpu: etree._Element, rejected: collections.Counter[str]) -> tuple[int | None, int | None, bool | None]:
    """(corrected, uncorrected, sram_threshold_exceeded) from ``ecc_errors/volatile``, in any of the layouts."""
    volatile = gpu.find("ecc_errors/volatile")
    if volatile is None:
        return None, None, None

    def count(path: str) -> int | None:
        return _count(_find(volatile, path), rejected)

    if volatile.find("single_bit") is not None:  # Pascal, Volta (and P2000 on 525)
        corrected, uncorrected = count("single_bit/total"), count("double_bit/total")
    else:  # Turing+: sram/dram; 570+ splits sram_uncorrectable into _parity and _secded
        corrected = _sum([count("sram_correctable"), count("dram_correctable")])
        uncorrected = _sum([count("sram_uncorrectable"), count("sram_uncorrectable_parity"),
                            count("sram_uncorrectable_secded"), count("dram_uncorrectable")])
    threshold = gpu.find("ecc_errors/aggregate/sram_threshold_exceeded")
    if threshold is None:
        threshold = volatile.find("sram_threshold_exceeded")
    return corrected, uncorrected, (None if threshold is None else _yes_no(threshold.text, rejected))


def _xml_sample(gpu: etree._Element, host: str | None, rejected: collections.Counter[str]) -> GpuSample:
    sample = GpuSample(host=host, uuid=normalize_uuid(clean(_find(gpu, "uuid"))))
    try:
        sample.pci_bus_id = normalize_pci_bus_id(clean(_find(gpu, "pci/pci_bus_id")) or gpu.get("id"))
    except ValueError:
        rejected[UNPARSEABLE] += 1
    sample.gpu_temp_c = checked_float(_measure(_find(gpu, "temperature/gpu_temp"), rejected),
                                      TEMP_MIN_C, TEMP_MAX_C, rejected)
    sample.mem_temp_c = checked_float(_measure(_find(gpu, "temperature/memory_temp"), rejected),
                                      TEMP_MIN_C, TEMP_MAX_C, rejected)
    sample.tlimit_c = checked_float(_measure(_find(gpu, "temperature/gpu_temp_tlimit"), rejected),
                                    TLIMIT_MIN_C, TLIMIT_MAX_C, rejected)
    for path in ("power_readings/power_draw", "gpu_power_readings/power_draw",
                 "gpu_power_readings/average_power_draw", "gpu_power_readings/instant_power_draw"):
        power = checked_float(_measure(_find(gpu, path), rejected), 0.0, POWER_MAX_W, rejected)
        if power is not None:
            sample.power_w = power
            break
    sample.sm_clock_mhz = checked_float(_measure(_find(gpu, "clocks/sm_clock"), rejected),
                                        0.0, SM_CLOCK_MAX_MHZ, rejected)
    sample.throttle_mask = _throttle(gpu)
    sample.ecc_sbe, sample.ecc_dbe, sample.sram_threshold_exceeded = _ecc(gpu, rejected)
    remapped = gpu.find("remapped_rows")
    if remapped is not None and len(remapped):  # the text "N/A" on pre-Ampere, GeForce and MIG A100
        sample.remap_corr = _count(_find(remapped, "remapped_row_corr"), rejected)
        sample.remap_unc = _count(_find(remapped, "remapped_row_unc"), rejected)
        sample.remap_failure = _yes_no(_find(remapped, "remapped_row_failure"), rejected)
    sample.pcie_replay = _count(_find(gpu, "pci/replay_counter"), rejected)
    return sample


def parse_nvsmi_xml(content: bytes, *, host: str | None, filename: str) -> ParsedBatch:
    """One sample per ``<gpu>`` of ``nvidia-smi -q -x`` output; raise TelemetryParseError for a bad document."""
    try:
        root = safexml.parse_xml(content)
    except safexml.UnsafeXmlError as exc:
        raise TelemetryParseError(exc.message, reason="unsafe_xml", line_no=exc.line) from None
    except etree.XMLSyntaxError as exc:
        raise TelemetryParseError(f"not well-formed XML: {exc.msg}", line_no=exc.lineno or None) from None
    if root.tag != ROOT_TAG:
        raise TelemetryParseError(f"not nvidia-smi -q -x output: the root element is <{root.tag}>",
                                  line_no=root.sourceline)
    batch = ParsedBatch(samples=[], xids=[], lines=content.count(b"\n") + 1)
    host = (host or "").strip().lower() or None
    batch.samples = [_xml_sample(gpu, host, batch.rejected) for gpu in root.iterchildren("gpu")]
    return batch


# ---- CSV ---------------------------------------------------------------------------------------------

# --query-gpu field -> GpuSample attribute; for the same attribute the first column present wins.
CSV_FIELDS = {
    "uuid": "uuid", "gpu_uuid": "uuid", "pci.bus_id": "pci_bus_id", "gpu_bus_id": "pci_bus_id",
    "hostname": "host",
    "temperature.gpu": "gpu_temp_c", "temperature.memory": "mem_temp_c", "temperature.gpu.tlimit": "tlimit_c",
    "power.draw": "power_w", "power.draw.average": "power_w", "power.draw.instant": "power_w",
    "clocks.sm": "sm_clock_mhz", "clocks.current.sm": "sm_clock_mhz",
    "clocks_event_reasons.active": "throttle_mask", "clocks_throttle_reasons.active": "throttle_mask",
    "ecc.errors.corrected.volatile.total": "ecc_sbe", "ecc.errors.corrected.aggregate.total": "ecc_sbe",
    "ecc.errors.uncorrected.volatile.total": "ecc_dbe", "ecc.errors.uncorrected.aggregate.total": "ecc_dbe",
    "remapped_rows.correctable": "remap_corr", "remapped_rows.uncorrectable": "remap_unc",
    "remapped_rows.failure": "remap_failure",
}
_FLOAT_BOUNDS = {"gpu_temp_c": (TEMP_MIN_C, TEMP_MAX_C), "mem_temp_c": (TEMP_MIN_C, TEMP_MAX_C),
                 "tlimit_c": (TLIMIT_MIN_C, TLIMIT_MAX_C), "power_w": (0.0, POWER_MAX_W),
                 "sm_clock_mhz": (0.0, SM_CLOCK_MAX_MHZ)}


def _mask(raw: str, rejected: collections.Counter[str]) -> int | None:
    """``'0x0000000000000001'`` (hex, as nvidia-smi prints it) -> 1."""
    value = clean(raw)
    if value is None:
        return None
    try:
        return checked_int(int(value, 16), MASK_MAX, rejected)
    except ValueError:
        rejected[UNPARSEABLE] += 1
        return None


def _csv_value(attr: str, raw: str, rejected: collections.Counter[str]) -> object:
    if attr in _FLOAT_BOUNDS:
        low, high = _FLOAT_BOUNDS[attr]
        return checked_float(_measure(raw, rejected), low, high, rejected)
    if attr == "throttle_mask":
        return _mask(raw, rejected)
    if attr == "remap_failure":
        return _yes_no(raw, rejected)
    if attr == "uuid":
        return normalize_uuid(clean(raw))
    if attr == "host":
        return (clean(raw) or "").lower() or None
    if attr == "pci_bus_id":
        try:
            return normalize_pci_bus_id(clean(raw))
        except ValueError:
            rejected[UNPARSEABLE] += 1
            return ""
    return _count(raw, rejected)


def parse_nvsmi_csv(text: str, *, host: str | None) -> ParsedBatch:
    """One sample per row of ``--query-gpu=...`` CSV (with its header; units or ``nounits``).

    The header is read as the importer reads it (:func:`inventory.importers.nvsmi_csv.check_header`): a
    field Fleet does not use is ignored with a notice; a header that is not nvidia-smi's refuses the body."""
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    header = next(reader, None)
    if header is None or not any(cell.strip() for cell in header):
        raise TelemetryParseError("the CSV is empty", line_no=1)
    names, refusal = check_header(header)
    if refusal is not None:
        raise TelemetryParseError(refusal, reason="header", line_no=1)
    columns = []
    taken: set[str] = set()
    for index, name in enumerate(names):
        attr = CSV_FIELDS.get(name)
        if attr is not None and attr not in taken:
            taken.add(attr)
            columns.append((index, attr))
    if not {"uuid", "pci_bus_id"} & taken:
        raise TelemetryParseError("the CSV has neither a uuid nor a pci.bus_id column: its rows cannot be tied "
                                  "to a GPU (add uuid to --query-gpu)", line_no=1)
    batch = ParsedBatch(samples=[], xids=[])
    if (notice := ignored_notice(header, names, set(CSV_FIELDS))) is not None:
        batch.notices.append(notice)
    default_host = (host or "").strip().lower() or None
    for row in reader:
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != len(names):
            raise TelemetryParseError(f"{len(row)} values for {len(names)} columns", line_no=reader.line_num)
        sample = GpuSample(host=default_host)
        for index, attr in columns:
            value = _csv_value(attr, row[index], batch.rejected)
            if attr != "host" or value is not None:
                setattr(sample, attr, value)
        batch.samples.append(sample)
    batch.lines = reader.line_num
    return batch
