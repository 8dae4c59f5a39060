"""The evidence chain: append-only events, hash-chained per request. Appending locks the request row, so two
writers never take the same sequence number; verifying recomputes every hash from the genesis."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from decommission.canonical import GENESIS, event_hash, sha256_hex
from decommission.models import Asset, DecommissionRequest, EvidenceEvent, Medium
from fleet.audit import Actor, actor_fields


def event_body(event: EvidenceEvent) -> dict[str, Any]:
    """The fields an event's hash covers (the raw output through its hash)."""
    return {
        "request": event.request_id, "seq": event.seq, "medium": event.medium_id, "asset": event.asset_id,
        "step": event.step, "tool": event.tool, "tool_version": event.tool_version, "command": event.command,
        "output_sha256": event.output_sha256, "result": event.result, "detail": event.detail,
        "at": event.at.astimezone(dt.UTC).isoformat(), "actor": event.actor_name, "attempt": event.attempt,
    }


def event_append(*, request: DecommissionRequest, step: str, result: str, actor: Actor | None,
                 medium: Medium | None = None, asset: Asset | None = None, tool: str = "", tool_version: str = "",
                 command: str = "", output: str = "", detail: dict[str, Any] | None = None,
                 attempt: int = 0) -> EvidenceEvent:
    """Append one event. The caller owns the transaction; the request row is locked here."""
    DecommissionRequest.objects.select_for_update().filter(pk=request.pk).values_list("pk").get()
    last = EvidenceEvent.objects.filter(request=request).order_by("-seq").values_list("seq", "hash").first()
    seq, prev = (last[0] + 1, last[1]) if last else (1, GENESIS)
    event = EvidenceEvent(
        request=request, seq=seq, medium=medium, asset_id=asset.pk if asset else (medium.asset_id if medium else None),
        step=step,
        tool=tool, tool_version=tool_version, command=command[:500], output=output,
        output_sha256=sha256_hex(output) if output else "", result=result, detail=detail or {},
        at=timezone.now().replace(microsecond=0), actor_name=actor_fields(actor)["actor_name"],
        attempt=attempt, prev_hash=prev, hash="")
    event.hash = event_hash(prev, event_body(event))
    event.save()
    return event


def events_append_many(*, request: DecommissionRequest, items: list[dict[str, Any]],
                       actor: Actor | None) -> list[EvidenceEvent]:
    """Append many events at once (one lock, one insert); each item holds ``event_append``'s keyword fields."""
    DecommissionRequest.objects.select_for_update().filter(pk=request.pk).values_list("pk").get()
    last = EvidenceEvent.objects.filter(request=request).order_by("-seq").values_list("seq", "hash").first()
    seq, prev = (last[0], last[1]) if last else (0, GENESIS)
    at = timezone.now().replace(microsecond=0)
    name = actor_fields(actor)["actor_name"]
    events = []
    for item in items:
        seq += 1
        medium = item.get("medium")
        output = item.get("output", "")
        event = EvidenceEvent(
            request=request, seq=seq, medium=medium,
            asset_id=item["asset"].pk if item.get("asset") else (medium.asset_id if medium else None),
            step=item["step"], tool=item.get("tool", ""), tool_version=item.get("tool_version", ""),
            command=item.get("command", "")[:500], output=output, output_sha256=sha256_hex(output) if output else "",
            result=item["result"], detail=item.get("detail") or {}, at=at, actor_name=name,
            attempt=item.get("attempt", 0), prev_hash=prev, hash="")
        event.hash = prev = event_hash(prev, event_body(event))
        events.append(event)
    EvidenceEvent.objects.bulk_create(events)
    return events


@dataclass
class ChainCheck:
    ok: bool
    head: str
    count: int
    broken_at: int | None = None
    reason: str = ""


def chain_verify(*, request: DecommissionRequest) -> ChainCheck:
    """Recompute the request's chain; the first event whose link or hash does not match breaks it."""
    prev, count = GENESIS, 0
    for event in EvidenceEvent.objects.filter(request=request).order_by("seq").iterator():
        count += 1
        if event.seq != count:
            return ChainCheck(False, prev, count, event.seq, f"event {count} is missing (next is {event.seq})")
        if event.prev_hash != prev:
            return ChainCheck(False, prev, count, event.seq, f"event {event.seq} does not link to event {count - 1}")
        if event.output and sha256_hex(event.output) != event.output_sha256:
            return ChainCheck(False, prev, count, event.seq, f"event {event.seq}: raw output does not match its hash")
        if event_hash(prev, event_body(event), check=False) != event.hash:
            return ChainCheck(False, prev, count, event.seq, f"event {event.seq} was altered (hash mismatch)")
        prev = event.hash
    return ChainCheck(True, prev, count)
