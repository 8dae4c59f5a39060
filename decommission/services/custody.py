"""Chain of custody: every hand-off (from, to, seals, count, weight, carrier, time, both parties), the downstream
processor and its certification, the receipt; closing reconciles what arrived against what left. Each record is
also an evidence event, so custody is in the request's hash chain."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from decommission import lifecycle
from decommission.models import (
    Asset,
    CustodyKind,
    CustodyTransfer,
    DecommissionRequest,
    Processor,
    RequestState,
)
from decommission.services.evidence import event_append
from decommission.services.workflow import locked, request_move
from fleet.audit import Actor, audit_write, audited_create
from fleet.models import AuditAction

S = RequestState


@transaction.atomic
def processor_create(*, name: str, certification: str, certificate_id: str, expires_on: dt.date,
                     actor: Actor | None) -> Processor:
    return audited_create(model_class=Processor, actor=actor, name=name, certification=certification,
                          certificate_id=certificate_id, expires_on=expires_on)  # type: ignore[return-value]


def _validate(*, request: DecommissionRequest, kind: str, count: int, weight_kg: Decimal, seal_ids: list[str],
              parties: dict[str, str], processor: Processor | None, at: dt.datetime) -> dict[str, str]:
    errors: dict[str, str] = {name: "Required." for name, value in parties.items() if not str(value).strip()}
    expected = Asset.objects.filter(request=request).count()
    outbound = CustodyTransfer.objects.filter(request=request, kind=CustodyKind.HANDOFF).order_by("at", "id").first()
    if count != expected:
        errors["count"] = f"Count {count} does not match the {expected} items of {request}."
    if weight_kg <= 0:
        errors["weight_kg"] = "Weight must be positive."
    if not seal_ids or any(not s.strip() for s in seal_ids):
        errors["seal_ids"] = "List the seal ids on the shipment."
    if processor and processor.expires_on < at.date():
        errors["processor"] = f"{processor}'s {processor.certification} certification expired on " \
                              f"{processor.expires_on}."
    if kind == CustodyKind.RECEIPT:
        if processor is None:
            errors["processor"] = "A receipt comes from the downstream processor."
        if outbound is None:
            errors["kind"] = "Nothing left yet: record the outbound hand-off first."
        else:
            tolerance = max(outbound.weight_kg * Decimal(settings.DECOMMISSION_WEIGHT_TOLERANCE), Decimal("0.5"))
            if "count" not in errors and count != outbound.count:
                errors["count"] = f"Received {count}, but {outbound.count} left."
            if "weight_kg" not in errors and abs(weight_kg - outbound.weight_kg) > tolerance:
                errors["weight_kg"] = (f"Received {weight_kg} kg, but {outbound.weight_kg} kg left "
                                       f"(tolerance {tolerance} kg).")
    return errors


@transaction.atomic
def custody_record(*, request: DecommissionRequest, kind: str = CustodyKind.HANDOFF, from_party: str, to_party: str,
                   from_signed_by: str, to_signed_by: str, seal_ids: list[str], count: int, weight_kg: Decimal,
                   carrier: str = "", reference: str = "", processor: Processor | None = None,
                   at: dt.datetime | None = None, actor: Actor | None) -> CustodyTransfer:
    """Record a hand-off or the downstream receipt. The first hand-off of a released request ships it."""
    request = locked(request)
    at = at or timezone.now()
    if kind not in CustodyKind.values:
        raise ValidationError({"kind": f"'{kind}' is not a custody record kind."})
    allowed = {S.RELEASED, S.IN_TRANSIT} if kind == CustodyKind.HANDOFF else {S.IN_TRANSIT, S.DISPOSED}
    if request.state not in allowed:
        raise ValidationError({"kind": f"A {kind} cannot be recorded while the request is '{request.state}'."})
    weight_kg = Decimal(str(weight_kg))
    errors = _validate(request=request, kind=kind, count=count, weight_kg=weight_kg, seal_ids=seal_ids, at=at,
                       processor=processor, parties={"from_party": from_party, "to_party": to_party,
                                                     "from_signed_by": from_signed_by, "to_signed_by": to_signed_by})
    if errors:
        raise ValidationError(errors)
    detail: dict[str, Any] = {
        "kind": kind, "from": from_party, "to": to_party, "from_signed_by": from_signed_by,
        "to_signed_by": to_signed_by, "seal_ids": list(seal_ids), "count": count, "weight_kg": str(weight_kg),
        "carrier": carrier, "reference": reference, "at": at.astimezone(dt.UTC).isoformat(),
        "processor": {"name": processor.name, "certification": processor.certification,
                      "certificate_id": processor.certificate_id,
                      "expires_on": processor.expires_on.isoformat()} if processor else None}
    event = event_append(request=request, step=f"custody.{kind}", result="recorded", actor=actor, detail=detail)
    transfer = CustodyTransfer.objects.create(
        request=request, kind=kind, from_party=from_party, to_party=to_party, from_signed_by=from_signed_by,
        to_signed_by=to_signed_by, seal_ids=list(seal_ids), count=count, weight_kg=weight_kg, carrier=carrier,
        reference=reference, processor=processor, at=at, event=event)
    audit_write(actor=actor, action=AuditAction.CREATE, obj=transfer, message=f"custody {kind}",
                changes={"count": [None, count], "weight_kg": [None, str(weight_kg)]})
    if kind == CustodyKind.HANDOFF and request.state == S.RELEASED:
        request_move(request=request, action_name="ship", actor=actor, detail={"custody": transfer.pk})
    return transfer


@transaction.atomic
def request_close(*, request: DecommissionRequest, actor: Actor | None) -> DecommissionRequest:
    """Closed: needs the downstream receipt, reconciled (count and weight) against what left."""
    request = locked(request)
    lifecycle.check("close", request.state)
    receipt = CustodyTransfer.objects.filter(request=request, kind=CustodyKind.RECEIPT).order_by("-at", "-id").first()
    if receipt is None:
        raise ValidationError({"receipt": "Closing needs the downstream receipt (signed BOL or certificate of "
                                          "destruction/processing)."})
    return request_move(request=request, action_name="close", actor=actor, receipt_reference=receipt.reference,
                        detail={"receipt": receipt.pk, "reference": receipt.reference})
