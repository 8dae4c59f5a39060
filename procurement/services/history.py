"""Failure history import (``import_history``): a fleet moving from spreadsheets starts with its past.

CSV header ``serial,model,site,in_service_at,failed_at,removed_at,cause`` (optional ``batch``). Every row becomes
a GPU with its state history at those dates (in service; failed -> ``rma``; removed -> out of the fleet,
``disposed``), its asset (site, batch, service dates) and its failure. The whole file or nothing: any bad row
is reported with its line number and nothing is written.

Causes are written the way vendors and tools write them: ``cause_class`` maps a label through the synonym table
``CAUSE_SYNONYMS`` (and XID numbers through ``XID_CAUSE``) to Fleet's classes; a label it does not know is kept
verbatim in the failure's evidence with class ``other`` and counted in the result's notice, never refused. Dates
are ISO dates or ISO timestamps (with or without an offset; a timestamp with an offset counts on its UTC date). A row whose serial Fleet already holds with the same
history is skipped, so importing a file twice changes nothing.

Rows are written with PostgreSQL COPY (``fleet.bulk``), as inventory's importer writes its GPUs: 30,000 rows
through ``gpu_create`` one by one would take minutes.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from dataclasses import dataclass, field
from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.db import models, transaction
from django.utils import timezone

from fleet import bulk
from fleet.audit import Actor, actor_fields, audit_event, audit_write
from fleet.models import AuditAction, AuditEvent
from inventory.models import Gpu, GpuModel, GpuState, GpuStateChange, Site
from procurement.models import Cause, EvidenceKind, Failure, GpuAsset
from procurement.services.sync import XID_CAUSE

REQUIRED = ("serial", "model", "site", "in_service_at", "failed_at", "removed_at", "cause")
OPTIONAL = ("batch",)

# Vendor and tool labels of a failure cause -> Fleet's class (docs/procurement.md lists them). Keys are
# normalised: lower case, every run of spaces, "-", "_", "/" and "." read as one space.
CAUSE_SYNONYMS: dict[str, str] = {
    # memory: ECC double- and single-bit errors, HBM, row remapping
    "dbe": "hbm", "double bit ecc": "hbm", "double bit ecc error": "hbm", "ecc dbe": "hbm",
    "uncorrectable ecc": "hbm", "sbe": "hbm", "single bit ecc": "hbm", "single bit ecc error": "hbm",
    "ecc sbe": "hbm", "ecc": "hbm", "hbm": "hbm", "memory": "hbm", "mem": "hbm", "hbm memory": "hbm",
    "dram": "hbm", "row remap": "hbm", "row remapping": "hbm", "row remap failure": "hbm",
    # the board left the PCIe bus; PCIe link errors are read as the same class
    "otb": "off_bus", "off bus": "off_bus", "off the bus": "off_bus", "fell off the bus": "off_bus",
    "fallen off the bus": "off_bus", "gpu fell off the bus": "off_bus", "off_bus": "off_bus", "pcie": "off_bus",
    "pci e": "off_bus", "pcie error": "off_bus", "pcie link": "off_bus", "pci": "off_bus",
    "nvlink": "nvlink", "nvlink error": "nvlink", "nvswitch": "nvlink",
    "power": "power", "psu": "power", "power fault": "power", "power supply": "power",
    "thermal": "thermal", "overheat": "thermal", "overheating": "thermal", "over temperature": "thermal",
    "temperature": "thermal",
    "gpu": "gpu", "gsp": "gpu", "gpu hang": "gpu", "sram": "gpu",
    "other": "other", "unknown": "other",
}
_XID = re.compile(r"^(?:xid\s?)?(\d{1,3})$")


def _norm(label: str) -> str:
    return re.sub(r"[\s\-_/.]+", " ", label.strip().lower()).strip()


def cause_class(label: str) -> tuple[str, int | None] | None:
    """Fleet's cause class of a history's label, and its XID when the label is one; None: not a known label."""
    key = _norm(label)
    if key in CAUSE_SYNONYMS:
        return CAUSE_SYNONYMS[key], None
    if key.replace(" ", "_") in Cause.values:
        return key.replace(" ", "_"), None
    match = _XID.match(key)
    if match and int(match.group(1)) in XID_CAUSE:
        return XID_CAUSE[int(match.group(1))], int(match.group(1))
    return None


@dataclass
class HistoryResult:
    rows: int = 0
    created: int = 0
    unchanged: int = 0
    failures: int = 0
    created_sites: list[str] = field(default_factory=list)
    created_models: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # "line N: field: message"
    mapped: dict[tuple[str, str], int] = field(default_factory=dict)  # (label as written, class) -> rows
    unknown_causes: dict[str, int] = field(default_factory=dict)  # label kept verbatim, class other -> rows

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def notice(self) -> str:
        """What the import made of the file's causes: every label it mapped, and the ones it kept as ``other``."""
        parts = []
        if self.mapped:
            parts.append("causes mapped: " + ", ".join(
                f"{label} -> {cls} ({n})" for (label, cls), n in sorted(self.mapped.items())))
        if self.unknown_causes:
            n = sum(self.unknown_causes.values())
            parts.append(f"{n} failure(s) with {len(self.unknown_causes)} unknown cause label(s) kept verbatim as "
                         "class other: " + ", ".join(f"'{k}' ({v})" for k, v in sorted(self.unknown_causes.items())))
        return "; ".join(parts) or "no causes to map"


@dataclass
class _Row:
    line: int
    serial: str
    model: str
    site: str
    start: dt.date
    failed: dt.date | None
    removed: dt.date | None
    cause: str
    batch: str
    label: str = ""  # the cause as the file wrote it
    xid: int | None = None


def parse_day(value: str) -> dt.date | None:
    """An ISO date, or the date of an ISO timestamp (``2024-06-01T13:45:00+02:00``, ``...Z``, or naive); a
    timestamp with an offset counts on its UTC date. None: not a date."""
    value = value.strip()
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        pass
    try:
        stamp = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return stamp.astimezone(dt.UTC).date() if stamp.tzinfo else stamp.date()


def _date(value: str, name: str, line: int, errors: list[str]) -> dt.date | None:
    value = value.strip()
    if not value:
        return None
    day = parse_day(value)
    if day is None:
        errors.append(f"line {line}: {name}: '{value}' is not a date (YYYY-MM-DD or an ISO timestamp).")
    return day


def _parse(text: str, result: HistoryResult) -> list[_Row]:
    reader = csv.reader(io.StringIO(text))
    header = [h.strip().lower() for h in next(reader, [])]
    missing = [c for c in REQUIRED if c not in header]
    unknown = [c for c in header if c not in REQUIRED + OPTIONAL]
    if missing or unknown:
        problems = ([f"missing column(s) {', '.join(missing)}"] if missing else []) + (
            [f"unknown column(s) {', '.join(unknown)}"] if unknown else [])
        result.errors.append(f"line 1: header: {'; '.join(problems)}. Expected {','.join(REQUIRED)}[,batch].")
        return []
    col = {name: header.index(name) for name in header}
    rows: list[_Row] = []
    seen: dict[str, int] = {}
    for line, cells in enumerate(reader, start=2):
        if not any(c.strip() for c in cells):
            continue
        result.rows += 1
        errors = result.errors
        if len(cells) != len(header):
            errors.append(f"line {line}: row: {len(cells)} columns, the header has {len(header)}.")
            continue
        get = {name: cells[i].strip() for name, i in col.items()}
        before = len(errors)
        for name in ("serial", "model", "site", "in_service_at"):
            if not get[name]:
                errors.append(f"line {line}: {name}: required.")
        start = _date(get["in_service_at"], "in_service_at", line, errors)
        failed = _date(get["failed_at"], "failed_at", line, errors)
        removed = _date(get["removed_at"], "removed_at", line, errors)
        if start and failed and failed < start:
            errors.append(f"line {line}: failed_at: {failed} is before in_service_at {start}.")
        if start and removed and removed < start:
            errors.append(f"line {line}: removed_at: {removed} is before in_service_at {start}.")
        if failed and removed and removed < failed:
            errors.append(f"line {line}: removed_at: {removed} is before failed_at {failed}.")
        label = get["cause"]
        known = cause_class(label) if label else None
        cause, xid = known if known else (Cause.OTHER if label else "", None)
        if label and not get["failed_at"]:
            errors.append(f"line {line}: cause: given without failed_at.")
        if get["serial"] in seen:
            errors.append(f"line {line}: serial: {get['serial']} is also on line {seen[get['serial']]}.")
        seen.setdefault(get["serial"], line)
        if len(errors) == before and start:
            rows.append(_Row(line, get["serial"], get["model"], get["site"], start, failed, removed,
                             cause or (Cause.OTHER if failed else ""), get.get("batch", ""), label, xid))
            if label and known is None:
                result.unknown_causes[label] = result.unknown_causes.get(label, 0) + 1
            elif label:
                result.mapped[(label, cause)] = result.mapped.get((label, cause), 0) + 1
    return rows


def _tz(d: dt.date) -> dt.datetime:
    return dt.datetime.combine(d, dt.time(12, 0), tzinfo=dt.UTC)


@transaction.atomic
def history_import(*, text: str, create_missing: bool = False, actor: Actor) -> HistoryResult:
    """Import a failure-history CSV; see the module docstring. Returns the result; with errors nothing is written."""
    result = HistoryResult()
    rows = _parse(text, result)
    models = {m.name: m for m in GpuModel.objects.all()} | {m.sku: m for m in GpuModel.objects.all()}
    sites = {s.code: s for s in Site.objects.all()}
    new_models = sorted({r.model for r in rows} - set(models))
    new_sites = sorted({r.site for r in rows} - set(sites))
    if not create_missing:
        for r in rows:
            if r.model not in models:
                result.errors.append(f"line {r.line}: model: unknown model '{r.model}' (use --create-missing).")
            if r.site not in sites:
                result.errors.append(f"line {r.line}: site: unknown site '{r.site}' (use --create-missing).")
    existing = {}
    serials = [r.serial for r in rows]
    for i in range(0, len(serials), 5000):
        for gpu_id, serial, model_id, start in (GpuAsset.objects.filter(gpu__serial__in=serials[i:i + 5000])
                                                .values_list("gpu_id", "gpu__serial", "model_id", "in_service_on")):
            existing[serial] = (gpu_id, model_id, start)
        for serial in Gpu.objects.filter(serial__in=serials[i:i + 5000], asset__isnull=True).values_list(
                "serial", flat=True):
            existing[serial] = None
    fresh: list[_Row] = []
    for r in rows:
        if r.serial not in existing:
            fresh.append(r)
        elif existing[r.serial] is None:
            result.errors.append(f"line {r.line}: serial: {r.serial} is already in the fleet without history.")
        elif existing[r.serial][2] != r.start:
            result.errors.append(f"line {r.line}: serial: {r.serial} is already in the fleet, in service since "
                                 f"{existing[r.serial][2]}, not {r.start}.")
        else:
            result.unchanged += 1
    result.errors.sort(key=lambda e: int(e.split(":")[0].split()[1]))
    if result.errors:
        transaction.set_rollback(True)
        return result
    for name in new_models:
        models[name] = GpuModel.objects.create(name=name, sku=name[:80])
        audit_write(actor=actor, action=AuditAction.CREATE, obj=models[name], message="import_history")
        result.created_models.append(name)
    for code in new_sites:
        sites[code] = Site.objects.create(code=code, name=code)
        audit_write(actor=actor, action=AuditAction.CREATE, obj=sites[code], message="import_history")
        result.created_sites.append(code)
    _write(fresh, models, sites, actor, result)
    return result


def _columns(model: type[models.Model], now: dt.datetime) -> tuple[list[str], dict[str, Any]]:
    """Every concrete column of ``model`` (primary key first) and its default, for COPY from plain tuples:
    model instances cost two thirds of a 20,000-row import's time."""
    names, defaults = [], {}
    for f in model._meta.concrete_fields:
        names.append(f.attname)
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            defaults[f.attname] = now
        elif not f.primary_key:
            defaults[f.attname] = f.get_default()
    return names, defaults


def _copy(model: type[models.Model], rows: list[dict[str, Any]], now: dt.datetime) -> None:
    names, defaults = _columns(model, now)
    bulk.insert_values(model, names, ([row.get(n, defaults.get(n)) for n in names] for row in rows))


def _write(rows: list[_Row], models: dict[str, GpuModel], sites: dict[str, Site], actor: Actor,
           result: HistoryResult) -> None:
    now = timezone.now()
    name = actor_fields(actor)["actor_name"]
    ids = bulk.reserve_ids(Gpu, len(rows))
    gpus, changes, assets, failures, events = [], [], [], [], []
    template = audit_event(actor=actor, action=AuditAction.IMPORT, obj=GpuModel(pk=0), at=now,
                           content_type=ContentType.objects.get_for_model(Gpu))
    event_defaults = {f.attname: getattr(template, f.attname) for f in AuditEvent._meta.concrete_fields
                      if not f.primary_key}
    for r, pk in zip(rows, ids, strict=True):
        state = GpuState.DISPOSED if r.removed else GpuState.RMA if r.failed else GpuState.IN_SERVICE
        last = r.removed or r.failed or r.start
        model_id, site_id = models[r.model].pk, sites[r.site].pk
        gpus.append({"id": pk, "serial": r.serial, "serial_raw": r.serial, "model_id": model_id, "state": state,
                     "state_changed_at": _tz(last)})
        changes.append((pk, "", GpuState.IN_SERVICE, name, "imported history", _tz(r.start)))
        prev = GpuState.IN_SERVICE
        if r.failed:
            changes.append((pk, prev, GpuState.RMA, name, f"failed: {r.cause} (imported history)", _tz(r.failed)))
            prev = GpuState.RMA
            failures.append({"gpu_id": pk, "model_id": model_id, "site_id": site_id, "batch": r.batch,
                             "failed_on": r.failed, "cause": r.cause, "evidence_kind": EvidenceKind.IMPORT,
                             "xid": r.xid, "evidence": (f"imported history: cause '{r.label}'" if r.label
                                                        else "imported history")[:500]})
        if r.removed:
            changes.append((pk, prev, GpuState.DISPOSED, name, "removed from the fleet (imported history)",
                            _tz(r.removed)))
        assets.append({"gpu_id": pk, "model_id": model_id, "site_id": site_id, "batch": r.batch,
                       "in_service_on": r.start, "removed_on": r.removed})
        events.append(event_defaults | {"object_id": str(pk), "object_repr": r.serial,
                                        "changes": {"serial": [None, r.serial], "state": [None, state]},
                                        "message": f"import_history line {r.line}"})
    _copy(Gpu, gpus, now)
    bulk.insert_values(GpuStateChange, ("gpu_id", "from_state", "to_state", "actor_name", "reason", "at"), changes)
    _copy(GpuAsset, [a | {"id": i} for a, i in zip(assets, bulk.reserve_ids(GpuAsset, len(assets)), strict=True)],
          now)
    _copy(Failure, [f | {"id": i} for f, i in zip(failures, bulk.reserve_ids(Failure, len(failures)), strict=True)],
          now)
    _copy(AuditEvent, [e | {"id": i} for e, i in zip(events, bulk.reserve_ids(AuditEvent, len(events)),
                                                     strict=True)], now)
    result.created = len(rows)
    result.failures = len(failures)
