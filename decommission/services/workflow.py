"""Every write to a decommission request's state: create, the lifecycle actions, legal hold, cancel, downgrade
exceptions. Each owns its transaction, checks the transition table, writes an audit event and an evidence event.

Inventory's GPU lifecycle (decommissioning -> sanitized -> disposed) is moved here and only here: the guard in
``decommission.guards`` refuses those states outside :func:`workflow_moves` or without valid certificates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from decommission import lifecycle
from decommission.guards import workflow_moves
from decommission.models import (
    LEVEL_RANK,
    Asset,
    AssetState,
    DecommissionRequest,
    Level,
    MediaState,
    Medium,
    Outcome,
    RequestState,
)
from decommission.policy import minimum_level
from decommission.services.evidence import anchors_detail, chain_verify, event_append
from fleet.audit import Actor, audit_write
from fleet.dispatch import send_on_commit
from fleet.models import AuditAction
from inventory.models import Gpu, GpuState, Server
from inventory.services import gpu_bulk_transition

S = RequestState
OPEN_STATES = [s for s in RequestState.values if s not in lifecycle.FINAL]
DONE_MEDIA = (MediaState.SANITIZED, MediaState.RECORDED, MediaState.DESTROYED)


def _same_person(a: Actor | None, b_id: int | None) -> bool:
    return b_id is not None and getattr(a, "pk", None) == b_id


@transaction.atomic
def request_create(*, servers: Sequence[Server] = (), gpus: Sequence[Gpu] = (), reason: str, category: str,
                   destination: str, level: str = "", location: str = "", actor: Actor | None) -> DecommissionRequest:
    """A request for these servers (with their GPUs) and loose GPUs. Level defaults to the policy minimum."""
    errors: dict[str, Any] = {}
    if not servers and not gpus:
        errors["servers"] = "Name at least one server or GPU."
    if not reason.strip():
        errors["reason"] = "Say why these leave the fleet."
    minimum = minimum_level(category=category, destination=destination)
    level = level or minimum
    if level not in Level.values:
        errors["level"] = f"'{level}' is not a level; use clear, purge or destroy."
    elif LEVEL_RANK[level] < LEVEL_RANK[minimum]:
        errors["level"] = (f"'{level}' is below the policy minimum '{minimum}' for {category} data going to "
                           f"{destination}; raise it, or ask an approver for a downgrade exception.")
    busy = set(Asset.objects.filter(request__state__in=OPEN_STATES, server__in=servers)
               .values_list("server__hostname", flat=True))
    busy |= {str(g) for g in Gpu.objects.filter(pk__in=[g.pk for g in gpus])
             if Asset.objects.filter(request__state__in=OPEN_STATES, gpu=g).exists()}
    if busy:
        errors["servers"] = f"Already in an open decommission request: {', '.join(sorted(busy))}."
    loose = [g for g in gpus if g.server_id and g.server_id in {s.pk for s in servers}]
    if loose:
        errors["gpus"] = f"Already covered by their server: {', '.join(map(str, loose))}."
    if errors:
        raise ValidationError(errors)
    request = DecommissionRequest.objects.create(
        reason=reason.strip(), category=category, destination=destination, min_level=minimum, level=level,
        location=location, requested_by=actor if getattr(actor, "pk", None) else None,
        state_changed_at=timezone.now())
    Asset.objects.bulk_create([Asset(request=request, server=s, label=s.hostname) for s in servers]
                              + [Asset(request=request, gpu=g, label=str(g)) for g in gpus])
    audit_write(actor=actor, action=AuditAction.CREATE, obj=request,
                changes={"state": [None, S.REQUESTED], "level": [None, level], "assets": [None, len(servers)
                                                                                        + len(gpus)]})
    event_append(request=request, step="request", result="requested", actor=actor,
                 detail={"category": category, "destination": destination, "min_level": minimum, "level": level,
                         "servers": sorted(s.hostname for s in servers), "gpus": sorted(str(g) for g in gpus)})
    return request


def _move(request: DecommissionRequest, action: lifecycle.Action, actor: Actor | None, *, message: str = "",
          detail: dict[str, Any] | None = None, **fields: Any) -> DecommissionRequest:
    """Compare-and-set the state (and ``fields``), audit it, chain it. The caller holds the row lock."""
    to_state = lifecycle.target(action, request.held_from)
    before = request.state
    now = timezone.now()
    updated = DecommissionRequest.objects.filter(pk=request.pk, version=request.version, state=before).update(
        state=to_state, version=request.version + 1, state_changed_at=now, **fields)
    if not updated:
        raise lifecycle.IllegalTransition(action.name, before, "The request changed meanwhile; reload and retry.")
    for name, value in fields.items():
        setattr(request, name, value)
    request.state, request.version, request.state_changed_at = to_state, request.version + 1, now
    audit_write(actor=actor, action=AuditAction.TRANSITION, obj=request, changes={"state": [before, to_state]},
                message=message or action.label)
    event_append(request=request, step=f"state.{action.name}", result=to_state, actor=actor,
                 detail={"from": before, "to": to_state, **(detail or {})})
    return request


def locked(request: DecommissionRequest) -> DecommissionRequest:
    return DecommissionRequest.objects.select_for_update().get(pk=request.pk)


def request_gpus(request: DecommissionRequest) -> list[Gpu]:
    assets = Asset.objects.filter(request=request)
    return list(Gpu.objects.filter(server__in=assets.values("server")).order_by("id")) + \
        list(Gpu.objects.filter(pk__in=assets.values("gpu")).order_by("id"))


def gpus_to(gpus: Sequence[Gpu], to_state: str, actor: Actor | None, reason: str) -> None:
    """Walk the GPUs to ``to_state`` through inventory's lifecycle (in service -> drained -> decommissioning), in
    all-or-nothing chunks of inventory's bulk transition (a refused GPU refuses the whole call)."""
    moving = [g for g in gpus if g.state != to_state]
    if to_state == GpuState.DECOMMISSIONING:
        _bulk([g.pk for g in moving if g.state in (GpuState.IN_SERVICE, GpuState.BURN_IN)], GpuState.DRAINED,
              actor, reason)
    _bulk([g.pk for g in moving], to_state, actor, reason)


def _bulk(ids: list[int], to_state: str, actor: Actor | None, reason: str) -> None:
    step = settings.FLEET_BULK_SYNC_LIMIT
    for start in range(0, len(ids), step):
        try:
            gpu_bulk_transition(gpu_ids=ids[start:start + step], to_state=to_state, actor=actor, reason=reason)
        except ValidationError as exc:
            raise ValidationError({"gpus": exc.messages}) from None


@transaction.atomic
def request_approve(*, request: DecommissionRequest, actor: Actor | None) -> DecommissionRequest:
    request = locked(request)
    action = lifecycle.check("approve", request.state)
    if _same_person(actor, request.requested_by_id):
        raise ValidationError({"approver": "The requester cannot approve their own request (two-person rule)."})
    return _move(request, action, actor, approved_by=actor)


@transaction.atomic
def request_drain(*, request: DecommissionRequest, actor: Actor | None) -> DecommissionRequest:
    """Drained: no jobs; the GPUs leave service through inventory's lifecycle into ``decommissioning``."""
    request = locked(request)
    action = lifecycle.check("drain", request.state)
    gpus = request_gpus(request)
    gpus_to(gpus, GpuState.DECOMMISSIONING, actor, f"{request}: decommission")
    return _move(request, action, actor, detail={"gpus": len(gpus)})


@transaction.atomic
def request_hold(*, request: DecommissionRequest, reason: str, actor: Actor | None) -> DecommissionRequest:
    if not reason.strip():
        raise ValidationError({"reason": "A legal hold needs a reason (case or matter reference)."})
    request = locked(request)
    action = lifecycle.check("hold", request.state)
    return _move(request, action, actor, message=reason, detail={"reason": reason},
                 held_from=request.state, hold_reason=reason.strip())


@transaction.atomic
def request_release_hold(*, request: DecommissionRequest, actor: Actor | None) -> DecommissionRequest:
    request = locked(request)
    action = lifecycle.check("release_hold", request.state)
    request = _move(request, action, actor, held_from="", hold_reason="")
    if request.state == S.SANITIZING:
        send_on_commit("decommission.tasks.tick_task")
    return request


@transaction.atomic
def request_cancel(*, request: DecommissionRequest, reason: str, actor: Actor | None) -> DecommissionRequest:
    request = locked(request)
    action = lifecycle.check("cancel", request.state, request.held_from)
    gpus = [g for g in request_gpus(request) if g.state == GpuState.DECOMMISSIONING]
    gpus_to(gpus, GpuState.DRAINED, actor, f"{request}: cancelled")
    return _move(request, action, actor, message=reason or "cancelled", detail={"reason": reason})


@transaction.atomic
def request_downgrade(*, request: DecommissionRequest, level: str, reason: str,
                      actor: Actor | None) -> DecommissionRequest:
    """An approved exception: a level below the policy, with a reason, by an approver who did not request it."""
    request = locked(request)
    errors = {}
    if request.state not in lifecycle.BEFORE_SANITIZING:
        errors["level"] = "The level can change only before sanitizing."
    if level not in Level.values:
        errors["level"] = f"'{level}' is not a level."
    if not reason.strip():
        errors["reason"] = "A downgrade needs a reason."
    if _same_person(actor, request.requested_by_id):
        errors["approver"] = "The requester cannot approve a downgrade of their own request."
    if errors:
        raise ValidationError(errors)
    before = request.level
    DecommissionRequest.objects.filter(pk=request.pk).update(level=level, downgrade_reason=reason,
                                                             downgrade_approved_by=actor)
    request.level, request.downgrade_reason = level, reason
    audit_write(actor=actor, action=AuditAction.UPDATE, obj=request, changes={"level": [before, level]},
                message=f"downgrade exception: {reason}")
    event_append(request=request, step="policy.exception", result="approved", actor=actor,
                 detail={"from": before, "to": level, "minimum": request.min_level, "reason": reason})
    return request


@transaction.atomic
def request_start_sanitizing(*, request: DecommissionRequest, actor: Actor | None) -> DecommissionRequest:
    """Sanitizing: the operator starts it (a legal hold refuses); the workers take the assets from here."""
    request = locked(request)
    action = lifecycle.check("sanitize", request.state)
    if not Medium.objects.filter(request=request).exists():
        raise ValidationError("No media were inventoried; record the media before sanitizing.")
    now = timezone.now()
    Asset.objects.filter(request=request).exclude(state=AssetState.SANITIZED).update(
        state=AssetState.SANITIZING, next_run_at=now)
    Medium.objects.filter(request=request, state=MediaState.FAILED).update(state=MediaState.PENDING)
    request = _move(request, action, actor, operator=actor if getattr(actor, "pk", None) else request.operator)
    send_on_commit("decommission.tasks.tick_task")
    return request


@transaction.atomic
def request_escalate(*, request: DecommissionRequest, reason: str, actor: Actor | None) -> DecommissionRequest:
    request = locked(request)
    action = lifecycle.check("escalate", request.state)
    Medium.objects.filter(request=request, state=MediaState.FAILED).update(state=MediaState.ESCALATED)
    return _move(request, action, actor, message=reason or "escalated to destroy", detail={"reason": reason})


@transaction.atomic
def request_record_destruction(*, request: DecommissionRequest, reference: str, method: str, facility: str,
                               actor: Actor | None) -> DecommissionRequest:
    """Physical destruction of every medium not sanitized: a certificate-of-destruction reference per request."""
    errors = {k: "Required." for k, v in (("reference", reference), ("method", method), ("facility", facility))
              if not v.strip()}
    if errors:
        raise ValidationError(errors)
    request = locked(request)
    action = lifecycle.check("destroyed", request.state)
    media = list(Medium.objects.filter(request=request).exclude(state__in=(MediaState.RECORDED,))
                 .exclude(state=MediaState.SANITIZED, level=Level.DESTROY).order_by("id"))
    if request.level != Level.DESTROY:
        media = [m for m in media if m.state != MediaState.SANITIZED]
    now = timezone.now()
    for medium in media:
        event_append(request=request, medium=medium, step="destroy", tool=facility, command=method,
                     result="destroyed", actor=actor, detail={"reference": reference, "method": method})
    Medium.objects.filter(pk__in=[m.pk for m in media]).update(
        state=MediaState.DESTROYED, level=Level.DESTROY, technique=f"Destruct: {method}", tool=facility,
        detail=f"certificate of destruction {reference}", done_at=now)
    return _move(request, action, actor, detail={"reference": reference, "media": len(media)})


def media_outstanding(request: DecommissionRequest) -> list[Medium]:
    return list(Medium.objects.filter(request=request).exclude(state__in=DONE_MEDIA).order_by("id"))


@transaction.atomic
def request_validate(*, request: DecommissionRequest, actor: Actor | None, notes: str = "") -> DecommissionRequest:
    """Validated (r2 §4.5.2): a second person, not the operator, accepts the outcome after checking the chain."""
    request = locked(request)
    action = lifecycle.check("validate", request.state)
    if _same_person(actor, request.operator_id):
        raise ValidationError({"validator": "The operator who ran the sanitization cannot validate it "
                                            "(two-person rule)."})
    outstanding = media_outstanding(request)
    if outstanding:
        raise ValidationError(f"{len(outstanding)} media are not done: {', '.join(map(str, outstanding[:5]))}.")
    check = chain_verify(request=request)
    if not check.ok:
        raise ValidationError(f"The evidence chain is broken: {check.reason}.")
    detail: dict[str, Any] = {"notes": notes, "chain_head": check.head}
    if check.heads:  # every asset chain's head, anchored in the request's chain by the validation event itself
        detail["anchors"] = anchors_detail(check.heads)
    return _move(request, action, actor, validated_by=actor if getattr(actor, "pk", None) else None, detail=detail)


def request_move(*, request: DecommissionRequest, action_name: str, actor: Actor | None,
                 detail: dict[str, Any] | None = None, **fields: Any) -> DecommissionRequest:
    """A plain transition for services of this app (caller holds the lock and checked its own preconditions)."""
    action = lifecycle.check(action_name, request.state)
    return _move(request, action, actor, detail=detail, **fields)


@transaction.atomic
def request_release(*, request: DecommissionRequest, actor: Actor | None) -> DecommissionRequest:
    request = locked(request)
    return request_move(request=request, action_name="release", actor=actor)


@transaction.atomic
def request_dispose(*, request: DecommissionRequest, outcome: str, actor: Actor | None) -> DecommissionRequest:
    """Disposed (reused / resold / returned / destroyed / recycled): the GPUs become ``disposed`` in inventory."""
    if outcome not in Outcome.values:
        raise ValidationError({"outcome": f"'{outcome}' is not an outcome; use {', '.join(Outcome.values)}."})
    request = locked(request)
    lifecycle.check("dispose", request.state)
    with workflow_moves():
        gpus_to(request_gpus(request), GpuState.DISPOSED, actor, f"{request}: {outcome}")
    return request_move(request=request, action_name="dispose", actor=actor, detail={"outcome": outcome},
                        outcome=outcome)


@transaction.atomic
def request_inventory_start(*, request: DecommissionRequest, actor: Actor | None) -> DecommissionRequest:
    """Ask the workers to read every server's media from its BMC (the request moves when all are recorded)."""
    request = locked(request)
    lifecycle.check("inventory", request.state)
    event_append(request=request, step="inventory", result="requested", actor=actor)
    send_on_commit("decommission.tasks.inventory_task", request.pk)
    return request
