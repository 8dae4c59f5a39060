"""Fleet's own CSV: the GPU list's export, and an import that takes the export back unchanged.

Columns are :data:`FLEET_CSV_COLUMNS`; an import file may hold any subset, in any order. An empty
cell means "keep what Fleet has" (so a column can't be cleared by import: use the UI or the API).
Cells that a spreadsheet would run as a formula (``=``, ``+``, ``-``, ``@``) are exported with a
leading ``'`` and the import strips it again, so the round trip is exact.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Iterator
from typing import Any

from django.db.models import QuerySet

from inventory.identity import normalize_pci_bus_id
from inventory.importers.base import (
    FLEET_CSV,
    FW_DRIVER,
    FW_INFOROM_IMAGE,
    FW_VBIOS,
    GpuRecord,
    ImportError_,
    ParseResult,
    RecordError,
    clean,
    parse_int,
)
from inventory.models import Gpu, GpuState

FLEET_CSV_COLUMNS: tuple[str, ...] = (
    "serial", "uuid", "model", "board_part_number", "asset_tag", "warranty_end", "state", "hostname",
    "module_id", "pci_bus_id", "vbios_version", "inforom_image", "driver_version",
)
# Column -> GpuRecord attribute or firmware component; also the names errors use.
_ATTRS = {"model": "product_name", "vbios_version": FW_VBIOS, "inforom_image": FW_INFOROM_IMAGE,
          "driver_version": FW_DRIVER}
FIELDS = {_ATTRS.get(column, column): column for column in FLEET_CSV_COLUMNS}
_FIRMWARE = {FW_VBIOS, FW_INFOROM_IMAGE, FW_DRIVER}
_STATES = {**{s.value: s.value for s in GpuState}, **{str(s.label).lower(): s.value for s in GpuState}}
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

_EXPORT_FIELDS = ("serial", "serial_raw", "uuid", "uuid_raw", "model__name", "board_part_number", "asset_tag",
                  "warranty_end", "state", "server__hostname", "module_id", "pci_bus_id", "vbios_version",
                  "inforom_image", "driver_version")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    text = value.isoformat() if isinstance(value, dt.date) else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def gpu_csv_rows(queryset: QuerySet[Gpu]) -> Iterator[list[str]]:
    """The header, then one row per GPU of ``queryset`` (in its order), as lists of strings.

    Streams: ``values_list`` plus ``iterator(chunk_size=2000)``, no model instances, no joins per row.
    Masked serials/UUIDs are exported as reported (``REDACTED``), so re-importing them matches nothing
    new. Feed the rows to ``csv.writer`` (the UI's streaming export, the API).
    """
    yield list(FLEET_CSV_COLUMNS)
    rows = queryset.values_list(*_EXPORT_FIELDS).iterator(chunk_size=2000)
    for (serial, serial_raw, uuid, uuid_raw, model, part, asset_tag, warranty_end, state, hostname, module_id,
         pci_bus_id, vbios, inforom, driver) in rows:
        yield [_cell(serial or serial_raw), _cell(uuid or uuid_raw), _cell(model), _cell(part), _cell(asset_tag),
               _cell(warranty_end), state, _cell(hostname), _cell(module_id), pci_bus_id, _cell(vbios),
               _cell(inforom), _cell(driver)]


def _value(raw: str) -> str | None:
    if raw.startswith("'") and raw[1:2] in _FORMULA_START and len(raw) > 1:
        raw = raw[1:]
    return clean(raw)


def _set(record: GpuRecord, column: str, raw: str) -> None:
    value = _value(raw)
    attr = _ATTRS.get(column, column)
    if attr in _FIRMWARE:
        if value is not None:
            record.firmware[attr] = value
    elif column == "serial":
        record.set_serial(value)
    elif column == "uuid":
        record.set_uuid(value)
    elif column == "warranty_end":
        if value is not None:
            try:
                record.warranty_end = dt.date.fromisoformat(value)
            except ValueError:
                raise RecordError(column, f"{value!r} is not a date (YYYY-MM-DD)") from None
    elif column == "state":
        if value is not None:
            if value.lower() not in _STATES:
                raise RecordError(column, f"unknown state {value!r} (one of {', '.join(GpuState.values)})")
            record.state = _STATES[value.lower()]
    elif column == "module_id":
        record.module_id = parse_int(value, column)
    elif column == "pci_bus_id":
        try:
            record.pci_bus_id = normalize_pci_bus_id(value) or None
        except ValueError as exc:
            raise RecordError(column, str(exc)) from None
    elif column == "hostname":
        record.hostname = value.lower() if value else None
    else:
        setattr(record, attr, value)


def is_fleet_header(names: list[str]) -> bool:
    return bool(names) and all(name in FLEET_CSV_COLUMNS for name in names)


def parse_fleet_csv(text: str, *, filename: str) -> ParseResult:
    """Parse Fleet CSV text. Unknown or repeated columns are errors naming the column."""
    result = ParseResult(fmt=FLEET_CSV)
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or not any(cell.strip() for cell in header):
        result.errors.append(ImportError_(filename, 1, "header", "the file is empty"))
        return result
    names = [cell.strip().lower() for cell in header]
    for index, name in enumerate(names):
        if name not in FLEET_CSV_COLUMNS:
            result.errors.append(ImportError_(filename, 1, header[index].strip() or f"column {index + 1}",
                                              f"unknown column (Fleet CSV columns: {', '.join(FLEET_CSV_COLUMNS)})"))
        elif names.index(name) != index:
            result.errors.append(ImportError_(filename, 1, name, "the column appears twice"))
    if result.errors:
        return result
    for row in reader:
        line = reader.line_num
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(names):
            result.errors.append(ImportError_(filename, line, "row", f"{len(row)} values for {len(names)} columns"))
            continue
        record = GpuRecord(line=line, fields=FIELDS)
        problems = len(result.errors)
        for index, column in enumerate(names):
            try:
                _set(record, column, row[index])
            except RecordError as exc:
                result.errors.append(ImportError_(filename, line, exc.field, exc.message))
        if record.hostname is None and (record.pci_bus_id is not None or record.module_id is not None):
            result.errors.append(ImportError_(filename, line, "hostname", "a PCI bus id or module id needs a "
                                                                          "hostname"))
        if len(result.errors) == problems:
            result.records.append(record)
    if not result.records and not result.errors:
        result.errors.append(ImportError_(filename, None, "row", "the file holds a header but no GPU"))
    return result
