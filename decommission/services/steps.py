"""The outcome of a step on a medium, written by workers (and the host agent's upload): the evidence event, the
medium's new state, and, when nothing is left to do, the request's move to ``verifying`` (or to
``escalated_destroy`` when a medium failed three times on the device, or the level is Destroy)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from decommission.models import (
    Asset,
    AssetState,
    DecommissionRequest,
    Level,
    MediaState,
    Medium,
    RequestState,
)
from decommission.services.evidence import event_append, events_append_many
from decommission.services.workflow import DONE_MEDIA, request_move
from fleet.audit import Actor


@transaction.atomic
def medium_finish(*, medium: Medium, state: str, actor: Actor | None, tool: str = "", tool_version: str = "",
                  command: str = "", output: str = "", detail: dict[str, Any] | None = None, reason: str = "",
                  device_failure: bool = False) -> Medium:
    """Record a step's end on ``medium``: done (``sanitized``/``recorded``) or ``failed``. Safe to run twice: a
    medium already done is left alone. A device-reported failure counts; the third escalates to destroy."""
    medium = Medium.objects.select_for_update().get(pk=medium.pk)
    if medium.state in DONE_MEDIA or medium.state == MediaState.ESCALATED:
        return medium
    request = DecommissionRequest.objects.get(pk=medium.request_id)
    medium.attempts += 1
    fields: dict[str, Any] = {"attempts": medium.attempts, "detail": (reason or medium.detail)[:300]}
    if state in DONE_MEDIA:
        fields |= {"state": state, "done_at": timezone.now(), "tool": f"{tool} {tool_version}".strip()[:120]}
        result = state
    else:
        failures = medium.device_failures + (1 if device_failure else 0)
        escalate = failures >= settings.DECOMMISSION_MAX_DEVICE_FAILURES
        fields |= {"device_failures": failures, "state": MediaState.ESCALATED if escalate else MediaState.PENDING,
                   "task_uri": ""}
        result = "escalated" if escalate else "failed"
    event_append(request=request, medium=medium, step=f"{medium.media_type}.sanitize", tool=tool,
                 tool_version=tool_version, command=command, output=output, result=result, actor=actor,
                 attempt=medium.attempts, detail={**(detail or {}), "reason": reason})
    Medium.objects.filter(pk=medium.pk).update(**fields)
    for name, value in fields.items():
        setattr(medium, name, value)
    request_settle(request=request, asset_id=medium.asset_id, actor=actor)
    return medium


def request_settle(*, request: DecommissionRequest, asset_id: int | None, actor: Actor | None) -> None:
    """After a medium's outcome: mark the asset sanitized when its media are done; move the request on when
    nothing is left to run. The caller owns the transaction."""
    if asset_id is not None and not Medium.objects.filter(asset_id=asset_id).exclude(state__in=DONE_MEDIA).exists():
        Asset.objects.filter(pk=asset_id).update(state=AssetState.SANITIZED, next_run_at=None)
    request = DecommissionRequest.objects.select_for_update().get(pk=request.pk)
    if request.state != RequestState.SANITIZING:
        return
    open_media = Medium.objects.filter(request=request).exclude(state__in=DONE_MEDIA)
    if open_media.exclude(state=MediaState.ESCALATED).exists():
        return
    if open_media.exists():
        request_move(request=request, action_name="escalate", actor=actor,
                     detail={"reason": "a medium failed three times on the device"})
    elif request.level == Level.DESTROY:
        request_move(request=request, action_name="escalate", actor=actor,
                     detail={"reason": "level Destroy: media sanitized, physical destruction follows"})
    else:
        request_move(request=request, action_name="sanitized", actor=actor)


@transaction.atomic
def media_finish_many(*, media: list[Medium], state: str, actor: Actor | None, tool: str, reason: str,
                      detail: dict[str, Any] | None = None) -> int:
    """Record the same outcome for many media of one asset in one transaction (a server's 16 GPU media): one
    request lock, the chain extended in memory, one insert. Media already done are skipped."""
    if not media:
        return 0
    ids = [m.pk for m in media]
    todo = list(Medium.objects.select_for_update().filter(pk__in=ids).exclude(state__in=DONE_MEDIA).order_by("id"))
    if not todo:
        return 0
    request = DecommissionRequest.objects.get(pk=todo[0].request_id)
    events_append_many(request=request, actor=actor, items=[
        {"medium": m, "step": f"{m.media_type}.sanitize", "tool": tool, "result": state, "attempt": m.attempts + 1,
         "detail": {**(detail or {}), "reason": reason}} for m in todo])
    now = timezone.now()
    Medium.objects.filter(pk__in=[m.pk for m in todo]).update(state=state, done_at=now, detail=reason[:300],
                                                               tool=tool[:120], attempts=F("attempts") + 1)
    request_settle(request=request, asset_id=todo[0].asset_id, actor=actor)
    return len(todo)


@transaction.atomic
def medium_stop(*, medium: Medium, reason: str, actor: Actor | None) -> None:
    """Stop for a person: the medium is failed (not retried) and the request goes to ``sanitize_failed``."""
    Medium.objects.filter(pk=medium.pk).update(state=MediaState.FAILED, detail=reason[:300])
    request = DecommissionRequest.objects.select_for_update().get(pk=medium.request_id)
    event_append(request=request, medium=medium, step=f"{medium.media_type}.stop", result="needs a person",
                 actor=actor, detail={"reason": reason})
    if request.state == RequestState.SANITIZING:
        request_move(request=request, action_name="fail", actor=actor, detail={"reason": reason})
