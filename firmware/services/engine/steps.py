"""target_steps(pairs): advance a chunk of targets one step each; the per-state step and draining."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, F
from django.utils import timezone

from firmware.models import ErrorClass, RolloutState, RolloutTarget, TargetState
from firmware.models.rollout import TARGET_IN_FLIGHT, TARGET_PAST_NO_RETURN
from firmware.redfish import BmcError, bmc_client_forget
from firmware.services import engine
from firmware.services.engine.context import _Context
from firmware.services.engine.dispatch import _chunks
from firmware.services.engine.locks import (
    POOL_LOCK_NS,
    SITE_LOCK_NS,
    _async_commit,
    _lock_servers,
    _pg,
    _unlock_servers,
)
from firmware.services.engine.outcomes import (
    Outcome,
    _AlreadyApplied,
    _apply,
    _apply_many,
    _current_releases,
    _fail,
    _later,
)
from firmware.services.engine.side_effects import _activating, _staging
from firmware.services.engine.verification import _flush_successes, _precheck, _verifying
from firmware.services.windows import activation_allowed

logger = logging.getLogger(__name__)


@dataclass
class StepsResult:
    done: int = 0
    stale: int = 0
    busy: int = 0
    continued: list[tuple[int, int]] = field(default_factory=list)


def target_steps(pairs: Sequence[Sequence[int]]) -> StepsResult:
    """Advance each (target id, version) by one step; see the module docstring. Returns what it did.

    Per chunk, not per target: one read of the targets, one of their recorded steps, one flushed transaction
    recording every side effect the chunk is about to send, one compare-and-set statement for all the results
    (about 5 queries per chunk plus the BMC requests; measured in bench/README.md)."""
    result = StepsResult()
    want = {int(t): int(v) for t, v in pairs}
    targets = list(RolloutTarget.objects.filter(id__in=want).select_related("server", "rollout")
                   .order_by("id"))
    fresh = [t for t in targets if t.version == want[t.pk] and t.state in TARGET_IN_FLIGHT]
    result.stale = len(want) - len(fresh)
    ctx = _Context([t.server_id for t in fresh])
    locked = _lock_servers([t.server_id for t in fresh])
    _async_commit(True)
    pending: list[tuple[RolloutTarget, Outcome]] = []
    try:
        busy = [t for t in fresh if t.server_id not in locked]
        if busy:  # another step drives these BMCs now: look again in a second
            result.busy = len(busy)
            for t in busy:
                RolloutTarget.objects.filter(pk=t.pk, version=t.version).update(
                    next_run_at=timezone.now() + dt.timedelta(seconds=1))
        runnable = [t for t in fresh if t.server_id in locked and (
            t.rollout.state == RolloutState.RUNNING or t.state in TARGET_PAST_NO_RETURN)]  # else: hold
        ctx.load_steps(runnable)
        ctx.record_planned(runnable)
        for target in runnable:
            try:
                outcome = _step(target, ctx)
            except Exception as exc:  # a bug, not the BMC: keep the state, come back later
                logger.exception("rollout target %s: step failed", target.pk)
                outcome = Outcome(target.state, {"last_error": f"internal error: {exc}"[:2000],
                                                 "next_run_at": timezone.now() + dt.timedelta(seconds=30)})
            if isinstance(outcome, _AlreadyApplied):
                result.done += outcome.applied
                if outcome.applied:
                    result.continued.append((target.pk, target.version))
            elif outcome.after or not _pg():
                if _apply(target, outcome):
                    _applied(result, ctx, target, outcome)
            else:
                pending.append((target, outcome))
        applied = _apply_many(pending)
        for target, outcome in pending:
            if target.pk in applied:
                _applied(result, ctx, target, outcome)
    finally:
        _async_commit(False)
        _unlock_servers(locked)
    _flush_successes(ctx)
    if result.continued:
        engine.send_steps(_chunks(result.continued))  # looked up on the package: tests replace it there
    return result


def _applied(result: StepsResult, ctx: _Context, target: RolloutTarget, outcome: Outcome) -> None:
    result.done += 1
    if outcome.again_now:
        result.continued.append((target.pk, target.version + 1))
    if outcome.succeeded is not None:
        ctx.succeeded.append(outcome.succeeded)


def _step(target: RolloutTarget, ctx: _Context) -> Outcome:
    if not target.server.bmc_address:
        return _fail(target, ErrorClass.INFRA, "the server has no BMC address", [])
    try:
        if target.state == TargetState.PRECHECK:
            return _precheck(target, ctx)
        if target.state == TargetState.STAGING:
            return _staging(target, ctx)
        if target.state == TargetState.DRAINING:
            return _draining(target, ctx)
        if target.state == TargetState.ACTIVATING:
            return _activating(target, ctx)
        if target.state == TargetState.VERIFYING:
            return _verifying(target, ctx)
    except BmcError as exc:
        if exc.error_class == ErrorClass.FIRMWARE:
            return _fail(target, ErrorClass.FIRMWARE, str(exc), _current_releases(target))
        return _infra(target, exc, ctx)
    return Outcome(target.state)


def _infra(target: RolloutTarget, exc: BmcError, ctx: _Context) -> Outcome:
    """An infrastructure error: try again with backoff until the retry policy's attempts are spent."""
    bmc_client_forget(target.server.bmc_address)
    strategy = ctx.strategy(target.rollout)
    attempts = target.attempts + 1
    if attempts >= strategy.retry_max_attempts:
        return _fail(target, ErrorClass.INFRA, f"{exc} (after {attempts} attempts)", [], attempts=attempts)
    wait = max(strategy.backoff(attempts), exc.retry_after or 0)
    return _later(target, wait, attempts=attempts, last_error=str(exc)[:2000], error_class=ErrorClass.INFRA)


def _draining(target: RolloutTarget, ctx: _Context) -> Outcome:
    """Wait for an activation window (a freeze always wins) and for room under max-unavailable; then activate.
    (Staging needs neither: images are staged outside windows.)"""
    strategy = ctx.strategy(target.rollout)
    now = timezone.now()
    pools = ctx.pools.get(target.server_id, [])
    verdict = activation_allowed(at=now, windows=ctx.windows_for(target.site_id, pools),
                                 require_window=strategy.require_window, window_ids=strategy.window_ids)
    if not verdict.allowed:
        wait = (verdict.retry_at - now).total_seconds() if verdict.retry_at else 60
        return _later(target, min(wait, 60), last_error=f"waiting: {verdict.reason}")
    capped = strategy.max_unavailable_per_site or (strategy.max_unavailable_per_pool and pools)
    if not capped:
        return Outcome(TargetState.ACTIVATING, {"last_error": "", "deadline_at": None}, again_now=True)
    with transaction.atomic():
        busy = RolloutTarget.objects.filter(state__in=TARGET_PAST_NO_RETURN).exclude(pk=target.pk)
        if _pg():
            # The site's lock, then each pool's in id order (a fixed order: no deadlock), held to the commit, so
            # two steps never both see the last free slot of a site or of a pool that spans sites.
            pool_locks = sorted(pools) if strategy.max_unavailable_per_pool else []
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [SITE_LOCK_NS, target.site_id or 0])
                for pool_id in pool_locks:
                    cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [POOL_LOCK_NS, pool_id])
        if strategy.max_unavailable_per_site and target.site_id is not None:
            n = busy.filter(site_id=target.site_id).count()
            if n >= strategy.max_unavailable_per_site:
                return _later(target, 3, last_error=f"waiting: {n} servers of the site unavailable")
        if strategy.max_unavailable_per_pool and pools:
            from firmware.models import Pool

            # Each pool on its own: a server in two pools waits only when one of them is at its cap.
            per_pool = (Pool.servers.through.objects.filter(pool_id__in=pools, server_id__in=busy.values("server_id"))
                        .values("pool_id").annotate(n=Count("server_id")).order_by())
            full = [row for row in per_pool if row["n"] >= strategy.max_unavailable_per_pool]
            if full:
                return _later(target, 3, last_error=f"waiting: {full[0]['n']} servers of the pool unavailable")
        # Claim the slot inside the lock: the CAS below is what others count.
        updated = RolloutTarget.objects.filter(pk=target.pk, state=target.state, version=target.version).update(
            state=TargetState.ACTIVATING, version=F("version") + 1, last_error="", deadline_at=None,
            next_run_at=timezone.now() + dt.timedelta(seconds=settings.FLEET_ROLLOUT_LEASE_SECONDS))
    if updated:
        target.state, target.version = TargetState.ACTIVATING, target.version + 1
    return _AlreadyApplied(updated)
