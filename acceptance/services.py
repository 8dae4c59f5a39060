"""Every write of the acceptance app: ingesting diagnostic runs and acceptance checks, burn-in policies, and moving
a delivery's or a rack's GPUs through burn-in. Each owns its transaction and audit events."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from acceptance.gate import evaluate_many
from acceptance.models import (
    AcceptanceCheck,
    CheckThreshold,
    DiagnosticResult,
    DiagnosticRun,
    RunGpu,
    TestStatus,
    Verdict,
)
from acceptance.parsers import DiagDocument, DiagParseError, infer_level, parse_diag
from fleet.audit import Actor, actor_fields, audit_write
from fleet.models import AuditAction
from inventory import services as inventory_services
from inventory.identity import normalize_pci_bus_id
from inventory.models import Gpu, GpuState, Server


def _bus(raw: str) -> str:
    try:
        return normalize_pci_bus_id(raw)
    except ValueError:
        return ""


def place_entities(doc: DiagDocument, server: Server | None) -> dict[int, tuple[Gpu, str]]:
    """Each GPU entity of the document -> (GPU, how it was placed). Serial first, then the PCI bus id, then the
    entity's index among the host's GPUs in bus order (NVML numbers GPUs in PCI bus order). Raises
    ``ValidationError`` naming every entity that cannot be placed."""
    host_gpus = list(Gpu.objects.filter(server=server).order_by("pci_bus_id", "module_id", "id")) if server else []
    by_bus = {_bus(g.pci_bus_id): g for g in host_gpus if g.pci_bus_id}
    ordered: list[Gpu] = []
    if host_gpus and all(g.pci_bus_id for g in host_gpus):
        ordered = sorted(host_gpus, key=lambda g: _bus(g.pci_bus_id))
    elif host_gpus and all(g.minor_number is not None for g in host_gpus):
        ordered = sorted(host_gpus, key=lambda g: g.minor_number)  # type: ignore[arg-type,return-value]
    serial_gpus = {g.serial: g for g in Gpu.objects.filter(serial__in=list(doc.serials.values()))}
    placed: dict[int, tuple[Gpu, str]] = {}
    errors: list[str] = []
    for eid in doc.gpu_ids:
        serial = doc.serials.get(eid)
        if serial and serial in serial_gpus:
            placed[eid] = (serial_gpus[serial], "serial")
            continue
        bus = _bus(doc.bus_ids.get(eid, ""))
        if bus and bus in by_bus:
            placed[eid] = (by_bus[bus], "pci_bus_id")
            continue
        if server is None:
            errors.append(f"GPU {eid}: " + (f"serial {serial} is not in Fleet" if serial else "no serial in the "
                          "document") + "; name the host so it can be placed by its slot")
            continue
        if not ordered:
            errors.append(f"GPU {eid}: {server.hostname} has {len(host_gpus)} GPU(s) in Fleet without PCI bus ids "
                          "or indexes to place it by")
            continue
        if eid >= len(ordered):
            errors.append(f"GPU {eid}: {server.hostname} has only {len(ordered)} GPU(s) in Fleet")
            continue
        candidate = ordered[eid]
        if serial and candidate.serial and candidate.serial != serial:
            errors.append(f"GPU {eid}: the document says serial {serial}, Fleet has {candidate.serial} at "
                          f"{server.hostname} {candidate.pci_bus_id}; refusing to guess")
            continue
        placed[eid] = (candidate, "host_index")
    seen: dict[int, int] = {}
    for eid, (gpu, _) in placed.items():
        if gpu.pk in seen:
            errors.append(f"GPU {eid} and GPU {seen[gpu.pk]} both resolve to {gpu.identity}")
        seen[gpu.pk] = eid
    if not doc.gpu_ids:
        errors.append("the document names no GPU")
    if errors:
        raise ValidationError({"document": [f"Cannot place the result: {e}." for e in errors]})
    return placed


def gpu_verdict(doc: DiagDocument, eid: int) -> tuple[str, list[str]]:
    """pass / fail / incomplete for one GPU of a run, with the reasons. A run whose tests did not run (not run,
    runtime error, nothing for this GPU) is ``incomplete``, never a pass; a skipped test is noted."""
    reasons: list[str] = []
    mine = [(t, r) for t in doc.tests for r in t.results if r.entity_id in (eid, None)]
    failed = [(t, r) for t, r in mine if r.status == TestStatus.FAIL]
    not_run = [(t, r) for t, r in mine if r.status == TestStatus.NOT_RUN]
    for t, r in failed:
        reasons.append(f"{t.name}: fail" + (f" ({'; '.join(r.messages)[:300]})" if r.messages else ""))
    if failed:
        return Verdict.FAIL, reasons
    if doc.runtime_error:
        return Verdict.INCOMPLETE, [f"runtime error: {doc.runtime_error[:300]}"]
    if not any(r.status in (TestStatus.PASS, TestStatus.WARN) for _, r in mine):
        return Verdict.INCOMPLETE, ["no test ran on this GPU"]
    if not_run:
        return Verdict.INCOMPLETE, [f"{t.name}: not run ({r.status_raw or 'no status'})" for t, r in not_run]
    reasons += [f"{t.name}: skipped" for t, r in mine if r.status == TestStatus.SKIP]
    reasons += [f"{t.name}: warning" for t, r in mine if r.status == TestStatus.WARN]
    return Verdict.PASS, reasons


def _burn_in_failed(gpu: Gpu, reason: str, actor: Actor | None) -> None:
    """A GPU in burn-in whose evidence failed goes to ``burn_in_failed``: a person retests or sends it to RMA."""
    if gpu.state == GpuState.BURN_IN:
        inventory_services.gpu_transition(gpu=gpu, to_state=GpuState.BURN_IN_FAILED, actor=actor, reason=reason[:500])


@transaction.atomic
def diag_ingest(*, document: str | bytes | dict[str, Any], server: Server | None, level: int | None = None,
                ran_at: dt.datetime | None = None, source: str = "api", actor: Actor | None) -> DiagnosticRun:
    """Record one ``dcgmi diag -j`` run. Refuses (``ValidationError``, nothing written) a document that is not a
    diagnostic, or whose GPUs cannot all be placed. A GPU in burn-in that failed moves to ``burn_in_failed``."""
    try:
        doc = parse_diag(document)
    except DiagParseError as exc:
        raise ValidationError({"document": str(exc)}) from exc
    if level is not None and not 1 <= level <= 4:
        raise ValidationError({"level": "The diagnostic level is 1, 2, 3 or 4."})
    now = timezone.now()
    if ran_at is not None and ran_at > now + dt.timedelta(minutes=5):
        raise ValidationError({"ran_at": "The run cannot end in the future."})
    placed = place_entities(doc, server)
    run = DiagnosticRun.objects.create(
        server=server, level=level or infer_level(doc), level_inferred=level is None, dcgm_version=doc.dcgm_version,
        dcgm_major=doc.major, driver_version=doc.driver_version, runtime_error=doc.runtime_error,
        ran_at=ran_at or now, source=source, document=doc.raw, actor_name=actor_fields(actor)["actor_name"])
    results: list[DiagnosticResult] = []
    verdicts: list[RunGpu] = []
    for eid, (gpu, how) in sorted(placed.items()):
        verdict, reasons = gpu_verdict(doc, eid)
        verdicts.append(RunGpu(run=run, gpu=gpu, entity_id=eid, placed_by=how, verdict=verdict, reasons=reasons))
        results.extend(DiagnosticResult(run=run, gpu=gpu, category=test.category[:60], test=test.name[:100],
                                        status=r.status, status_raw=r.status_raw[:40], error_ids=r.error_ids,
                                        messages=r.messages, raw=r.raw)
                       for test in doc.tests for r in test.results if r.entity_id in (eid, None))
    RunGpu.objects.bulk_create(verdicts)
    DiagnosticResult.objects.bulk_create(results, batch_size=2000)
    counts = {v: sum(1 for x in verdicts if x.verdict == v) for v in Verdict.values}
    audit_write(actor=actor, action=AuditAction.IMPORT, obj=run, at=now,
                changes={"level": [None, run.level], "gpus": [None, len(verdicts)], **{
                    f"verdict.{k}": [None, n] for k, n in counts.items() if n}},
                message=f"dcgmi diag run ({source}) on {server.hostname if server else 'GPUs by serial'}")
    for v in verdicts:
        if v.verdict == Verdict.FAIL:
            gpu = Gpu.objects.select_for_update().get(pk=v.gpu.pk)
            _burn_in_failed(gpu, f"burn-in failed: diagnostic run #{run.pk}: {'; '.join(v.reasons)}", actor)
    return run


@transaction.atomic
def check_record(*, gpu: Gpu, name: str, passed: bool | None = None, value: float | None = None, unit: str = "",
                 details: str = "", measured_at: dt.datetime | None = None, actor: Actor | None) -> AcceptanceCheck:
    """Record a site acceptance check (NCCL all-reduce, nvbandwidth, HPL, ...). A measured value is judged by the
    threshold of the GPU's model; without a threshold the result must say pass or fail."""
    name = name.strip()
    if not name:
        raise ValidationError({"name": "A check name is required."})
    threshold = CheckThreshold.objects.filter(gpu_model_id=gpu.model_id, name=name).first()
    limits: dict[str, Any] = {}
    if value is not None and threshold is not None:
        limits = {"min": threshold.min_value, "max": threshold.max_value, "unit": threshold.unit}
        within = ((threshold.min_value is None or value >= threshold.min_value)
                  and (threshold.max_value is None or value <= threshold.max_value))
        if passed is not None and passed != within:
            raise ValidationError({"passed": f"The value {value:g} is {'within' if within else 'outside'} the "
                                             f"{gpu.model} threshold for {name}; leave 'passed' out."})
        passed = within
        unit = unit or threshold.unit
    if passed is None:
        raise ValidationError({"passed": f"No {name} threshold for {gpu.model}: say whether the check passed."})
    check = AcceptanceCheck.objects.create(gpu=gpu, name=name[:60], passed=passed, value=value, unit=unit[:20],
                                           threshold=limits, details=details, actor_name=actor_fields(actor)["actor_name"],
                                           measured_at=measured_at or timezone.now())
    audit_write(actor=actor, action=AuditAction.CREATE, obj=check,
                changes={"passed": [None, passed], "value": [None, value]}, message=f"{name} on {gpu.identity}")
    if not passed:
        _burn_in_failed(Gpu.objects.select_for_update().get(pk=gpu.pk),
                        f"burn-in failed: {name} {'' if value is None else f'{value:g} {unit}'} {details}".strip(),
                        actor)
    return check


@dataclass
class BurnInResult:
    moved: list[int] = field(default_factory=list)  # moved now
    held: list[dict[str, Any]] = field(default_factory=list)
    queued: list[int] = field(default_factory=list)  # a group above FLEET_BULK_SYNC_LIMIT: moved by a background job
    job: int | None = None


def _transition(result: BurnInResult, ids: list[int], to_state: str, actor: Actor | None, reason: str) -> None:
    """Move now (all or nothing), or, for a large group, start the background job and say so: queued, not moved."""
    outcome = inventory_services.gpu_bulk_transition(gpu_ids=ids, to_state=to_state, actor=actor, reason=reason)
    if isinstance(outcome, inventory_services.BulkResult):
        result.moved = ids
    else:
        result.queued, result.job = ids, outcome.pk


def burn_in_start(*, gpus: Iterable[Gpu], actor: Actor | None, reason: str = "") -> BurnInResult:
    """Put every received (or drained, or spare) GPU of a group into burn-in together; others are reported."""
    result = BurnInResult()
    ids = []
    for gpu in gpus:
        if gpu.state in (GpuState.RECEIVED, GpuState.DRAINED, GpuState.SPARE, GpuState.BURN_IN_FAILED):
            ids.append(gpu.pk)
        elif gpu.state != GpuState.BURN_IN:
            result.held.append({"gpu": gpu.pk, "identity": gpu.identity, "reason": f"is {gpu.get_state_display()}"})
    if ids:
        _transition(result, ids, GpuState.BURN_IN, actor, reason or "burn-in started")
    return result


def burn_in_complete(*, gpus: Iterable[Gpu], actor: Actor | None, reason: str = "") -> BurnInResult:
    """Move the group's GPUs in burn-in whose evidence meets the policy into service; the rest stay, with why.
    The lifecycle gate checks each again inside the transition."""
    result = BurnInResult()
    ready = []
    in_burn_in = [g for g in gpus if g.state == GpuState.BURN_IN]
    gate = evaluate_many(in_burn_in)
    for gpu in in_burn_in:
        status = gate[gpu.pk]
        if status.met:
            ready.append(gpu.pk)
        else:
            result.held.append({"gpu": gpu.pk, "identity": gpu.identity, "reason": "; ".join(status.reasons)})
    if ready:
        _transition(result, ready, GpuState.IN_SERVICE, actor, reason or "burn-in passed")
    return result
