"""The evidence chains: append-only events, each ``hash = SHA-256(prev_hash || canonical(event))``.

Layout PER_ASSET (requests created since migration 0003): every event that names an asset (a server or a loose
GPU) or one of its media links to the previous event of the same asset; the others (state moves, policy,
custody) form the request's own chain. Writers of different servers therefore never wait for each other: an
asset's chain is serialized by its asset row (which the worker running it locks anyway), the request's chain by
the request row. The request's chain anchors the asset chains: when an asset's media are all finished its head
(seq, hash) is appended to the request chain (:func:`chain_anchor`), and validation anchors every head again. A
verifier recomputes every chain and checks that each anchored (seq, hash) is in its asset's chain, so an asset
chain cut short or rewritten after its anchor breaks the request's proof too.

Layout REQUEST (older requests): one chain per request, serialized by the request row.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.utils import timezone

from decommission.canonical import GENESIS, event_hash, sha256_hex
from decommission.models import Asset, ChainLayout, DecommissionRequest, EvidenceEvent, Medium
from fleet.audit import Actor, actor_fields
from fleet.bulk import insert

REQUEST_CHAIN = None  # the chain key of the request's own chain (an asset chain's key is the asset id)


def event_body(event: EvidenceEvent) -> dict[str, Any]:
    """The fields an event's hash covers (the raw output through its hash)."""
    return {
        "request": event.request_id, "seq": event.seq, "medium": event.medium_id, "asset": event.asset_id,
        "step": event.step, "tool": event.tool, "tool_version": event.tool_version, "command": event.command,
        "output_sha256": event.output_sha256, "result": event.result, "detail": event.detail,
        "at": event.at.astimezone(dt.UTC).isoformat(), "actor": event.actor_name, "attempt": event.attempt,
    }


def chain_key(request: DecommissionRequest, asset_id: int | None) -> int | None:
    """Which chain an event of ``asset_id`` (or of none) goes on."""
    return asset_id if request.chain_layout == ChainLayout.PER_ASSET else REQUEST_CHAIN


def _lock_and_heads(request: DecommissionRequest, keys: list[int | None]) -> dict[int | None, tuple[int, str]]:
    """Lock the chains' owner rows (assets by id, then the request: the order every writer uses) and read each
    chain's head (seq, hash); a new chain starts at (0, GENESIS)."""
    assets = sorted(k for k in keys if k is not None)
    heads: dict[int | None, tuple[int, str]] = {k: (0, GENESIS) for k in keys}
    if assets:
        list(Asset.objects.select_for_update(no_key=True).filter(pk__in=assets).order_by("pk").values_list("pk"))
        heads.update(chain_heads(asset_ids=assets))
    if REQUEST_CHAIN in heads:
        DecommissionRequest.objects.select_for_update(no_key=True).filter(pk=request.pk).values_list("pk").get()
        events = EvidenceEvent.objects.filter(request=request)
        if request.chain_layout == ChainLayout.PER_ASSET:
            events = events.filter(asset__isnull=True)
        heads[REQUEST_CHAIN] = events.order_by("-seq").values_list("seq", "hash").first() or (0, GENESIS)
    return heads


def chain_heads(*, asset_ids: list[int]) -> dict[int, tuple[int, str]]:
    """The head (seq, hash) of each asset chain that has events (one query on PostgreSQL)."""
    rows = EvidenceEvent.objects.filter(asset_id__in=asset_ids).order_by("asset_id", "-seq")
    if connection.vendor == "postgresql":
        return {a: (seq, h) for a, seq, h in rows.distinct("asset_id").values_list("asset_id", "seq", "hash")}
    heads = {}
    for asset_id in asset_ids:
        head = rows.filter(asset_id=asset_id).values_list("seq", "hash").first()
        if head:
            heads[asset_id] = head
    return heads


def events_append_many(*, request: DecommissionRequest, items: list[dict[str, Any]],
                       actor: Actor | None) -> list[EvidenceEvent]:
    """Append events (one lock per chain, one insert); each item holds ``event_append``'s keyword fields. Items
    of several assets go on their own chains, in the order given. The caller owns the transaction."""
    if not items:
        return []
    at = timezone.now().replace(microsecond=0)
    name = actor_fields(actor)["actor_name"]
    asset_ids = []
    for item in items:
        medium, asset = item.get("medium"), item.get("asset")
        asset_ids.append(asset.pk if asset else (medium.asset_id if medium else None))
    heads = _lock_and_heads(request, sorted({chain_key(request, a) for a in asset_ids},
                                            key=lambda k: -1 if k is None else k))
    events = []
    for item, asset_id in zip(items, asset_ids, strict=True):
        key = chain_key(request, asset_id)
        seq, prev = heads[key]
        medium = item.get("medium")
        output = item.get("output", "")
        event = EvidenceEvent(
            request=request, seq=seq + 1, medium=medium, asset_id=asset_id,
            step=item["step"], tool=item.get("tool", ""), tool_version=item.get("tool_version", ""),
            command=item.get("command", "")[:500], output=output, output_sha256=sha256_hex(output) if output else "",
            result=item["result"], detail=item.get("detail") or {}, at=at, actor_name=name,
            attempt=item.get("attempt", 0), prev_hash=prev, hash="")
        event.hash = event_hash(prev, event_body(event))
        heads[key] = (seq + 1, event.hash)
        events.append(event)
    if len(events) == 1:  # one round trip either way; a single event (custody) needs its id back
        EvidenceEvent.objects.bulk_create(events)
    else:
        insert(EvidenceEvent, events)  # COPY
    return events


def event_append(*, request: DecommissionRequest, step: str, result: str, actor: Actor | None,
                 medium: Medium | None = None, asset: Asset | None = None, tool: str = "", tool_version: str = "",
                 command: str = "", output: str = "", detail: dict[str, Any] | None = None,
                 attempt: int = 0) -> EvidenceEvent:
    """Append one event to its chain (the asset's when it names one, else the request's). The caller owns the
    transaction; the chain's owner row is locked here."""
    return events_append_many(request=request, actor=actor, items=[{
        "step": step, "result": result, "medium": medium, "asset": asset, "tool": tool, "tool_version": tool_version,
        "command": command, "output": output, "detail": detail, "attempt": attempt}])[0]


def chain_anchor(*, request: DecommissionRequest, heads: dict[int, tuple[int, str]], actor: Actor | None,
                 step: str = "chain.anchor") -> EvidenceEvent | None:
    """Append the asset chains' heads (asset id -> (seq, hash)) to the request's chain. The caller owns the
    transaction."""
    if request.chain_layout != ChainLayout.PER_ASSET or not heads:
        return None
    return event_append(request=request, step=step, result="anchored", actor=actor,
                        detail={"anchors": anchors_detail(heads)})


def anchors_detail(heads: dict[int, tuple[int, str]]) -> list[dict[str, Any]]:
    return [{"asset": a, "seq": seq, "hash": h} for a, (seq, h) in sorted(heads.items())]


@dataclass
class ChainCheck:
    ok: bool
    head: str
    count: int
    broken_at: int | None = None
    reason: str = ""
    chain: str = "request"
    heads: dict[int, tuple[int, str]] = field(default_factory=dict)


def _events(request: DecommissionRequest) -> Any:
    events = EvidenceEvent.objects.filter(request=request)
    if request.chain_layout == ChainLayout.PER_ASSET:
        return events.order_by("asset_id", "seq").iterator(chunk_size=5000)  # NULL (the request chain) last
    return events.order_by("seq").iterator(chunk_size=5000)


def _broken(event: EvidenceEvent, prev: str, expected: int) -> str:
    if event.seq != expected:
        return f"event {expected} is missing (next is {event.seq})"
    if event.prev_hash != prev:
        return f"event {event.seq} does not link to event {expected - 1}"
    if event.output and sha256_hex(event.output) != event.output_sha256:
        return f"event {event.seq}: raw output does not match its hash"
    if event_hash(prev, event_body(event), check=False) != event.hash:
        return f"event {event.seq} was altered (hash mismatch)"
    return ""


def chain_verify(*, request: DecommissionRequest) -> ChainCheck:
    """Recompute every chain of the request from its genesis; the first event whose link or hash does not match
    breaks it; then every anchor in the request's chain must name an event of its asset's chain."""
    per_asset = request.chain_layout == ChainLayout.PER_ASSET
    hashes: dict[tuple[int, int], str] = {}
    heads: dict[int, tuple[int, str]] = {}
    anchors: list[dict[str, Any]] = []
    key: object = object()
    prev, count, expected, head = GENESIS, 0, 0, GENESIS
    for event in _events(request):
        event_key = event.asset_id if per_asset else REQUEST_CHAIN
        if event_key != key:
            key, prev, expected = event_key, GENESIS, 0
        count += 1
        expected += 1
        reason = _broken(event, prev, expected)
        if reason:
            chain = f"asset {event.asset_id}" if event_key is not None else "request"
            return ChainCheck(False, head, count, event.seq, f"{chain} chain: {reason}", chain)
        prev = event.hash
        if event_key is None:
            head = prev
            if per_asset:
                anchors.extend(a for a in (event.detail or {}).get("anchors", []) if isinstance(a, dict))
        else:
            heads[event_key] = (event.seq, prev)
            hashes[(event_key, event.seq)] = prev
    for anchor in anchors:
        if hashes.get((anchor.get("asset"), anchor.get("seq"))) != anchor.get("hash"):
            return ChainCheck(False, head, count, anchor.get("seq"),
                              f"asset {anchor.get('asset')} chain: event {anchor.get('seq')} is not the one the "
                              "request's chain anchored (cut short or rewritten)", f"asset {anchor.get('asset')}")
    return ChainCheck(True, head, count, heads=heads)
