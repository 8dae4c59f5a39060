"""``nvidia-smi --query-gpu=... --format=csv[,nounits]`` output, with its header line.

Headers carry units unless ``nounits`` (``memory.total [MiB]``); so do values (``81559 MiB``).
``[N/A]`` and ``[Not Supported]`` are absent values. Every driver release adds fields (590-610:
``gsp.mode.current``, ``dramencryption.mode.current``, ``module.power.draw.average``, ``kmd_version``,
``edpp_multiplier``, ``gpu.base.*``, ``bbx.time_run``, ...), so the header is read liberally: a well-formed
field name Fleet does not import is ignored with a notice (:attr:`ParseResult.notices`). Only a header that
is not nvidia-smi's (a cell that is not a field name, or no field Fleet knows at all), a column that
appears twice, or a bad value in a column Fleet imports is an error.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

from inventory.identity import normalize_pci_bus_id
from inventory.importers.base import (
    FW_DRIVER,
    FW_INFOROM_ECC,
    FW_INFOROM_IMAGE,
    FW_INFOROM_OEM,
    FW_INFOROM_PWR,
    FW_VBIOS,
    NVIDIA_SMI_CSV,
    GpuRecord,
    ImportError_,
    ParseResult,
    RecordError,
    clean,
    parse_int,
)

# nvidia-smi field (and its alias) -> GpuRecord attribute or firmware component.
MAPPED = {
    "name": "product_name", "gpu_name": "product_name",
    "serial": "serial", "gpu_serial": "serial",
    "uuid": "uuid", "gpu_uuid": "uuid",
    "pci.bus_id": "pci_bus_id", "gpu_bus_id": "pci_bus_id",
    "index": "minor_number",
    "memory.total": "memory_mib",
    "platform.module_id": "module_id",
    "hostname": "hostname",
    "vbios_version": FW_VBIOS,
    "driver_version": FW_DRIVER,
    "inforom.img": FW_INFOROM_IMAGE, "inforom.image": FW_INFOROM_IMAGE,
    "inforom.oem": FW_INFOROM_OEM,
    "inforom.ecc": FW_INFOROM_ECC,
    "inforom.pwr": FW_INFOROM_PWR, "inforom.power": FW_INFOROM_PWR,
}
_FIRMWARE = {FW_VBIOS, FW_DRIVER, FW_INFOROM_IMAGE, FW_INFOROM_OEM, FW_INFOROM_ECC, FW_INFOROM_PWR}

# Real nvidia-smi fields Fleet does not import (telemetry, modes, counters): what tells an nvidia-smi header
# from another CSV's (a header needs at least one known field). Fields outside these families are ignored too.
IGNORED_FIELDS = frozenset({
    "timestamp", "count", "pstate", "display_mode", "display_active", "display_attached", "persistence_mode",
    "compute_mode", "compute_cap", "addressing_mode", "accounting.buffer_size", "driver_model.current",
    "driver_model.pending", "gpu_recovery_action", "vgpu_device_capability", "pdi",
})
IGNORED_PREFIXES = (
    "temperature.", "power.", "enforced.power.", "utilization.", "clocks.", "clocks_throttle_reasons.",
    "clocks_event_reasons.", "clocks_event_reasons_counters.", "ecc.", "retired_pages.", "remapped_rows.",
    "fan.", "memory.", "pcie.", "pci.", "encoder.", "fbc.", "mig.", "gom.", "accounting.", "driver_model.",
    "protected_memory.", "reset_status.", "inforom.", "vgpu_driver_capability.", "vgpu_device_capability.",
    "platform.", "fabric.", "power_smoothing.", "clocks_event_reasons_counters.", "c2c.",
)
_UNIT = re.compile(r"\s*\[[^\]]*\]\s*$")
_FIELD_NAME = re.compile(r"^[a-z][a-z0-9_.]*$")


def header_field(cell: str) -> str:
    """``'memory.total [MiB]'`` -> ``'memory.total'``."""
    return _UNIT.sub("", cell.strip().lstrip("\ufeff")).strip().lower()


def is_known_field(name: str) -> bool:
    return name in MAPPED or name in IGNORED_FIELDS or name.startswith(IGNORED_PREFIXES)


def is_field_name(name: str) -> bool:
    """A well-formed nvidia-smi field name (``gsp.mode.current``, ``bbx.time_run``), known or not."""
    return bool(_FIELD_NAME.match(name)) and ".." not in name and not name.endswith(".")


NOT_A_HEADER = ("the first line is not an nvidia-smi header; run nvidia-smi with --query-gpu=... "
                "--format=csv (or csv,nounits), without noheader")


def check_header(header: list[str]) -> tuple[list[str], str | None]:
    """The header's field names, and why it is not nvidia-smi's (``None`` when it is).

    nvidia-smi's header is its field names, each with an optional ``[unit]``; at least one must be a field
    Fleet knows, so another tool's CSV whose columns merely look like field names is not taken for it.
    """
    names = [header_field(cell) for cell in header]
    if not all(is_field_name(name) for name in names) or not any(is_known_field(name) for name in names):
        return names, NOT_A_HEADER
    return names, None


def ignored_notice(header: list[str], names: list[str], used: set[str]) -> str | None:
    """One notice naming the columns that are read past (``None`` when every column is used)."""
    ignored = [header[i].strip() for i, name in enumerate(names) if name not in used]
    if not ignored:
        return None
    new = [cell for cell in ignored if not is_known_field(header_field(cell))]
    return (f"{len(ignored)} column(s) ignored, Fleet does not use them here: {', '.join(ignored)}"
            + (f" (not in the fields Fleet knows, from a newer driver?: {', '.join(new)})" if new else ""))


def _convert(attr: str, raw: str, column: str) -> Any:
    """A cell of the column that holds ``attr`` as the value GpuRecord keeps; RecordError when it is malformed."""
    if attr == "pci_bus_id":
        try:
            return normalize_pci_bus_id(clean(raw)) or None
        except ValueError as exc:
            raise RecordError(column, str(exc)) from None
    if attr == "memory_mib":
        return parse_int(raw, column, maximum=2**31 - 1)
    if attr in ("minor_number", "module_id"):
        return parse_int(raw, column)
    if attr == "hostname":
        return (clean(raw) or "").lower() or None
    return clean(raw)


_UNSEEN = object()
# Columns whose values differ on every row: converting them through a cache would only fill it.
_UNIQUE = frozenset({"serial", "uuid"})


def parse_nvidia_smi_csv(text: str, *, filename: str) -> ParseResult:
    """Parse ``--query-gpu`` CSV text (with its header line)."""
    result = ParseResult(fmt=NVIDIA_SMI_CSV)
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    header = next(reader, None)
    if header is None or not any(cell.strip() for cell in header):
        result.errors.append(ImportError_(filename, 1, "header", "the file is empty"))
        return result
    names, refusal = check_header(header)
    if refusal is not None:
        result.errors.append(ImportError_(filename, 1, "header", refusal))
        return result
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name in MAPPED:
            if MAPPED[name] in seen:
                result.errors.append(ImportError_(filename, 1, header[index].strip(), "the column appears twice"))
            seen.add(MAPPED[name])
    if result.errors:
        return result
    if (notice := ignored_notice(header, names, set(MAPPED))) is not None:
        result.notices.append(ImportError_(filename, 1, "header", notice))
    fields = {MAPPED[name]: header[i].strip() for i, name in enumerate(names) if name in MAPPED}
    fields.setdefault("hostname", "server")
    # (index, attribute, column name, cache of converted cells): model names, versions, bus ids and hostnames
    # repeat row after row, so each distinct cell is converted once per file.
    columns = [(i, MAPPED[name], fields[MAPPED[name]], None if MAPPED[name] in _UNIQUE else {})
               for i, name in enumerate(names) if name in MAPPED]
    width = len(names)
    for row in reader:
        line = reader.line_num
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != width:
            result.errors.append(ImportError_(filename, line, "row", f"{len(row)} values for {width} columns"))
            continue
        record = GpuRecord(line=line, fields=fields)
        good = True
        for index, attr, column, cache in columns:
            raw = row[index]
            try:
                if cache is None:
                    value = _convert(attr, raw, column)
                elif (value := cache.get(raw, _UNSEEN)) is _UNSEEN:
                    value = cache[raw] = _convert(attr, raw, column)
            except RecordError as exc:
                result.errors.append(ImportError_(filename, line, exc.field, exc.message))
                good = False
                continue
            if attr in _FIRMWARE:
                if value is not None:
                    record.firmware[attr] = value
            elif attr == "serial":
                record.set_serial(value)
            elif attr == "uuid":
                record.set_uuid(value)
            else:
                setattr(record, attr, value)
        if good:
            result.records.append(record)
    if not result.records and not result.errors:
        result.errors.append(ImportError_(filename, None, "row", "the file holds a header but no GPU"))
    return result
