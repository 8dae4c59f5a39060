"""target_steps(pairs): advance a chunk of targets one step each; the per-state step and draining."""

from __future__ import annotations

import datetime as dt
import logging
import os
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import SimpleNamespace

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import connection

from firmware.models import ErrorClass, RolloutState, RolloutTarget, TargetState
from firmware.models.rollout import TARGET_IN_FLIGHT, TARGET_PAST_NO_RETURN
from firmware.redfish import BmcError, bmc_client, bmc_client_forget
from firmware.services.engine import clock
from firmware.services.engine.activation_gate import draining_step
from firmware.services.engine.claims import Claims
from firmware.services.engine.context import StepContext
from firmware.services.engine.dispatch import chunks_of, send_steps
from firmware.services.engine.drain import drain_gate, drains_send
from firmware.services.engine.locks import (
    async_commit,
    is_postgres,
    lock_servers,
    unlock_servers,
)
from firmware.services.engine.outcomes import (
    AlreadyApplied,
    Outcome,
    apply_many,
    apply_one,
    current_releases,
    fail,
    later,
)
from firmware.services.engine.side_effects import activating_step, staging_step
from firmware.services.engine.verification import flush_successes, precheck_step, verifying_step
from fleet.execution import LostLease, TimeBudget

logger = logging.getLogger(__name__)


@dataclass
class StepsResult:
    done: int = 0
    stale: int = 0
    busy: int = 0
    continued: list[tuple[int, int]] = field(default_factory=list)


def target_steps(pairs: Sequence[Sequence[int]]) -> StepsResult:
    """Advance each (target id, version) by one step; see the package docstring. Returns what it did.

    Per chunk: one read of the targets, one claim (fence + lease) of those at the named version, one of their
    recorded steps, one flushed transaction that re-checks the fences and records every side effect the chunk is
    about to send; then target by target, each result written within FLUSH_SECONDS of its end (one
    compare-and-set statement for those finished meanwhile). The chunk stops taking targets when its time
    budget is spent (well before the Celery soft limit) and on the soft limit itself, writing what it did."""
    result = StepsResult()
    want = {int(t): int(v) for t, v in pairs}
    targets = list(RolloutTarget.objects.filter(id__in=want).select_related("server", "rollout")
                   .order_by("id"))
    fresh = [t for t in targets if t.version == want[t.pk] and t.state in TARGET_IN_FLIGHT]
    result.stale = len(want) - len(fresh)
    claims = Claims()
    fresh = claims.claim(fresh)
    result.stale = len(want) - len(fresh)
    ctx = StepContext([t.server_id for t in fresh])
    ctx.claims = claims
    ctx.target_ids = [t.pk for t in fresh]
    budget = TimeBudget.for_task()
    threaded = threads_for(fresh)
    # In threads, each server's thread takes its own server lock (and gives it back when its BMC answered), so a
    # BMC that is slow to answer can be left to its thread while this worker goes on (``run_steps``).
    locked = set() if threaded else lock_servers([t.server_id for t in fresh])
    async_commit(True)
    pending: list[tuple[RolloutTarget, Outcome]] = []
    left: list[RolloutTarget] = []
    try:
        busy = [] if threaded else [t for t in fresh if t.server_id not in locked]
        if busy:  # another step drives these BMCs now: look again in a second
            result.busy = len(busy)
            release(busy, claims, seconds=1)
        held = fresh if threaded else [t for t in fresh if t.server_id in locked]
        runnable = [t for t in held if t.rollout.state == RolloutState.RUNNING or t.state in TARGET_PAST_NO_RETURN]
        release([t for t in held if t not in runnable], claims, seconds=5)  # paused or aborted: hold
        ctx.load_steps(runnable)
        runnable = ctx.record_fenced(runnable, claims)
        flushed = time.monotonic()
        for target, outcome in run_steps(runnable, ctx, budget, threaded=threaded):
            if outcome is LEFT:
                left.append(target)
                continue
            if outcome is LOST:
                continue  # another worker owns it now: write nothing
            if outcome is BUSY:  # another step drives this BMC now: look again in a second
                result.busy += 1
                release([target], claims, seconds=1)
                continue
            if isinstance(outcome, AlreadyApplied):
                result.done += outcome.applied
                if outcome.applied:
                    result.continued.append((target.pk, target.version))
            elif outcome.after or not is_postgres():
                if apply_one(target, outcome):
                    _applied(result, ctx, target, outcome)
            else:
                pending.append((target, outcome))
            if pending and time.monotonic() - flushed >= FLUSH_SECONDS:
                write_results(pending, result, ctx)
                pending, flushed = [], time.monotonic()
        drains_send(ctx)  # h19: the drains this chunk recorded, one scheduler read and one DRAIN per node
        write_results(pending, result, ctx)
        pending = []
        if left:  # out of time: the rest go on in a new message (their leases released)
            release(left, claims, seconds=0)
            result.continued += [(t.pk, t.version) for t in left]
    except SoftTimeLimitExceeded:
        write_results(pending, result, ctx)
    finally:
        async_commit(False)
        unlock_servers(locked)
    flush_successes(ctx)
    if result.continued:
        send_steps(chunks_of(result.continued))
    return result


FLUSH_SECONDS = 0.5
LEFT = Outcome("left")  # not started: out of time (sent on in a new message)
LOST = Outcome("lost")  # fenced: another worker owns the target
BUSY = Outcome("busy")  # its server is locked by another step: not started


def detach_seconds() -> float:
    """A chunk waits for its BMCs until at least half of its servers are done and nothing has answered for this
    long (``FLEET_ROLLOUT_DETACH_SECONDS``; 0: never); the servers still waiting (a request timing out, a slow BMC)
    are then left to their threads, which write their own results and send their own continuations, and the
    worker takes its next chunk."""
    return float(getattr(settings, "FLEET_ROLLOUT_DETACH_SECONDS", 0.25))


def threads_for(targets: list[RolloutTarget]) -> bool:
    """Whether a chunk works its servers on the process's threads (PostgreSQL, more than one server, more than
    one thread allowed); otherwise one after the other in the calling thread."""
    return is_postgres() and worker_concurrency() > 1 and len({t.server_id for t in targets}) > 1


def worker_concurrency() -> int:
    """How many BMCs one worker process talks to at once (``FLEET_ROLLOUT_WORKER_CONCURRENCY``)."""
    return max(1, int(getattr(settings, "FLEET_ROLLOUT_WORKER_CONCURRENCY", 32)))


_POOL: tuple[int, ThreadPoolExecutor] | None = None


def worker_pool() -> ThreadPoolExecutor:
    """The process's threads for BMC steps (created after a fork, in the process that uses them); their
    database connections stay open between chunks."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=worker_concurrency(), thread_name_prefix="bmc-step"))
    return _POOL[1]


def worker_pool_shutdown() -> None:
    """Close every pool thread's database connection and stop the pool (tests that step in their own process,
    before the test database is dropped; a worker process's pool ends with it)."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = None
        return
    pool, size = _POOL[1], worker_concurrency()
    barrier = threading.Barrier(size)

    def close() -> None:
        try:
            barrier.wait(timeout=10)  # one close per thread: each waits until every thread holds one
        except threading.BrokenBarrierError:
            pass
        connection.close()

    for _ in range(size):
        pool.submit(close)
    pool.shutdown(wait=True)
    _POOL = None


def run_steps(runnable: list[RolloutTarget], ctx: StepContext, budget: TimeBudget, *, threaded: bool = False
              ) -> Iterator[tuple[RolloutTarget, Outcome]]:
    """Step every target, yielding (target, outcome) as each finishes. BMC I/O is latency-bound: with ``threaded``
    the chunk's servers are worked concurrently on the process's pool (at most ``FLEET_ROLLOUT_WORKER_CONCURRENCY``
    at once), one thread per server (its targets in order) holding that server's lock (``BUSY`` when another step
    holds it), so a BMC never has two of our requests in flight. A slow or timing-out BMC delays only itself: once
    half of the servers are done and none has answered for ``detach_seconds()``, the rest are detached (their
    threads write their own results, ``finish_detached``) and the generator ends. Results of the others are
    written by the calling thread."""
    groups: dict[int, list[RolloutTarget]] = {}
    for target in runnable:
        groups.setdefault(target.server_id, []).append(target)
    stop = threading.Event()

    def one(target: RolloutTarget) -> Outcome:
        if stop.is_set() or budget.expired():
            return LEFT
        try:
            return step_one(target, ctx)
        except LostLease:
            return LOST
        except SoftTimeLimitExceeded:
            return LEFT

    if not threaded:
        for group in groups.values():
            for target in group:
                yield target, one(target)
        return
    results: queue.Queue = queue.Queue()
    gate = threading.Lock()
    detached = threading.Event()

    def deliver(target: RolloutTarget, outcome: Outcome) -> None:
        with gate:
            if not detached.is_set():
                results.put((target, outcome))
                return
        finish_detached(target, outcome, ctx)

    def run_group(group: list[RolloutTarget]) -> None:
        server = group[0].server_id
        delivered: set[int] = set()
        try:
            connection.close_if_unusable_or_obsolete()
            async_commit(True)
            if not lock_servers([server]):
                for target in group:
                    deliver(target, BUSY)
                return
            try:
                for target in group:
                    deliver(target, one(target))
                    delivered.add(target.pk)
            finally:
                unlock_servers({server})
        except Exception:  # a database that went away under this thread: the others go on in a new message
            logger.exception("rollout: a step thread failed")
            for target in group:
                if target.pk not in delivered:
                    deliver(target, LEFT)
        finally:
            with gate:
                results.put(None)

    pool = worker_pool()
    remaining = len(groups)
    for group in groups.values():
        pool.submit(run_group, group)
    seen: set[int] = set()
    answered, patience = time.monotonic(), detach_seconds()
    try:
        while remaining:
            try:
                item = results.get(timeout=patience / 5 if patience > 0 else None)
            except queue.Empty:
                if 2 * (len(groups) - remaining) >= len(groups) and time.monotonic() - answered >= patience:
                    with gate:
                        detached.set()
                        late = drain(results)
                    for target, outcome in late:
                        if target.pk not in seen:
                            seen.add(target.pk)
                            yield target, outcome
                    return
                continue
            answered = time.monotonic()
            if item is None:
                remaining -= 1
            elif item[0].pk not in seen:
                seen.add(item[0].pk)
                yield item
    finally:
        if not detached.is_set():
            stop.set()  # the soft time limit in this thread: the threads start nothing new


def drain(results: queue.Queue) -> list[tuple[RolloutTarget, Outcome]]:
    items = []
    while True:
        try:
            item = results.get_nowait()
        except queue.Empty:
            return items
        if item is not None:
            items.append(item)


def finish_detached(target: RolloutTarget, outcome: Outcome, ctx: StepContext) -> None:
    """A step that ended after its chunk went on (see ``run_steps``): its thread writes the result itself, sends the
    target on if it can go on at once (``continue_later``: gathered into chunks), and counts a success. Whatever
    fails here is left to the lease."""
    try:
        if outcome is LOST:
            return
        if outcome is LEFT or outcome is BUSY:
            release([target], ctx.claims, seconds=0 if outcome is LEFT else 1)
            if outcome is LEFT:
                continue_later((target.pk, target.version))
            return
        if isinstance(outcome, AlreadyApplied):
            if outcome.applied:
                continue_later((target.pk, target.version))
            return
        if apply_one(target, outcome):
            if outcome.again_now:
                continue_later((target.pk, target.version + 1))
            if outcome.succeeded is not None:
                flush_successes(SimpleNamespace(succeeded=[outcome.succeeded], specs=ctx.specs))
        drains_send(ctx)  # a drain this step recorded after its chunk sent the others (idempotent per hold)
    except Exception:
        logger.exception("rollout target %s: writing a detached step failed", target.pk)


GATHER_SECONDS = 0.1  # detached steps that go on at once are sent together, this long after the first of them
_gathered: list[tuple[int, int]] = []
_gather_lock = threading.Lock()


def continue_later(pair: tuple[int, int]) -> None:
    """Send a detached step's target on, in one message with the others that ended within GATHER_SECONDS (one
    message per target would make the next chunks one target each, worked one after the other)."""
    with _gather_lock:
        _gathered.append(pair)
        first = len(_gathered) == 1
    if first:
        timer = threading.Timer(GATHER_SECONDS, send_gathered)
        timer.daemon = True
        timer.start()


def send_gathered() -> None:
    with _gather_lock:
        pairs = list(_gathered)
        _gathered.clear()
    try:
        send_steps(chunks_of(pairs))
    except Exception:  # the broker: their leases bring them back
        logger.exception("rollout: sending %d continued targets failed", len(pairs))


def write_results(pending: list[tuple[RolloutTarget, Outcome]], result: StepsResult, ctx: StepContext) -> None:
    applied = apply_many(pending)
    for target, outcome in pending:
        if target.pk in applied:
            _applied(result, ctx, target, outcome)


def release(targets: list[RolloutTarget], claims: Claims, *, seconds: float) -> None:
    """Give the targets' leases back (fence unchanged) and look at them again in ``seconds``."""
    for t in targets:
        RolloutTarget.objects.filter(pk=t.pk, fence=t.fence).update(
            lease_owner="", lease_until=None, next_run_at=clock.now() + dt.timedelta(seconds=seconds))
        claims.drop(t.pk)


def _applied(result: StepsResult, ctx: StepContext, target: RolloutTarget, outcome: Outcome) -> None:
    result.done += 1
    if outcome.again_now:
        result.continued.append((target.pk, target.version + 1))
    if outcome.succeeded is not None:
        ctx.succeeded.append(outcome.succeeded)


def boot_grace_left(target: RolloutTarget, ctx: StepContext) -> float:
    """Seconds left of the boot grace after this target's last reset, from the reset's record in the database
    (``finished_at``, the database's clock): any worker, not only the one that sent it, knows the BMC reboots."""
    grace = float(getattr(settings, "FLEET_BMC_BOOT_GRACE_SECONDS", 300))
    ends = [st.finished_at for st in ctx.steps[target.pk].values() if st.kind == "reset" and st.finished_at]
    return max((grace - clock.since(e) for e in ends), default=0.0)


def step_one(target: RolloutTarget, ctx: StepContext) -> Outcome:
    if not target.server.bmc_address:
        return fail(target, ErrorClass.INFRA, "the server has no BMC address", [])
    grace = boot_grace_left(target, ctx)
    if grace > 0:
        bmc_client(target.server.bmc_address).session.expect_reboot(grace)
    try:
        if target.state == TargetState.PRECHECK:
            return precheck_step(target, ctx)
        if target.state == TargetState.STAGING:
            return staging_step(target, ctx)
        if target.state == TargetState.DRAINING:
            return drain_gate(target, ctx) or draining_step(target, ctx)
        if target.state == TargetState.ACTIVATING:
            return activating_step(target, ctx)
        if target.state == TargetState.VERIFYING:
            return verifying_step(target, ctx)
    except BmcError as exc:
        if exc.error_class == ErrorClass.FIRMWARE:
            return fail(target, ErrorClass.FIRMWARE, str(exc), current_releases(target))
        return _infra(target, exc, ctx)
    except (LostLease, SoftTimeLimitExceeded):
        raise
    except Exception as exc:  # a bug, not the BMC: bounded like infrastructure, then inconclusive
        logger.exception("rollout target %s: step failed", target.pk)
        attempts = target.attempts + 1
        if attempts >= settings.FLEET_ROLLOUT_INTERNAL_ATTEMPTS:
            return fail(target, ErrorClass.INCONCLUSIVE, f"internal error after {attempts} attempts: {exc}",
                        [], attempts=attempts)
        return later(target, min(300, 2 ** attempts), attempts=attempts,
                     last_error=f"internal error: {exc}"[:2000])
    return Outcome(target.state)


def _infra(target: RolloutTarget, exc: BmcError, ctx: StepContext) -> Outcome:
    """An infrastructure error: try again with backoff until the retry policy's attempts are spent."""
    if exc.ambiguous:  # the request may have landed: settle, then reconcile (no attempt is spent on it)
        return later(target, 1, last_error=f"unanswered: {exc}"[:2000], error_class="")
    bmc_client_forget(target.server.bmc_address)
    strategy = ctx.strategy(target.rollout)
    grace = boot_grace_left(target, ctx)
    if grace > 0:  # the BMC reboots after our reset (refused, 404, 503): no attempt spent, bounded by the grace
        return later(target, min(10.0, max(1.0, exc.retry_after or 2)),
                     last_error=f"the BMC is rebooting ({grace:.0f}s of boot grace left): {exc}"[:2000],
                     error_class=ErrorClass.INFRA)
    attempts = target.attempts + 1
    if attempts >= strategy.retry_max_attempts:
        if any(st.response_status is None and st.outcome != "not_sent" for st in ctx.steps[target.pk].values()):
            return fail(target, ErrorClass.INCONCLUSIVE, f"{exc} (after {attempts} attempts, with a request "
                        "the BMC never answered and could not be asked about)", [], attempts=attempts)
        return fail(target, ErrorClass.INFRA, f"{exc} (after {attempts} attempts)", [], attempts=attempts)
    wait = max(strategy.backoff(attempts), exc.retry_after or 0)
    return later(target, wait, attempts=attempts, last_error=str(exc)[:2000], error_class=ErrorClass.INFRA)
