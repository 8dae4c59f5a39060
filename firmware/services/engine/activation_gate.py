"""Draining -> activating: the moment a server becomes unavailable, so every limit is enforced here, at run
time, across every rollout (canary included), under the site's advisory lock (then each pool's, in id order):

- the rollout is re-read under the lock: paused, aborted, stop requested, or a release of the target's work
  revoked (demotion) -> the target holds, no new side effect;
- an activation window (a freeze always wins);
(the site/pool locks are taken only when the strategy has a cap: without one there is nothing to count)
- max unavailable per site and per pool, and every failure-domain cap of the strategy (``domain_caps``: rack,
  power feed, row, site, NVLink domain), counted over the servers unavailable in ANY rollout. A server is
  unavailable from the moment it leaves draining until it verifies healthy: activating, verifying, and failed
  after an activation was sent (it may be down) — so a failed verification keeps its slot.
  Targets of the candidate's own unit (an NVLink domain moves together) do not count against it.
The claim is a compare-and-set (state, version, fence) inside the same transaction: what the next step counts.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Exists, F, OuterRef, Q

from firmware.models import Channel, Release, Rollout, RolloutState, RolloutTarget, TargetState, TargetStep
from firmware.services.engine import clock
from firmware.services.engine.context import StepContext
from firmware.services.engine.locks import POOL_LOCK_NS, SITE_LOCK_NS, is_postgres
from firmware.services.engine.outcomes import AlreadyApplied, Outcome, later
from firmware.services.windows import activation_allowed


def unavailable() -> Q:
    """Targets whose server is unavailable (any rollout): activating or verifying, and every target an activation
    was sent for (or may have been) that has not verified healthy since: failed, and failed then retried (back to
    pending, precheck, staging or draining: its server may still be down)."""
    activated = Exists(TargetStep.objects.filter(target=OuterRef("pk"), kind="activate"))
    return Q(state__in=(TargetState.ACTIVATING, TargetState.VERIFYING)) | (
        Q(state__in=NOT_VERIFIED) & Q(activated))


NOT_VERIFIED = (TargetState.FAILED, TargetState.PENDING, TargetState.PRECHECK, TargetState.STAGING,
                TargetState.DRAINING)


def draining_step(target: RolloutTarget, ctx: StepContext) -> Outcome:
    strategy = ctx.strategy(target.rollout)
    now = clock.now()
    pools = ctx.pools.get(target.server_id, [])
    verdict = activation_allowed(at=now, windows=ctx.windows_for(target.site_id, pools),
                                 require_window=strategy.require_window, window_ids=strategy.window_ids)
    if not verdict.allowed:
        wait = (verdict.retry_at - now).total_seconds() if verdict.retry_at else 60
        return later(target, min(wait, 60), last_error=f"waiting: {verdict.reason}")
    capped = bool(strategy.max_unavailable_per_site or strategy.max_unavailable_per_pool or strategy.domain_caps)
    return claim_for_activation(target, strategy, pools, capped)


def claim_for_activation(target: RolloutTarget, strategy: Any, pools: list[int], capped: bool) -> Outcome:
    """THE point where a target is claimed for activation (its server becomes unavailable): everything that must
    hold before the first disruptive side effect is checked here, in one transaction, and a hook that must run
    first (e.g. draining the node from a scheduler) belongs here too. Locks, in a fixed order (no deadlock): the
    site's advisory lock (every activation, capped or not, so uncapped rollouts are counted consistently by
    capped ones), each pool's (when the strategy caps pools), then the rollout's row ``FOR UPDATE`` (a pause or an
    abort, which update that row, either committed before — the target holds — or waits for this claim)."""
    with transaction.atomic():
        if is_postgres():
            # The site's lock, then each pool's in id order (a fixed order: no deadlock), held to the commit, so
            # two steps never both see the last free slot of a site, a rack, or a pool that spans sites.
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [SITE_LOCK_NS, target.site_id or 0])
                for pool_id in sorted(pools) if strategy.max_unavailable_per_pool else []:
                    cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [POOL_LOCK_NS, pool_id])
        held = hold_reason(target)
        if held:
            return later(target, 5, last_error=f"held: {held}")
        busy = RolloutTarget.objects.filter(unavailable()).exclude(unit_key=target.unit_key,
                                                                   rollout_id=target.rollout_id)
        full = cap_reached(target, strategy, busy, pools) if capped else ""
        if full:
            return later(target, 3, last_error=f"waiting: {full}")
        updated = RolloutTarget.objects.filter(pk=target.pk, state=target.state, version=target.version,
                                               fence=target.fence).update(
            state=TargetState.ACTIVATING, version=F("version") + 1, last_error="", deadline_at=None,
            lease_owner="", lease_until=None,
            next_run_at=clock.now() + dt.timedelta(seconds=settings.FLEET_ROLLOUT_LEASE_SECONDS))
    if updated:
        target.state, target.version = TargetState.ACTIVATING, target.version + 1
    return AlreadyApplied(updated)


def hold_reason(target: RolloutTarget) -> str:
    """Why the rollout must not start a new activation now ("" if it may): read under the lock."""
    releases = [w["release"] for w in target.work or []]
    state, stop = (Rollout.objects.select_for_update().filter(pk=target.rollout_id)
                   .values_list("state", "stop_requested").get())  # the row lock: pause and abort wait for us
    is_revoked = Release.objects.filter(pk__in=releases, channel=Channel.REVOKED).exists()
    if state != RolloutState.RUNNING:
        return f"the rollout is {state}"
    if stop:
        return "the rollout is stopping"
    if is_revoked:
        return "a release of this bundle was revoked"
    return ""


def cap_reached(target: RolloutTarget, strategy, busy, pools: list[int]) -> str:
    if strategy.max_unavailable_per_site and target.site_id is not None:
        n = busy.filter(site_id=target.site_id).count()
        if n >= strategy.max_unavailable_per_site:
            return f"{n} servers of the site unavailable (cap {strategy.max_unavailable_per_site})"
    if strategy.max_unavailable_per_pool and pools:
        from firmware.models import Pool

        # Each pool on its own: a server in two pools waits only when one of them is at its cap.
        per_pool = (Pool.servers.through.objects.filter(pool_id__in=pools, server_id__in=busy.values("server_id"))
                    .values("pool_id").annotate(n=Count("server_id")).order_by())
        full = [row for row in per_pool if row["n"] >= strategy.max_unavailable_per_pool]
        if full:
            return f"{full[0]['n']} servers of the pool unavailable (cap {strategy.max_unavailable_per_pool})"
    for domain, cap in sorted(strategy.domain_caps.items()):
        value = (target.domains or {}).get(domain)
        if not value:
            continue
        n = busy.filter(**{f"domains__{domain}": value}).values("server_id").distinct().count()
        if n >= cap:
            return f"{n} servers of {domain} {value} unavailable (cap {cap})"
    return ""
