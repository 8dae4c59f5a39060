"""The parts of an import run that are plain data: its limits, the result and the per-record plan, and the small
helpers that compare and describe values (:mod:`inventory.imports.run` and :mod:`inventory.imports.write` use them)."""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, NamedTuple

from inventory.importers.base import FW_DRIVER, FW_INFOROM_IMAGE, FW_VBIOS, GpuRecord, ImportError_
from inventory.models import Gpu

CREATE, UPDATE, MOVE, UNCHANGED = "create", "update", "move", "unchanged"
MAX_ERRORS = 500
# ``FirmwareObservation.last_seen`` moves only when older than this: re-importing a fleet's files every few
# minutes would otherwise rewrite every observation row each time (6,000 rows per 1,000 GPUs).
LAST_SEEN_RESOLUTION = dt.timedelta(minutes=15)
CHUNK = 5000  # values per IN (...) list
ONE_QUERY_VALUES = 30_000  # PostgreSQL takes at most 65,535 parameters per query
BATCH = 2000
# Threads parsing the files of one import (``gpus_import_many``): the machine's cores, at most 4.
PARSE_THREADS = min(4, os.cpu_count() or 1)
HOSTNAME = re.compile(r"^[a-z0-9](?:[a-z0-9._\-]{0,251}[a-z0-9])?$")
DENORMALISED = {FW_VBIOS: "vbios_version", FW_INFOROM_IMAGE: "inforom_image", FW_DRIVER: "driver_version"}
MAX_LEN = {"serial_raw": 64, "uuid_raw": 64, "board_part_number": 64, "asset_tag": 64, "product_name": 100,
           "architecture": 40}
PLACEMENT = ("server", "site", "row", "rack", "pci_bus_id", "module_id")
GPU_ATTNAMES = tuple(f.attname for f in Gpu._meta.concrete_fields)
# A new GPU's column values before the import fills them in: what ``Gpu()`` holds (field defaults).
GPU_DEFAULTS = {f.attname: f.get_default() for f in Gpu._meta.concrete_fields}
GPU_ROW = itemgetter(*GPU_ATTNAMES)  # a dict of column values -> the row tuple
GPU_COLUMN = {attname: index for index, attname in enumerate(GPU_ATTNAMES)}


@dataclass
class ImportResult:
    created: int = 0
    updated: int = 0
    moved: int = 0
    unchanged: int = 0
    servers_created: list[str] = field(default_factory=list)
    models_created: list[str] = field(default_factory=list)
    errors: list[ImportError_] = field(default_factory=list)
    notices: list[ImportError_] = field(default_factory=list)  # harmless things read past (new CSV columns)
    rows: list[dict[str, Any]] = field(default_factory=list)
    applied: bool = False
    fmt: str = ""
    new_state: str = "received"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``ImportRun.summary``, API responses)."""
        return {"created": self.created, "updated": self.updated, "moved": self.moved, "unchanged": self.unchanged,
                "servers_created": self.servers_created, "models_created": self.models_created,
                "errors": [e.as_dict() for e in self.errors], "notices": [n.as_dict() for n in self.notices],
                "rows": self.rows, "applied": self.applied,
                "format": self.fmt, "new_state": self.new_state}


class ImportFile(NamedTuple):
    filename: str
    content: bytes
    server_hint: str = ""


def capped(errors: list[ImportError_]) -> list[ImportError_]:
    if len(errors) <= MAX_ERRORS:
        return errors
    first = errors[0]
    return [*errors[:MAX_ERRORS], ImportError_(first.file, None, "", f"... and {len(errors) - MAX_ERRORS} more")]


def chunks[T](values: Sequence[T], size: int = CHUNK) -> Iterator[Sequence[T]]:
    for start in range(0, len(values), size):
        yield values[start:start + size]


def model_key(name: str) -> str:
    return " ".join(name.split()).casefold()


def sku_for(name: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Z0-9]+", "-", re.sub(r"^NVIDIA\s+", "", name.strip(), flags=re.IGNORECASE).upper())
    base = base.strip("-")[:74] or "GPU"
    sku, n = base, 2
    while sku in taken:
        sku, n = f"{base}-{n}", n + 1
    taken.add(sku)
    return sku


def json_value(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.date) else value


def same_value(old: Any, new: Any) -> bool:
    if isinstance(old, str) and isinstance(new, str):
        return old.casefold() == new.casefold()  # versions differ in case between tools
    return old == new


@dataclass(slots=True)
class Plan:
    record: GpuRecord
    host: str | None  # the server the file puts the GPU in; None: keep its placement
    gpu: Gpu | None = None  # the GPU Fleet has (None for a new one: new GPUs are written as plain rows)
    gpu_id: int | None = None  # its id, or the id the new GPU gets
    action: str = UNCHANGED
    model_key: str | None = None
    state: str = ""
    changes: dict[str, list[Any]] = field(default_factory=dict)  # attname -> [before, after]
    target: tuple[str, str, int | None] | None = None  # (hostname, bus, module) when placement changes
    moved_from: tuple[str | None, str, int | None] | None = None



class NewRow(NamedTuple):
    """What :func:`fleet.audit.audit_row_maker` reads of a row written without a model instance."""

    pk: int
    name: str

    def __str__(self) -> str:
        return self.name


def gpu_name(*, pk: int, serial: str | None, uuid: str | None, serial_raw: str) -> str:
    """``str(gpu)`` (``Gpu.__str__``) of a GPU held as a row: the audit event's ``object_repr``."""
    return serial or uuid or serial_raw or f"GPU #{pk}"


def created_changes(row: tuple) -> dict[str, list[Any]]:
    """The audit changes of a new GPU (``row`` in :data:`GPU_ATTNAMES` order): what ``gpu_create`` writes,
    its non-empty snapshot, built from the row."""
    return {attname: [None, value.isoformat() if isinstance(value, dt.date) else value]
            for attname, value in zip(GPU_ATTNAMES, row, strict=True) if value is not None and value != ""}


def moved_changes(before: tuple[str | None, str, int | None], after: tuple[str | None, str, int | None]) -> dict[str, list]:
    return {name: [b, a] for name, b, a in zip(("server", "pci_bus_id", "module_id"), before, after, strict=True)
            if b != a}


def compatible(gpu: Gpu, rec: GpuRecord) -> bool:
    """May the GPU found in the record's slot be the record's GPU? Not if a real identity differs."""
    return not any(getattr(gpu, name) and getattr(rec, name) and getattr(gpu, name) != getattr(rec, name)
                   for name in ("serial", "uuid", "asset_tag"))

