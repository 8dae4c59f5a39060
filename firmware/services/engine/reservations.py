"""A wave's maintenance reservation (opt-in per strategy: ``drain.reservation``, docs/scheduler.md).

When a wave of a rollout whose strategy asks for it runs, Fleet reserves its servers' nodes in the scheduler for
the wave's window (Slurm: ``scontrol create reservation Flags=MAINT,IGNORE_JOBS``): from then on the scheduler
starts no job there that would run into the window, so long jobs are not placed on nodes about to be drained.
The window: with ``require_window``, the first opening of an allow window in the wave's scope (the strategy's
``window_ids``, else every global window and those of the wave's sites and pools) that has not ended; without,
from now for ``drain.reservation_minutes``. The reservation is recorded before it is created and deleted once
when the wave stops running (passed, failed, the rollout paused, aborted or completed); a wave that runs again
after a pause gets a new one. ``wave_reservations_sync()`` runs at the end of every tick, after the tick's
transaction (it talks to the scheduler). Without a scheduler it does nothing.
"""

from __future__ import annotations

import datetime as dt

from django.db.models import Q

from firmware.models import (
    MaintenanceWindow,
    Pool,
    RolloutState,
    RolloutTarget,
    RolloutWave,
    WaveState,
    WindowKind,
)
from firmware.services.engine import clock
from firmware.services.engine.drain import drain_policy
from firmware.services.plan import strategy_parse
from firmware.services.windows import window_next_opening
from inventory import scheduler
from inventory.models import ReservationState, SchedulerReservation, Server
from inventory.models.scheduler import RESERVATION_OPEN
from inventory.scheduler import reservations

OWNER = "rollout-wave"
LIVE_WAVES = (WaveState.RUNNING, WaveState.SOAKING)


def wave_reservations_sync(now: dt.datetime | None = None) -> dict[str, int]:
    """End the reservations of waves that stopped, reserve the running waves that ask for one and have none,
    send what is recorded and not yet created."""
    done = {"ended": 0, "created": 0}
    if scheduler.configured() is None:
        return done
    now = now or clock.now()
    open_ones = list(SchedulerReservation.objects.filter(owner=OWNER, state__in=RESERVATION_OPEN).order_by("id"))
    live = set(RolloutWave.objects.filter(pk__in=[r.owner_id for r in open_ones], state__in=LIVE_WAVES,
                                          rollout__state=RolloutState.RUNNING).values_list("pk", flat=True))
    done["ended"] = reservations.reservations_end([r for r in open_ones if r.owner_id not in live])
    reserved = {r.owner_id for r in open_ones if r.owner_id in live}
    for wave in (RolloutWave.objects.filter(state__in=LIVE_WAVES, rollout__state=RolloutState.RUNNING,
                                            rollout__strategy__drain__reservation=True)
                 .exclude(pk__in=reserved).select_related("rollout").order_by("id")):
        _request(wave, now)
    done["created"] = reservations.reservations_send(
        SchedulerReservation.objects.filter(owner=OWNER, state=ReservationState.REQUESTED).order_by("id"))
    return done


def _request(wave: RolloutWave, now: dt.datetime) -> None:
    servers = list(Server.objects.filter(pk__in=RolloutTarget.objects.filter(wave=wave).values("server_id"))
                   .order_by("id"))
    nodes = sorted({scheduler.node_name(s) for s in servers})
    window = _window(wave, servers, now)
    if not nodes or window is None:
        return  # nothing to reserve, or no allow window ahead: the engine's own gate makes the targets wait
    n = SchedulerReservation.objects.filter(owner=OWNER, owner_id=wave.pk).count() + 1
    reservations.reservation_request(name=f"fleet-r{wave.rollout_id}-w{wave.index}-{n}", owner=OWNER,
                                     owner_id=wave.pk, nodes=nodes, start=window[0], end=window[1])


def _window(wave: RolloutWave, servers: list[Server], now: dt.datetime) -> tuple[dt.datetime, dt.datetime] | None:
    strategy = strategy_parse(wave.rollout.strategy)
    if not strategy.require_window:
        return now, now + dt.timedelta(minutes=drain_policy(wave.rollout.strategy).reservation_minutes)
    windows = MaintenanceWindow.objects.filter(kind=WindowKind.ALLOW, enabled=True)
    if strategy.window_ids:
        windows = windows.filter(pk__in=strategy.window_ids)
    else:
        pools = Pool.servers.through.objects.filter(server__in=servers).values("pool_id")
        windows = windows.filter(Q(site__isnull=True, pool__isnull=True)
                                 | Q(site_id__in={s.site_id for s in servers}, pool__isnull=True)
                                 | Q(pool_id__in=pools))
    openings = [o for o in (window_next_opening(w, now) for w in windows.order_by("id")) if o is not None]
    if not openings:
        return None
    start, end = min(openings)
    return max(start, now), end
