"""``nvidia-smi --query-gpu=... --format=csv[,nounits]`` output, with its header line.

Headers carry units unless ``nounits`` (``memory.total [MiB]``); so do values (``81559 MiB``).
``[N/A]`` and ``[Not Supported]`` are absent values. Telemetry columns operators add to the same
query (``temperature.gpu``, ``power.draw``, ``utilization.gpu``, ...) are accepted and ignored;
a name outside nvidia-smi's field families is an error naming the column.
"""

from __future__ import annotations

import csv
import io
import re

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

# Real nvidia-smi fields Fleet does not import (telemetry, modes, counters): accepted and ignored.
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


def _set(record: GpuRecord, attr: str, raw: str, column: str) -> None:
    if attr in _FIRMWARE:
        if (version := clean(raw)) is not None:
            record.firmware[attr] = version
    elif attr == "serial":
        record.set_serial(clean(raw))
    elif attr == "uuid":
        record.set_uuid(clean(raw))
    elif attr == "pci_bus_id":
        try:
            record.pci_bus_id = normalize_pci_bus_id(clean(raw)) or None
        except ValueError as exc:
            raise RecordError(column, str(exc)) from None
    elif attr == "memory_mib":
        record.memory_mib = parse_int(raw, column, maximum=2**31 - 1)
    elif attr in ("minor_number", "module_id"):
        setattr(record, attr, parse_int(raw, column))
    elif attr == "hostname":
        record.hostname = (clean(raw) or "").lower() or None
    else:
        setattr(record, attr, clean(raw))


def parse_nvidia_smi_csv(text: str, *, filename: str) -> ParseResult:
    """Parse ``--query-gpu`` CSV text (with its header line)."""
    result = ParseResult(fmt=NVIDIA_SMI_CSV)
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    header = next(reader, None)
    if header is None or not any(cell.strip() for cell in header):
        result.errors.append(ImportError_(filename, 1, "header", "the file is empty"))
        return result
    names = [header_field(cell) for cell in header]
    if not all(_FIELD_NAME.match(name) for name in names):
        result.errors.append(ImportError_(filename, 1, "header", "the first line is not a header; run nvidia-smi "
                                          "with --format=csv (or csv,nounits), without noheader"))
        return result
    seen: set[str] = set()
    for index, name in enumerate(names):
        if not is_known_field(name):
            result.errors.append(ImportError_(filename, 1, header[index].strip(),
                                              f"unknown nvidia-smi field {name!r}"))
        elif name in MAPPED:
            if MAPPED[name] in seen:
                result.errors.append(ImportError_(filename, 1, header[index].strip(), "the column appears twice"))
            seen.add(MAPPED[name])
    if result.errors:
        return result
    fields = {MAPPED[name]: header[i].strip() for i, name in enumerate(names) if name in MAPPED}
    fields.setdefault("hostname", "server")
    columns = [(i, MAPPED[name]) for i, name in enumerate(names) if name in MAPPED]
    for row in reader:
        line = reader.line_num
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != len(names):
            result.errors.append(ImportError_(filename, line, "row", f"{len(row)} values for {len(names)} columns"))
            continue
        record = GpuRecord(line=line, fields=fields)
        problems = len(result.errors)
        for index, attr in columns:
            try:
                _set(record, attr, row[index], fields[attr])
            except RecordError as exc:
                result.errors.append(ImportError_(filename, line, exc.field, exc.message))
        if len(result.errors) > problems:
            continue
        result.records.append(record)
    if not result.records and not result.errors:
        result.errors.append(ImportError_(filename, None, "row", "the file holds a header but no GPU"))
    return result
