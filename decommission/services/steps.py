"""The outcome of a step on a medium, written by workers (and the host agent's upload): the evidence event, the
medium's new state, and, when nothing is left to do, the request's move to ``verifying`` (or to
``escalated_destroy`` when a medium failed three times on the device, or the level is Destroy)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from decommission.models import (
    Asset,
    AssetState,
    ChainLayout,
    DecommissionRequest,
    Level,
    MediaState,
    Medium,
    RequestState,
)
from decommission.services.evidence import chain_anchor, chain_heads, event_append, events_append_many
from decommission.services.workflow import DONE_MEDIA, request_move
from fleet import bulk
from fleet.audit import Actor


@dataclass
class Outcome:
    """A step's end on a medium, written by :func:`outcomes_write` (a worker batches a server's outcomes)."""

    medium: Medium
    state: str
    tool: str = ""
    tool_version: str = ""
    command: str = ""
    output: str = ""
    reason: str = ""
    device_failure: bool = False
    detail: dict[str, Any] = field(default_factory=dict)


def outcomes_write(outcomes: list[Outcome], *, actor: Actor | None,
                   request: DecommissionRequest | None = None) -> None:
    """Record step ends: done (``sanitized``/``recorded``) or ``failed``, one evidence event each (one lock, one
    insert), then settle the assets and the request. Safe to run twice: a medium already done is left alone. A
    device-reported failure counts; the third escalates to destroy. The caller owns the transaction."""
    if not outcomes:
        return
    current = {m.pk: m for m in Medium.objects.select_for_update(no_key=True).filter(
        pk__in=[o.medium.pk for o in outcomes])}
    todo = [o for o in outcomes if current[o.medium.pk].state not in (*DONE_MEDIA, MediaState.ESCALATED)]
    if not todo:
        return
    now = timezone.now()
    items, updates = [], []
    for o in todo:
        medium = current[o.medium.pk]
        medium.attempts += 1
        if o.state in DONE_MEDIA:
            medium.state, medium.done_at = o.state, now
            medium.tool = f"{o.tool} {o.tool_version}".strip()[:120]
            result = o.state
        else:
            medium.device_failures += 1 if o.device_failure else 0
            escalate = medium.device_failures >= settings.DECOMMISSION_MAX_DEVICE_FAILURES
            medium.state, medium.task_uri = (MediaState.ESCALATED if escalate else MediaState.PENDING), ""
            result = "escalated" if escalate else "failed"
        medium.detail = (o.reason or medium.detail)[:300]
        items.append({"medium": medium, "step": f"{medium.media_type}.sanitize", "tool": o.tool,
                      "tool_version": o.tool_version, "command": o.command, "output": o.output, "result": result,
                      "attempt": medium.attempts, "detail": {**o.detail, "reason": o.reason}})
        updates.append(medium)
    if request is None or request.pk != updates[0].request_id:
        request = DecommissionRequest.objects.get(pk=updates[0].request_id)
    events = events_append_many(request=request, actor=actor, items=items)
    bulk.update(Medium, updates, ["state", "done_at", "tool", "attempts", "device_failures", "task_uri", "detail"])
    request_settle(request=request, asset_ids=sorted({m.asset_id for m in updates}), actor=actor,
                   heads={e.asset_id: (e.seq, e.hash) for e in events if e.asset_id is not None})


@transaction.atomic
def medium_finish(*, medium: Medium, state: str, actor: Actor | None, tool: str = "", tool_version: str = "",
                  command: str = "", output: str = "", detail: dict[str, Any] | None = None, reason: str = "",
                  device_failure: bool = False) -> Medium:
    """One step's end on one medium (see :func:`outcomes_write`)."""
    outcomes_write([Outcome(medium=medium, state=state, tool=tool, tool_version=tool_version, command=command,
                            output=output, reason=reason, device_failure=device_failure, detail=detail or {})],
                   actor=actor)
    medium.refresh_from_db()
    return medium


def request_settle(*, request: DecommissionRequest, asset_ids: list[int], actor: Actor | None,
                   heads: dict[int, tuple[int, str]] | None = None) -> None:
    """After outcomes on ``asset_ids``' media: an asset none of whose media is left to run (done, or escalated)
    is finished: ``sanitized`` when all are done, and its chain head is anchored in the request's chain
    (``heads``: the heads the caller just wrote). Only a finishing asset takes the request's lock (once per
    asset, not per step) and moves the request on when nothing is left to run. The caller owns the
    transaction."""
    running = set(Medium.objects.filter(asset_id__in=asset_ids).exclude(
        state__in=(*DONE_MEDIA, MediaState.ESCALATED)).values_list("asset_id", flat=True))
    finished = [a for a in asset_ids if a not in running]
    if not finished:
        return
    escalated = set(Medium.objects.filter(asset_id__in=finished, state=MediaState.ESCALATED).values_list(
        "asset_id", flat=True))
    Asset.objects.filter(pk__in=[a for a in finished if a not in escalated]).update(
        state=AssetState.SANITIZED, next_run_at=None)
    request = DecommissionRequest.objects.select_for_update(no_key=True).get(pk=request.pk)
    heads = heads or {}
    missing = [a for a in finished if a not in heads] if request.chain_layout == ChainLayout.PER_ASSET else []
    if missing:
        heads.update(chain_heads(asset_ids=missing))
    chain_anchor(request=request, heads={a: heads[a] for a in finished if a in heads}, actor=actor)
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
    """The same outcome for many media (a server's GPU media) in one transaction."""
    outcomes_write([Outcome(medium=m, state=state, tool=tool, reason=reason, detail=detail or {}) for m in media],
                   actor=actor)
    return len(media)


@transaction.atomic
def medium_stop(*, medium: Medium, reason: str, actor: Actor | None) -> None:
    """Stop for a person: the medium is failed (not retried) and the request goes to ``sanitize_failed``."""
    # the asset, then the request
    Asset.objects.select_for_update(no_key=True).filter(pk=medium.asset_id).values_list("pk").get()
    Medium.objects.filter(pk=medium.pk).update(state=MediaState.FAILED, detail=reason[:300])
    request = DecommissionRequest.objects.select_for_update(no_key=True).get(pk=medium.request_id)
    event_append(request=request, medium=medium, step=f"{medium.media_type}.stop", result="needs a person",
                 actor=actor, detail={"reason": reason})
    if request.state == RequestState.SANITIZING:
        request_move(request=request, action_name="fail", actor=actor, detail={"reason": reason})
