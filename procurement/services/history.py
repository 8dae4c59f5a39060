"""Failure history import (``import_history``): a fleet moving from spreadsheets starts with its past.

CSV header ``serial,model,site,in_service_at,failed_at,removed_at,cause`` (optional ``batch``). Every row becomes
a GPU with its state history at those dates (in service; failed -> ``rma``; removed -> out of the fleet,
``disposed``), its asset (site, batch, service dates) and its failure. The whole file or nothing: any bad row
is reported with its line number and nothing is written. A row whose serial Fleet already holds with the same
history is skipped, so importing a file twice changes nothing.

Rows are written with PostgreSQL COPY (``fleet.bulk``), as inventory's importer writes its GPUs: 30,000 rows
through ``gpu_create`` one by one would take minutes.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
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

REQUIRED = ("serial", "model", "site", "in_service_at", "failed_at", "removed_at", "cause")
OPTIONAL = ("batch",)


@dataclass
class HistoryResult:
    rows: int = 0
    created: int = 0
    unchanged: int = 0
    failures: int = 0
    created_sites: list[str] = field(default_factory=list)
    created_models: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # "line N: field: message"

    @property
    def ok(self) -> bool:
        return not self.errors


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


def _date(value: str, name: str, line: int, errors: list[str]) -> dt.date | None:
    value = value.strip()
    if not value:
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        errors.append(f"line {line}: {name}: '{value}' is not a date (YYYY-MM-DD).")
        return None


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
        cause = get["cause"].lower()
        if cause and cause not in Cause.values:
            errors.append(f"line {line}: cause: '{get['cause']}' is not a cause ({', '.join(Cause.values)}).")
        if cause and not get["failed_at"]:
            errors.append(f"line {line}: cause: given without failed_at.")
        if get["serial"] in seen:
            errors.append(f"line {line}: serial: {get['serial']} is also on line {seen[get['serial']]}.")
        seen.setdefault(get["serial"], line)
        if len(errors) == before and start:
            rows.append(_Row(line, get["serial"], get["model"], get["site"], start, failed, removed,
                             cause or (Cause.OTHER if failed else ""), get.get("batch", "")))
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
                             "evidence": "imported history"})
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
