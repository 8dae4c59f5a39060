"""Failures and RMA cases. A failure is recorded once, with the lifecycle event (to ``rma``) it came with; the RMA
case with the vendor follows its own transition table (``RMA_ALLOWED``): open -> shipped -> replaced -> closed."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q

from fleet.audit import Actor, audited_create, audited_update
from fleet.kept import KeptRead
from inventory import services as inventory_services
from inventory.lifecycle import ALLOWED
from inventory.models import Gpu, GpuState, GpuStateChange
from procurement.models import Cause, EvidenceKind, Failure, GpuAsset, RmaCase, RmaStatus, Vendor

R = RmaStatus
RMA_ALLOWED: dict[str, frozenset[str]] = {
    R.OPEN: frozenset({R.SHIPPED, R.CLOSED}),
    R.SHIPPED: frozenset({R.REPLACED, R.CLOSED}),
    R.REPLACED: frozenset({R.CLOSED}),
    R.CLOSED: frozenset(),
}


def rma_refusal(case: RmaCase, to_status: str) -> str | None:
    """Why ``case`` cannot go to ``to_status`` now (None: it can). Views, API and services ask this."""
    if to_status not in RMA_ALLOWED[case.status]:
        allowed = ", ".join(sorted(RMA_ALLOWED[case.status])) or "none (closed)"
        return f"An RMA case cannot go from '{case.status}' to '{to_status}'. From '{case.status}' it may go to: {allowed}."
    return None


def _check(case: RmaCase, to_status: str) -> None:
    refusal = rma_refusal(case, to_status)
    if refusal:
        raise ValidationError({"status": refusal})


def _asset(gpu: Gpu) -> GpuAsset | None:
    return GpuAsset.objects.filter(gpu=gpu).select_related("order_line__order__vendor").first()


@transaction.atomic
def failure_record(*, gpu: Gpu, failed_on: dt.date, cause: str, evidence_kind: str = EvidenceKind.NOTE,
                   xid: int | None = None, evidence: str = "", state_change: GpuStateChange | None = None,
                   actor: Actor) -> Failure:
    """Record that ``gpu`` failed on ``failed_on``; a second record for the same board and day returns the first."""
    if cause not in Cause.values:
        raise ValidationError({"cause": f"'{cause}' is not a cause; causes are {', '.join(Cause.values)}."})
    existing = Failure.objects.filter(gpu=gpu, failed_on=failed_on).first()
    if existing:
        return existing
    asset = _asset(gpu)
    site_id = gpu.site_id or (asset.site_id if asset else None)
    failure = audited_create(model_class=Failure, actor=actor, gpu=gpu, model_id=gpu.model_id, site_id=site_id,
                             batch=asset.batch if asset else "", failed_on=failed_on, cause=cause,
                             evidence_kind=evidence_kind, xid=xid, evidence=evidence, state_change=state_change)
    return failure  # type: ignore[return-value]


def rma_open_refusal(gpu: Gpu, *, cases: list[RmaCase] | None = None) -> str | None:
    """Why ``gpu`` may not get an RMA case now, or None. ``cases``: its cases as :func:`rma_cases_for_gpu` read
    them (the GPU page has them already), so its open case is not read again."""
    if cases is not None:
        has_open = any(case.gpu_id == gpu.pk and case.status != R.CLOSED for case in cases)
    else:
        has_open = RmaCase.objects.filter(gpu=gpu).exclude(status=R.CLOSED).exists()
    if has_open:
        return f"{gpu.identity} already has an open RMA case."
    if gpu.state != GpuState.RMA and GpuState.RMA not in ALLOWED[gpu.state]:
        return f"A {gpu.get_state_display().lower()} GPU cannot go to RMA: drain it first."
    return None


@transaction.atomic
def rma_open(*, gpu: Gpu, cause: str, opened_on: dt.date, vendor: Vendor | None = None, vendor_case: str = "",
             evidence_kind: str = EvidenceKind.NOTE, xid: int | None = None, evidence: str = "", note: str = "",
             actor: Actor) -> RmaCase:
    """Open a case with the vendor for ``gpu`` (moved to ``rma`` first if it is not there) and record its failure
    with the lifecycle event. The vendor defaults to the one the board was bought from."""
    gpu = Gpu.objects.select_for_update().get(pk=gpu.pk)
    refusal = rma_open_refusal(gpu)
    if refusal:
        raise ValidationError({"gpu": refusal})
    if vendor is None:
        asset = _asset(gpu)
        vendor = asset.order_line.order.vendor if asset and asset.order_line_id else None
        if vendor is None:
            raise ValidationError({"vendor": "The board has no order line: name the vendor."})
    if gpu.state != GpuState.RMA:
        inventory_services.gpu_transition(gpu=gpu, to_state=GpuState.RMA, actor=actor,
                                          reason=f"RMA: {cause} {evidence}".strip()[:500])
    change = GpuStateChange.objects.filter(gpu=gpu, to_state=GpuState.RMA).order_by("-at", "-id").first()
    failure = failure_record(gpu=gpu, failed_on=opened_on, cause=cause, evidence_kind=evidence_kind, xid=xid,
                             evidence=evidence, state_change=change, actor=actor)
    case = audited_create(model_class=RmaCase, actor=actor, gpu=gpu, vendor=vendor, failure=failure,
                          vendor_case=vendor_case, opened_on=opened_on, note=note, status=R.OPEN)
    return case  # type: ignore[return-value]


@transaction.atomic
def rma_ship(*, case: RmaCase, shipped_on: dt.date, carrier: str, tracking: str, vendor_case: str = "",
             actor: Actor) -> RmaCase:
    case = RmaCase.objects.select_for_update().get(pk=case.pk)
    _check(case, R.SHIPPED)
    if shipped_on < case.opened_on:
        raise ValidationError({"shipped_on": "The ship date is before the case was opened."})
    fields: dict[str, Any] = {"status": R.SHIPPED, "shipped_on": shipped_on, "carrier": carrier, "tracking": tracking}
    if vendor_case:
        fields["vendor_case"] = vendor_case
    audited_update(obj=case, actor=actor, **fields)
    return case


@transaction.atomic
def rma_replace(*, case: RmaCase, serial: str, received_on: dt.date, actor: Actor) -> RmaCase:
    """The vendor's replacement arrived: ``serial`` creates a GPU in ``received`` (or links the one Fleet has),
    with the old board's site, model and batch-free asset; the case links old and new boards."""
    case = RmaCase.objects.select_for_update().select_related("gpu").get(pk=case.pk)
    _check(case, R.REPLACED)
    serial = serial.strip()
    if not serial:
        raise ValidationError({"serial": "The replacement's serial is required."})
    if received_on < case.opened_on:
        raise ValidationError({"received_on": "The replacement date is before the case was opened."})
    if serial == case.gpu.serial:
        raise ValidationError({"serial": "That is the failed board's own serial."})
    replacement = Gpu.objects.filter(serial=serial).first()
    if replacement is not None and (replacement.model_id != case.gpu.model_id):
        raise ValidationError({"serial": f"{serial} is a {replacement.model}, not a {case.gpu.model}."})
    if replacement is not None and RmaCase.objects.filter(replacement=replacement).exists():
        raise ValidationError({"serial": f"{serial} already replaced another board."})
    old_asset = _asset(case.gpu)
    if replacement is None:
        replacement = inventory_services.gpu_create(actor=actor, serial=serial, model=case.gpu.model,
                                                    state=GpuState.RECEIVED,
                                                    warranty_end=old_asset.warranty_end if old_asset else None,
                                                    reason=f"RMA replacement for {case.gpu.identity}")
    if not GpuAsset.objects.filter(gpu=replacement).exists():
        audited_create(model_class=GpuAsset, actor=actor, gpu=replacement, model=replacement.model,
                       site=old_asset.site if old_asset else case.gpu.site, batch="RMA",
                       warranty_start=received_on,  # not on the order line: it would count as delivered
                       warranty_end=old_asset.warranty_end if old_asset else None,
                       support_end=old_asset.support_end if old_asset else None)
    audited_update(obj=case, actor=actor, status=R.REPLACED, replacement=replacement, replaced_on=received_on)
    return case


@transaction.atomic
def rma_close(*, case: RmaCase, closed_on: dt.date, note: str = "", actor: Actor) -> RmaCase:
    case = RmaCase.objects.select_for_update().get(pk=case.pk)
    _check(case, R.CLOSED)
    if closed_on < case.opened_on:
        raise ValidationError({"closed_on": "The close date is before the case was opened."})
    audited_update(obj=case, actor=actor, status=R.CLOSED, closed_on=closed_on, note=note or case.note)
    return case


# The cases of a board, as the board or its replacement: read on every view of a GPU page, the statement is kept
# (fleet.kept).
_cases_for_gpu = KeptRead(lambda gpu_id, replacement_id: RmaCase.objects.filter(
    Q(gpu_id=gpu_id) | Q(replacement_id=replacement_id)).select_related("vendor", "replacement")
                          .order_by("-opened_on", "-id"))


def rma_cases_for_gpu(gpu: Gpu) -> list[RmaCase]:
    return _cases_for_gpu(gpu.pk, gpu.pk)
