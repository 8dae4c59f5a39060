"""Fleet's drains and resumes of scheduler nodes: recorded side effects (docs/scheduler.md).

- ``hold_request`` records a hold (``requested``) and commits it, flushed, BEFORE any drain is sent; one key per
  reason (a rollout target's attempt, a GPU's drain, a decommission asset): asking twice returns the same hold.
- ``holds_drain`` sends requested holds: under every node's advisory lock (taken in one order) and after
  re-reading the holds, ONE read of the scheduler for all their nodes, then at most one DRAIN per node. A node
  already out for someone else (drained with another reason, down, reserved) makes its holds ``foreign`` (nothing
  sent, never resumed); a node already drained for Fleet makes them ``held`` without a second request; otherwise
  DRAIN is sent with the first hold's reason (the holds of one bulk action share a reason naming every GPU) and
  they are ``held``. A worker that died after sending finds the node drained with its reason: ``held``, nothing
  sent twice. ``check(hold)`` (the caller's fence) runs just before a node's request leaves; False: nothing is
  sent for that hold (it stays ``requested``).
- ``holds_release`` records ``releasing`` (committed, flushed) and then, under the nodes' locks and with one read,
  resumes each node once, only if it is still drained with a Fleet reason and no other Fleet hold is open on it;
  a node no longer drained is ``released`` without a request (the earlier attempt landed), a node out for
  someone else is ``left``.
So a node Fleet drained is resumed at most once per hold, and exactly once when its last hold ends. Every time
written here is the database's (``fleet.clock``): the rollout engine compares its drain deadline with them.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

from django.conf import settings
from django.db import connection, transaction

from fleet.audit import SystemActor, audit_event, audit_write, audit_write_many
from fleet.clock import db_now
from fleet.execution import flushed, record_once
from fleet.models import AuditAction
from inventory.models import HoldState, SchedulerHold, Server
from inventory.models.scheduler import HOLD_DRAINING, HOLD_OPEN
from inventory.scheduler import NodeState, SchedulerError, configured, node_name
from inventory.scheduler.reservations import fleet_reserved_nodes

SCHEDULER_ACTOR = SystemActor("scheduler")
NODE_LOCK_NS = 0x5C4E  # advisory lock namespace: (NODE_LOCK_NS, crc32(node name))
BATCH = 500  # holds per batch: their nodes' locks are held while one DRAIN/RESUME per node is sent (~20 ms each)


def _lock_nodes(nodes: Iterable[str]) -> None:
    """Every node's advisory lock, in one order (by key): two batches never wait for each other in a circle."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for key in sorted({zlib.crc32(node.encode()) - 2 ** 31 for node in nodes}):
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [NODE_LOCK_NS, key])


def fleet_reason(text: str) -> str:
    return f"{settings.FLEET_SCHEDULER_REASON_PREFIX} {text}"[:500]


def _audit(hold: SchedulerHold, message: str) -> None:
    audit_write(actor=SCHEDULER_ACTOR, action=AuditAction.UPDATE, obj=hold.server,
                changes={"scheduler": [hold.node, hold.state]}, message=message[:500], at=db_now())


def hold_request(*, key: str, server: Server, reason: str, partitions: Sequence[str] = ()) -> SchedulerHold:
    """Record (committed, flushed) that Fleet wants ``server``'s node drained for ``reason``; idempotent by key
    (``<owner>:<owner id>[:<more>]``: the owner and its id are stored for SQL counting).
    Call it inside the caller's transaction to make the record part of a larger decision (a capacity check)."""
    owner, _, rest = key.partition(":")
    owner_id = rest.split(":", 1)[0]
    return record_once(SchedulerHold, key={"key": key}, make=lambda: SchedulerHold(
        key=key, owner=owner, owner_id=int(owner_id) if owner_id.isdigit() else None, server=server,
        node=node_name(server), reason=fleet_reason(reason),
        partitions="," + ",".join(partitions) + "," if partitions else "", requested_at=db_now()),
        then=lambda hold: _audit(hold, f"drain of {hold.node} recorded: {hold.reason}"))


def holds_request(requests: Sequence[tuple[str, Server, str]]) -> list[SchedulerHold]:
    """``hold_request`` for many (key, server, reason) at once: one flushed insert, one audit event per server.
    Returns the holds in the given order (an existing key's hold as it is)."""
    if not requests:
        return []
    now = db_now()
    with transaction.atomic():
        flushed()
        rows = []
        for key, server, reason in requests:
            owner, _, rest = key.partition(":")
            owner_id = rest.split(":", 1)[0]
            rows.append(SchedulerHold(key=key, owner=owner, owner_id=int(owner_id) if owner_id.isdigit() else None,
                                      server=server, node=node_name(server), reason=fleet_reason(reason),
                                      requested_at=now))
        SchedulerHold.objects.bulk_create(rows, ignore_conflicts=True)
        found = {h.key: h for h in SchedulerHold.objects.filter(key__in=[r.key for r in rows]).select_related("server")}
        audited: dict[int, list[SchedulerHold]] = defaultdict(list)
        for hold in found.values():
            if hold.requested_at == now:  # recorded here (an older key keeps its first time)
                audited[hold.server_id].append(hold)
        audit_write_many(audit_event(actor=SCHEDULER_ACTOR, action=AuditAction.UPDATE, obj=held[0].server,
                                     changes={"scheduler": [held[0].node, HoldState.REQUESTED]}, at=now,
                                     message=f"drain of {held[0].node} recorded ({len(held)} hold"
                                             f"{'s' if len(held) != 1 else ''}): {held[0].reason}"[:500])
                         for held in audited.values())
    return [found[key] for key, _, _ in requests]


def hold_drain(hold: SchedulerHold, *, check: Callable[[], None] = lambda: None) -> SchedulerHold:
    """Send one requested hold's drain (``holds_drain``); ``check()`` raises when the caller lost its claim.
    Raises ``SchedulerError`` (nothing decided: the hold stays ``requested`` and is sent again later)."""

    def checked(_: SchedulerHold) -> bool:
        check()
        return True

    done = holds_drain([hold], check=checked)[0]
    if done.state == HoldState.REQUESTED:
        raise SchedulerError(done.note or f"the drain of {done.node} was not sent")
    return done


def holds_drain(holds: Sequence[SchedulerHold], *, check: Callable[[SchedulerHold], bool] | None = None
                ) -> list[SchedulerHold]:
    """Send the drains of requested holds (see the module docstring): one scheduler read for all of them, at most
    one DRAIN per node. Returns the holds as they are now, in the given order. Raises ``SchedulerError`` when the
    scheduler cannot be read (nothing decided); a DRAIN that fails leaves that node's holds ``requested``."""
    sched = configured()
    wanted = [h.pk for h in holds if h.state == HoldState.REQUESTED]
    if sched is None or not wanted:
        return list(holds)
    prefix = settings.FLEET_SCHEDULER_REASON_PREFIX
    with transaction.atomic():
        _lock_nodes(h.node for h in holds if h.pk in wanted)
        fresh = {h.pk: h for h in SchedulerHold.objects.select_for_update(of=("self",)).filter(pk__in=wanted)
                 .select_related("server").order_by("id")}
        by_node: dict[str, list[SchedulerHold]] = defaultdict(list)
        for hold in fresh.values():
            if hold.state == HoldState.REQUESTED:
                by_node[hold.node].append(hold)
        if by_node:
            sched.invalidate()
            live_nodes = sched.node_state(sorted(by_node))
            ours = fleet_reserved_nodes(by_node)  # reserved by Fleet's own maintenance reservation: not foreign
            now = db_now()
            for node, node_holds in by_node.items():
                live = live_nodes.get(node)
                if live is None:
                    _decided(node_holds, HoldState.LEFT, "the scheduler does not know this node: nothing to drain")
                elif live.drain and live.reason.startswith(prefix):
                    for hold in node_holds:
                        note = "" if live.reason == hold.reason else f"already drained by Fleet: {live.reason}"
                        _decided([hold], HoldState.HELD, note, drained_at=now, live=live)
                elif live.drained_by(prefix, fleet_reserved=node in ours) == "other":
                    _decided(node_holds, HoldState.FOREIGN, _foreign_note(live), drained_at=now, live=live)
                else:
                    sending = [h for h in node_holds if check is None or check(h)]  # the callers' fences
                    if not sending:
                        continue
                    try:
                        sched.drain(node, sending[0].reason)
                    except SchedulerError as exc:  # maybe landed: the next attempt reads the node and sees
                        for hold in sending:
                            hold.note = f"drain not sent yet: {exc}"[:500]
                            hold.save(update_fields=["note"])
                        continue
                    for hold in sending:
                        note = "" if hold.reason == sending[0].reason else f"drained for Fleet: {sending[0].reason}"
                        _decided([hold], HoldState.HELD, note, drained_at=now, live=live)
    return [fresh.get(h.pk, h) for h in holds]


def _decided(holds: Iterable[SchedulerHold], state: str, note: str, *, drained_at=None,  # type: ignore[no-untyped-def]
             live: NodeState | None = None) -> None:
    for hold in holds:
        hold.state, hold.note = state, note[:500]
        if drained_at is not None:
            hold.drained_at = drained_at
        hold.partitions = hold.partitions or (("," + ",".join(live.partitions) + ",") if live and live.partitions
                                              else "")
        hold.save(update_fields=["state", "drained_at", "note", "partitions"])
        _audit(hold, f"{hold.node}: {hold.get_state_display()} ({hold.note or hold.reason})")


def _foreign_note(live: NodeState) -> str:
    what = "down" if live.down else "reserved" if live.reserved and not live.drain else "drained"
    by = f" by {live.reason_user}" if live.reason_user else ""
    reason = f": {live.reason}" if live.reason else ""
    return f"{what}{by}{reason}; Fleet will not resume it"[:500]


def hold_release(hold: SchedulerHold) -> SchedulerHold:
    """End one hold (``holds_release``). Safe to call any number of times, from any worker."""
    return holds_release([hold])[0]


def holds_release(holds: Sequence[SchedulerHold]) -> list[SchedulerHold]:
    """End holds: record ``releasing`` (flushed), then resume each node that is Fleet's to resume, once, with one
    scheduler read for all of them. Returns the holds as they are now, in the given order. Raises
    ``SchedulerError`` when the scheduler cannot be asked: they stay ``releasing``, finished by the next call."""
    now = db_now()
    foreign = [h.pk for h in holds if h.state == HoldState.FOREIGN]
    if foreign:
        SchedulerHold.objects.filter(pk__in=foreign, state=HoldState.FOREIGN).update(
            state=HoldState.LEFT, released_at=now)
    ending = [h.pk for h in holds if h.state in (HoldState.REQUESTED, HoldState.HELD)]
    if ending:
        with transaction.atomic():
            flushed()
            SchedulerHold.objects.filter(pk__in=ending, state__in=(HoldState.REQUESTED, HoldState.HELD)).update(
                state=HoldState.RELEASING, release_requested_at=now)
    current = {h.pk: h for h in SchedulerHold.objects.filter(pk__in=[h.pk for h in holds]).select_related("server")}
    current.update(_resume([h for h in current.values() if h.state == HoldState.RELEASING]))
    return [current.get(h.pk, h) for h in holds]


def _resume(holds: Sequence[SchedulerHold]) -> dict[int, SchedulerHold]:
    """Resume the nodes of ``releasing`` holds (one read under the nodes' locks, one RESUME per node)."""
    sched = configured()
    if sched is None or not holds:
        return {}
    prefix = settings.FLEET_SCHEDULER_REASON_PREFIX
    with transaction.atomic():
        _lock_nodes(h.node for h in holds)
        fresh = {h.pk: h for h in SchedulerHold.objects.select_for_update(of=("self",)).filter(
            pk__in=[h.pk for h in holds], state=HoldState.RELEASING).select_related("server").order_by("id")}
        never = [h for h in fresh.values() if h.drained_at is None]  # still requested: nothing of ours to undo
        _ended(never, HoldState.RELEASED, "the drain was never sent")
        by_node: dict[str, list[SchedulerHold]] = defaultdict(list)
        for hold in fresh.values():
            if hold.drained_at is not None:
                by_node[hold.node].append(hold)
        if not by_node:
            return fresh
        others: dict[str, SchedulerHold] = {}
        for other in (SchedulerHold.objects.filter(node__in=list(by_node), state__in=HOLD_DRAINING)
                      .exclude(pk__in=list(fresh)).order_by("id")):
            others.setdefault(other.node, other)
        sched.invalidate()
        live_nodes = sched.node_state(sorted(by_node))
        to_resume: dict[str, str] = {}
        for node, node_holds in by_node.items():
            live = live_nodes.get(node)
            if live is None:
                _ended(node_holds, HoldState.LEFT, "the scheduler does not know this node any more")
            elif not live.drain:
                _ended(node_holds, HoldState.RELEASED, f"not drained any more ({live.display})")
            elif not live.reason.startswith(prefix):
                _ended(node_holds, HoldState.LEFT, f"out for someone else now: {_foreign_note(live)}")
            elif node in others:
                _ended(node_holds, HoldState.LEFT, f"still drained for Fleet: {others[node].reason}")
            else:
                to_resume[node] = live.reason
        # The read above, under the nodes' locks, is the check: no second read per node (Slurm has no
        # compare-and-set; the window is this batch's RESUMEs, docs/scheduler.md).
        resumed = sched.resume_many(to_resume, live=live_nodes)
        for node in to_resume:
            if node in resumed:
                _ended(by_node[node], HoldState.RELEASED, "resumed")
            else:
                _ended(by_node[node], HoldState.LEFT, "the node's reason changed just before the resume: left alone")
    return fresh


def _ended(holds: Iterable[SchedulerHold], state: str, note: str) -> None:
    now = db_now()
    for hold in holds:
        hold.state, hold.note, hold.released_at = state, note[:500], now
        hold.save(update_fields=["state", "note", "released_at"])
        _audit(hold, f"{hold.node}: {hold.get_state_display()} ({note})")


def hold_requeue(hold: SchedulerHold, jobs: Sequence[int]) -> list[int]:
    """Send the node's running jobs back to the queue, each job once: the ids are recorded (flushed) before
    the request; a job already recorded is never requeued again. Returns the ids sent."""
    sched = configured()
    fresh = [j for j in jobs if j not in hold.requeued]
    if sched is None or not fresh:
        return []
    with transaction.atomic():
        flushed()
        hold.requeued = [*hold.requeued, *fresh]
        SchedulerHold.objects.filter(pk=hold.pk).update(requeued=hold.requeued)
    sched.requeue(fresh)
    _audit(hold, f"{hold.node}: requeued jobs {', '.join(map(str, fresh))}")
    return fresh


def holds_sweep(*, exclude_prefix: str = "rollout-target:") -> dict[str, int]:
    """Beat: send requested holds whose sender died (not those an engine step sends itself), and finish every
    ``releasing`` hold (its resume was recorded, maybe never sent): one scheduler read per batch of each."""
    done = {"drained": 0, "released": 0}
    if configured() is None:
        return done
    requested = list(SchedulerHold.objects.filter(state=HoldState.REQUESTED).exclude(key__startswith=exclude_prefix)
                     .select_related("server").order_by("id")[:BATCH])
    try:
        done["drained"] = sum(h.state != HoldState.REQUESTED for h in holds_drain(requested))
    except SchedulerError:
        pass
    releasing = list(SchedulerHold.objects.filter(state=HoldState.RELEASING).select_related("server")
                     .order_by("id")[:BATCH])
    try:
        done["released"] = sum(h.state != HoldState.RELEASING for h in _resume(releasing).values())
    except SchedulerError:
        pass
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
        "reason_user": live.reason_user[:100], "reason_at": live.reason_at,
        "drained_by": live.drained_by(prefix, fleet_reserved=bool(fleet_reserved_nodes([live.name]))),
        "partitions": ("," + ",".join(live.partitions) + ",") if live.partitions else "",
        "job_ids": list(live.jobs[:50]), "job_count": len(live.jobs), "refreshed_at": db_now()})
