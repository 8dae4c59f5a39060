"""Fleet's drains and resumes of scheduler nodes: recorded side effects (docs/scheduler.md).

- ``hold_request`` records a hold (``requested``) and commits it, flushed, BEFORE any drain is sent; one key per
  reason (a rollout target, a GPU, a decommission asset): asking twice returns the same hold.
- ``hold_drain`` sends it under the node's advisory lock after re-reading the hold: a node already out for
  someone else (drained with another reason, down, reserved) makes the hold ``foreign`` (nothing sent, never
  resumed); a node already drained for Fleet is ``held`` without a second request; otherwise DRAIN is sent with
  the hold's reason and the hold is ``held``. A worker that died after sending finds the node drained with its
  reason: ``held``, nothing sent twice. ``check()`` (the caller's fence) runs just before the request leaves.
- ``hold_release`` records ``releasing`` (committed, flushed) and then resumes under the node's lock, only if
  the node is still drained with a Fleet reason and no other Fleet hold is open on it; a node no longer drained
  is ``released`` without a request (the earlier attempt landed), a node out for someone else is ``left``.
So a node Fleet drained is resumed at most once per hold, and exactly once when its last hold ends.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from fleet.audit import SystemActor, audit_write
from fleet.models import AuditAction
from inventory.models import HoldState, SchedulerHold, Server
from inventory.models.scheduler import HOLD_DRAINING, HOLD_OPEN
from inventory.scheduler import NodeState, SchedulerError, configured, node_name

SCHEDULER_ACTOR = SystemActor("scheduler")
NODE_LOCK_NS = 0x5C4E  # advisory lock namespace: (NODE_LOCK_NS, crc32(node name))


def _flushed() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO on")


def _lock_node(node: str) -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)",
                           [NODE_LOCK_NS, zlib.crc32(node.encode()) - 2 ** 31])


def fleet_reason(text: str) -> str:
    return f"{settings.FLEET_SCHEDULER_REASON_PREFIX} {text}"[:500]


def _audit(hold: SchedulerHold, message: str) -> None:
    audit_write(actor=SCHEDULER_ACTOR, action=AuditAction.UPDATE, obj=hold.server,
                changes={"scheduler": [hold.node, hold.state]}, message=message[:500], at=timezone.now())


def hold_request(*, key: str, server: Server, reason: str, partitions: Sequence[str] = ()) -> SchedulerHold:
    """Record (committed, flushed) that Fleet wants ``server``'s node drained for ``reason``; idempotent by key
    (``<owner>:<owner id>[:<more>]``: the owner and its id are stored for SQL counting).
    Call it inside the caller's transaction to make the record part of a larger decision (a capacity check)."""
    existing = SchedulerHold.objects.filter(key=key).first()
    if existing is not None:
        return existing
    with transaction.atomic():
        _flushed()
        try:
            with transaction.atomic():
                owner, _, rest = key.partition(":")
                owner_id = rest.split(":", 1)[0]
                hold = SchedulerHold.objects.create(
                    key=key, owner=owner, owner_id=int(owner_id) if owner_id.isdigit() else None, server=server,
                    node=node_name(server), reason=fleet_reason(reason),
                    partitions="," + ",".join(partitions) + "," if partitions else "", requested_at=timezone.now())
        except IntegrityError:
            return SchedulerHold.objects.get(key=key)
        _audit(hold, f"drain of {hold.node} recorded: {hold.reason}")
    return hold


def hold_drain(hold: SchedulerHold, *, check: Callable[[], None] = lambda: None) -> SchedulerHold:
    """Send a requested hold's drain (see the module docstring). Raises ``SchedulerError`` (nothing decided:
    the hold stays ``requested`` and is sent again later)."""
    if hold.state != HoldState.REQUESTED:
        return hold
    sched = configured()
    if sched is None:
        return hold
    with transaction.atomic():
        _lock_node(hold.node)
        hold = SchedulerHold.objects.select_for_update().get(pk=hold.pk)
        if hold.state != HoldState.REQUESTED:
            return hold
        sched.invalidate()
        live = sched.node_state([hold.node]).get(hold.node)
        now = timezone.now()
        prefix = settings.FLEET_SCHEDULER_REASON_PREFIX
        if live is None:
            hold.state, hold.note = HoldState.LEFT, "the scheduler does not know this node: nothing to drain"
        elif live.drain and live.reason.startswith(prefix):
            hold.state, hold.drained_at = HoldState.HELD, now
            hold.note = "" if live.reason == hold.reason else f"already drained by Fleet: {live.reason}"[:500]
        elif live.drained_by(prefix) == "other":
            hold.state, hold.drained_at = HoldState.FOREIGN, now
            hold.note = _foreign_note(live)
        else:
            check()  # the caller's fence: a worker that lost its claim sends nothing
            sched.drain(hold.node, hold.reason)
            hold.state, hold.drained_at, hold.note = HoldState.HELD, now, ""
        hold.partitions = hold.partitions or (("," + ",".join(live.partitions) + ",") if live and live.partitions
                                              else "")
        hold.save(update_fields=["state", "drained_at", "note", "partitions"])
        _audit(hold, f"{hold.node}: {hold.get_state_display()} ({hold.note or hold.reason})")
    return hold


def _foreign_note(live: NodeState) -> str:
    what = "down" if live.down else "reserved" if live.reserved and not live.drain else "drained"
    by = f" by {live.reason_user}" if live.reason_user else ""
    reason = f": {live.reason}" if live.reason else ""
    return f"{what}{by}{reason}; Fleet will not resume it"[:500]


def hold_release(hold: SchedulerHold) -> SchedulerHold:
    """End a hold: record ``releasing`` (flushed), then resume the node if it is Fleet's to resume. Safe to call
    any number of times, from any worker."""
    if hold.state in (HoldState.RELEASED, HoldState.LEFT):
        return hold
    if hold.state == HoldState.FOREIGN:
        SchedulerHold.objects.filter(pk=hold.pk, state=HoldState.FOREIGN).update(
            state=HoldState.LEFT, released_at=timezone.now())
        hold.refresh_from_db()
        return hold
    if hold.state != HoldState.RELEASING:
        with transaction.atomic():
            _flushed()
            SchedulerHold.objects.filter(pk=hold.pk, state__in=(HoldState.REQUESTED, HoldState.HELD)).update(
                state=HoldState.RELEASING, release_requested_at=timezone.now())
        hold.refresh_from_db()
    return _resume(hold)


def _resume(hold: SchedulerHold) -> SchedulerHold:
    sched = configured()
    if hold.state != HoldState.RELEASING or sched is None:
        return hold
    prefix = settings.FLEET_SCHEDULER_REASON_PREFIX
    with transaction.atomic():
        _lock_node(hold.node)
        hold = SchedulerHold.objects.select_for_update().get(pk=hold.pk)
        if hold.state != HoldState.RELEASING:
            return hold
        if hold.drained_at is None:  # never sent (it was still requested): nothing of ours to undo
            return _ended(hold, HoldState.RELEASED, "the drain was never sent")
        sched.invalidate()
        live = sched.node_state([hold.node]).get(hold.node)
        other = (SchedulerHold.objects.filter(node=hold.node, state__in=HOLD_DRAINING).exclude(pk=hold.pk)
                 .order_by("id").first())
        if live is None:
            return _ended(hold, HoldState.LEFT, "the scheduler does not know this node any more")
        if not live.drain:
            return _ended(hold, HoldState.RELEASED, f"not drained any more ({live.display})")
        if not live.reason.startswith(prefix):
            return _ended(hold, HoldState.LEFT, f"out for someone else now: {_foreign_note(live)}")
        if other is not None:
            return _ended(hold, HoldState.LEFT, f"still drained for Fleet: {other.reason}")
        if not sched.resume(hold.node, only_if_reason=live.reason):
            return _ended(hold, HoldState.LEFT, "the node's reason changed just before the resume: left alone")
        return _ended(hold, HoldState.RELEASED, "resumed")


def _ended(hold: SchedulerHold, state: str, note: str) -> SchedulerHold:
    hold.state, hold.note, hold.released_at = state, note[:500], timezone.now()
    hold.save(update_fields=["state", "note", "released_at"])
    _audit(hold, f"{hold.node}: {hold.get_state_display()} ({note})")
    return hold


def hold_requeue(hold: SchedulerHold, jobs: Sequence[int]) -> list[int]:
    """Send the node's running jobs back to the queue, each job once: the ids are recorded (flushed) before
    the request; a job already recorded is never requeued again. Returns the ids sent."""
    sched = configured()
    fresh = [j for j in jobs if j not in hold.requeued]
    if sched is None or not fresh:
        return []
    with transaction.atomic():
        _flushed()
        hold.requeued = [*hold.requeued, *fresh]
        SchedulerHold.objects.filter(pk=hold.pk).update(requeued=hold.requeued)
    sched.requeue(fresh)
    _audit(hold, f"{hold.node}: requeued jobs {', '.join(map(str, fresh))}")
    return fresh


def holds_sweep(*, exclude_prefix: str = "rollout-target:") -> dict[str, int]:
    """Beat: send requested holds whose sender died (not those an engine step sends itself), and finish every
    ``releasing`` hold (its resume was recorded, maybe never sent)."""
    done = {"drained": 0, "released": 0}
    if configured() is None:
        return done
    for hold in SchedulerHold.objects.filter(state=HoldState.REQUESTED).exclude(key__startswith=exclude_prefix)[:500]:
        try:
            hold_drain(hold)
            done["drained"] += 1
        except SchedulerError:
            continue
    for hold in SchedulerHold.objects.filter(state=HoldState.RELEASING)[:500]:
        try:
            _resume(hold)
            done["released"] += 1
        except SchedulerError:
            continue
    return done


def hold_open(key: str) -> SchedulerHold | None:
    return SchedulerHold.objects.filter(key=key, state__in=HOLD_OPEN).first()


def node_live(node: str) -> NodeState | None:
    sched = configured()
    return sched.node_state([node]).get(node) if sched else None


def node_record(live: NodeState, server: Server | None = None) -> None:
    """Write one live reading to the node's ``SchedulerNode`` row (pages show it before the next refresh)."""
    from inventory.models import SchedulerNode

    prefix = settings.FLEET_SCHEDULER_REASON_PREFIX
    if server is not None and SchedulerNode.objects.filter(server=server).exclude(name=live.name).exists():
        server = None  # the server's row is another node's until the next refresh maps it again
    SchedulerNode.objects.update_or_create(name=live.name, defaults={
        **({"server": server} if server is not None else {}), "state": live.display, "reason": live.reason[:500],
        "reason_user": live.reason_user[:100], "reason_at": live.reason_at, "drained_by": live.drained_by(prefix),
        "partitions": ("," + ",".join(live.partitions) + ",") if live.partitions else "",
        "job_ids": list(live.jobs[:50]), "job_count": len(live.jobs), "refreshed_at": timezone.now()})
