"""Draining the scheduler's node before a rollout touches a server, and resuming it when the target ends.

Three calls from the engine (docs/scheduler.md lists them):
- ``drain_gate(target, ctx)`` at the top of the draining step, after the activation window allows it: without a
  scheduler it returns None at once (the engine goes on as before). With one: the first time, under the drain
  admission lock, the caps are counted with every server whose drain Fleet requested as unavailable (a server
  counts from its drain request, in ANY rollout: site, pool and failure-domain caps, and the per-partition cap
  ``FLEET_SCHEDULER_PARTITION_MAX_DRAIN_PERCENT`` or the strategy's ``drain.partition_max_percent``) and the
  hold is recorded (inventory.scheduler.holds: committed before the drain is sent); the step waits while the
  drain is requested; then it waits (``later``) until no job runs on the node and returns None: the engine's
  own gate then moves the target to activating. The wait shows on the target ("draining: 2 jobs left, ids 4711,
  4712, since 10:42"). At the strategy's drain deadline: ``wait`` (keep waiting), ``skip`` (the target fails as
  an infrastructure exception, never activated) or ``requeue`` (only with ``allow_requeue``: the jobs go back
  to the queue, each once). The deadline runs on the database's clock (``clock.since`` of the hold's times,
  which holds.py writes on that clock): a worker whose own clock is off neither skips early nor waits forever.
- ``drains_send(ctx)`` at the end of a chunk: the drains its targets recorded, fenced by each target's claim,
  sent with one scheduler read for the chunk and one DRAIN per node. A chunk reads the scheduler once
  (``ChunkScheduler``), whatever the number of its targets.
- ``release_ended()`` from the tick: every open hold of a target that has ended (succeeded, failed, skipped,
  cancelled, or sent again as a new attempt) is released: resumed exactly once if Fleet's reason is still set
  (one read and one RESUME per node for all of them).
Staging needs no drain: the gate runs only in the draining state, after staging, and only inside the
activation window (outside it the gate returns None and the engine's own gate makes the target wait).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from firmware.models import ErrorClass, RolloutTarget
from firmware.models.rollout import TARGET_DONE
from firmware.services.engine import clock
from firmware.services.engine.activation_gate import cap_reached, hold_reason, unavailable
from firmware.services.engine.context import StepContext
from firmware.services.engine.outcomes import Outcome, fail, later
from firmware.services.windows import activation_allowed
from fleet.execution import LostLease
from inventory import scheduler
from inventory.models import HoldState, SchedulerHold
from inventory.models.scheduler import HOLD_DRAINING, HOLD_OPEN
from inventory.scheduler import NodeState, SchedulerError, holds

OWNER = "rollout-target"
KEY_PREFIX = f"{OWNER}:"
DRAIN_ADMIT_LOCK = 0x5C4E0001  # one transaction at a time admits drains (caps are counted under it)


@dataclass(frozen=True)
class DrainPolicy:
    deadline_seconds: int = 3600
    on_deadline: str = "wait"
    allow_requeue: bool = False
    partition_max_percent: float | None = None
    reservation: bool = False
    reservation_minutes: int = 240


def drain_policy(strategy: dict | None) -> DrainPolicy:
    """The rollout's ``drain`` strategy (validated when the rollout was created: plan.strategy)."""
    raw = (strategy or {}).get("drain") or {}
    percent = raw.get("partition_max_percent")
    return DrainPolicy(deadline_seconds=int(raw.get("deadline_seconds", 3600)),
                       on_deadline=raw.get("on_deadline", "wait"), allow_requeue=bool(raw.get("allow_requeue")),
                       partition_max_percent=float(percent) if percent else None,
                       reservation=bool(raw.get("reservation")),
                       reservation_minutes=int(raw.get("reservation_minutes") or 240))


def hold_key(target: RolloutTarget) -> str:
    """One hold per attempt of a target (a retried exception is admitted again with a new ``started_at``)."""
    started = int(target.started_at.timestamp() * 1000) if target.started_at else 0
    return f"{KEY_PREFIX}{target.pk}:{started}"


class ChunkScheduler:
    """What one chunk of steps shares with the scheduler (its steps run on several threads): ONE reading of every
    node, taken when a target first needs it (the scheduler's cache dropped first: a reading from before another
    worker's drain never decides), and the drains its targets recorded, sent together at the chunk's end
    (``drains_send``: one read under the nodes' locks, one DRAIN per node). A waiting target costs no read of
    its own: a chunk of 100 targets waiting for jobs is one ``sinfo``/``squeue``, not 100."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.nodes: dict[str, NodeState] | None = None
        self.error: SchedulerError | None = None
        self.drains: dict[int, tuple[SchedulerHold, RolloutTarget]] = {}

    def reading(self) -> dict[str, NodeState]:
        with self.lock:
            if self.error is not None:
                raise self.error  # one failed read per chunk, not one timeout per target
            if self.nodes is None:
                sched = scheduler.configured()
                sched.invalidate()
                try:
                    self.nodes = sched.node_state()
                except SchedulerError as exc:
                    self.error = exc
                    raise
            return self.nodes

    def drain_later(self, hold: SchedulerHold, target: RolloutTarget) -> None:
        with self.lock:
            self.drains[hold.pk] = (hold, target)


_CHUNKS_LOCK = threading.Lock()


def chunk_scheduler(ctx: StepContext) -> ChunkScheduler:
    with _CHUNKS_LOCK:
        if ctx.scheduler is None:
            ctx.scheduler = ChunkScheduler()
        return ctx.scheduler


def drain_gate(target: RolloutTarget, ctx: StepContext) -> Outcome | None:
    """None: no scheduler, or the node is drained and idle (go on). Otherwise what the step does now."""
    if scheduler.configured() is None:
        return None
    poll = settings.FLEET_SCHEDULER_POLL_SECONDS
    policy = drain_policy(target.rollout.strategy)
    strategy = ctx.strategy(target.rollout)
    verdict = activation_allowed(at=clock.now(), windows=ctx.windows_for(target.site_id,
                                                                        ctx.pools.get(target.server_id, [])),
                                 require_window=strategy.require_window, window_ids=strategy.window_ids)
    if not verdict.allowed:  # no drain outside the activation window (the engine's gate says the same)
        return None
    chunk = chunk_scheduler(ctx)
    try:
        hold = SchedulerHold.objects.filter(key=hold_key(target)).first()
        if hold is None:
            admitted = _admit(target, ctx, policy)
            if isinstance(admitted, Outcome):
                return admitted
            hold = admitted
        if hold.state == HoldState.REQUESTED:  # sent at the chunk's end with the chunk's other drains
            chunk.drain_later(hold, target)
            note = f" ({hold.note})" if hold.note else ""
            return later(target, poll, last_error=f"draining {hold.node}: drain requested{note}"[:2000])
        if hold.state not in (HoldState.HELD, HoldState.FOREIGN):
            return None  # the scheduler does not know the node: nothing runs there that Fleet could see
        live = chunk.reading().get(hold.node)  # read after the drain (drains are sent at a chunk's end)
    except SchedulerError as exc:
        return later(target, poll, last_error=f"waiting for the scheduler: {exc}"[:2000])
    if live is None or not live.jobs:
        return None
    holds.node_record(live, target.server)  # the server page shows the wait before the next refresh
    since = hold.drained_at or hold.requested_at  # the database's clock (inventory.scheduler.holds)
    ids = ", ".join(str(j) for j in live.jobs[:10]) + (" ..." if len(live.jobs) > 10 else "")
    waiting = (f"draining {hold.node}: {len(live.jobs)} job{'s' if len(live.jobs) != 1 else ''} left, ids {ids}, "
               f"since {timezone.localtime(since):%H:%M}")
    if hold.state == HoldState.FOREIGN:
        waiting += f" (out for someone else: {hold.note})"
    keep_waiting = policy.on_deadline == "wait" or (policy.on_deadline == "requeue" and not policy.allow_requeue)
    if clock.since(since) < policy.deadline_seconds or keep_waiting:
        return later(target, poll, last_error=waiting[:2000])
    if policy.on_deadline == "skip":
        return fail(target, ErrorClass.INFRA, f"drain deadline ({policy.deadline_seconds}s) passed: {waiting}; "
                                              "skipped as an exception, not activated", [])
    try:
        sent = holds.hold_requeue(hold, list(live.jobs))
    except SchedulerError as exc:
        return later(target, poll, last_error=f"{waiting}; requeue failed: {exc}"[:2000])
    note = f"requeued {', '.join(map(str, sent))}" if sent else "requeued earlier"
    return later(target, poll, last_error=f"{waiting}; {note}, waiting for the jobs to leave"[:2000])


def drains_send(ctx: StepContext) -> int:
    """At a chunk's end: send the drains its targets recorded (``holds.holds_drain``: one read, one DRAIN per
    node), each fenced by its target's claim just before its node's request leaves. Returns how many were
    decided. A scheduler that does not answer leaves them requested: the targets' next steps send them again."""
    chunk = ctx.scheduler
    if chunk is None or not chunk.drains:
        return 0
    claims = ctx.claims
    recorded = dict(chunk.drains)  # one copy: a step left to its thread (steps.run_steps) may still record one
    targets = {hold.pk: target for hold, target in recorded.values()}

    def owned(hold: SchedulerHold) -> bool:
        if claims is None:
            return True
        try:
            claims.check(targets[hold.pk])
        except LostLease:
            return False
        return True

    try:
        done = holds.holds_drain([hold for hold, _ in recorded.values()], check=owned)
    except SchedulerError:
        return 0
    for key in recorded:  # one recorded meanwhile stays requested in the database: its target's next step sends it
        chunk.drains.pop(key, None)
    return sum(h.state != HoldState.REQUESTED for h in done)


def _held_targets() -> object:
    """Ids of targets with an open drain (a subquery: counted in SQL, whatever their number)."""
    return SchedulerHold.objects.filter(owner=OWNER, state__in=HOLD_OPEN).values("owner_id")


def _admit(target: RolloutTarget, ctx: StepContext, policy: DrainPolicy) -> SchedulerHold | Outcome:
    """Count the caps with every requested drain as unavailable and record the hold, in one transaction under
    the admission lock: two steps never both take the last slot of a site, a rack, a pool or a partition."""
    cluster = chunk_scheduler(ctx).reading()
    live = cluster.get(scheduler.node_name(target.server))
    strategy = ctx.strategy(target.rollout)
    pools = ctx.pools.get(target.server_id, [])
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [DRAIN_ADMIT_LOCK])
        held = hold_reason(target)
        if held:
            return later(target, 5, last_error=f"held: {held}")
        busy = (RolloutTarget.objects.filter(unavailable() | Q(pk__in=_held_targets()))
                .exclude(unit_key=target.unit_key, rollout_id=target.rollout_id))
        capped = strategy.max_unavailable_per_site or strategy.max_unavailable_per_pool or strategy.domain_caps
        full = cap_reached(target, strategy, busy, pools) if capped else ""
        if not full and live is not None:
            full = _partition_full(live, policy, cluster)
        if full:
            return later(target, 3, last_error=f"waiting: {full}")
        return holds.hold_request(key=hold_key(target), server=target.server,
                                  reason=f"rollout {target.rollout_id} ({target.rollout.name}) target {target.pk}",
                                  partitions=live.partitions if live else ())


def _partition_full(live: NodeState, policy: DrainPolicy, cluster: dict[str, NodeState]) -> str:
    """"" if draining ``live``'s node keeps every partition it is in under the cap; else why not."""
    percent = policy.partition_max_percent or settings.FLEET_SCHEDULER_PARTITION_MAX_DRAIN_PERCENT
    if not percent or not live.partitions:
        return ""
    if SchedulerHold.objects.filter(node=live.name, state__in=HOLD_DRAINING).exists():
        return ""  # Fleet has it drained already (a health drain): no capacity lost by this one
    for partition in live.partitions:
        total = sum(1 for n in cluster.values() if partition in n.partitions)
        drained = (SchedulerHold.objects.filter(partitions__contains=f",{partition},", state__in=HOLD_DRAINING)
                   .values("node").distinct().count())
        if total and (drained + 1) * 100 > percent * total + 1e-9:
            return (f"partition {partition}: {drained} of {total} nodes drained by Fleet "
                    f"(cap {percent:g}%)")
    return ""


def release_ended(limit: int = 500) -> int:
    """Release the open holds of targets that ended (see the module docstring). Returns how many."""
    if scheduler.configured() is None:
        return 0
    open_holds = list(SchedulerHold.objects.filter(owner=OWNER, state__in=HOLD_OPEN).order_by("id")[:limit])
    if not open_holds:
        return 0
    targets = {t.pk: t for t in RolloutTarget.objects.filter(pk__in=[h.owner_id for h in open_holds])
               .only("id", "state", "started_at")}
    ended = [hold for hold in open_holds if (target := targets.get(hold.owner_id)) is None
             or target.state in TARGET_DONE or hold_key(target) != hold.key]
    try:
        holds.holds_release(ended)  # one read, one RESUME per node
    except SchedulerError:
        return 0  # recorded as releasing: the next tick (or the scheduler refresh) sends them
    return len(ended)

