"""The tick: judge each running rollout's wave, admit pending targets, lease and send the due ones."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F

from firmware.models import Rollout, RolloutState, RolloutTarget, RolloutWave, TargetState, WaveState
from firmware.models.rollout import TARGET_IN_FLIGHT
from firmware.services import gates
from firmware.services.engine import clock
from firmware.services.engine.admission import admit
from firmware.services.engine.canary import canary_reinforce
from firmware.services.engine.dispatch import chunks_of, lease_due_targets, send_steps
from firmware.services.engine.drain import release_ended
from firmware.services.engine.locks import TICK_LOCK, is_postgres
from firmware.services.engine.reservations import wave_reservations_sync
from firmware.services.plan import strategy_parse
from firmware.services.rollout import ENGINE, rollout_abort, rollout_engine_complete, rollout_engine_pause


@dataclass
class TickResult:
    ran: bool = True
    admitted: int = 0
    dispatched: int = 0
    messages: int = 0
    waves: list[str] = field(default_factory=list)


def rollout_tick(*, now: dt.datetime | None = None, limit: int | None = None) -> TickResult:
    """One tick (see the module docstring). Safe to run at any time and concurrently: a second tick that finds
    the first one running returns ``ran=False``."""
    result = TickResult()
    with transaction.atomic():
        if is_postgres():  # (SQLite, the embedded default, serialises writers anyway)
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [TICK_LOCK])
                if not cursor.fetchone()[0]:
                    return TickResult(ran=False)
        now = now or clock.now()
        for rollout in Rollout.objects.filter(state=RolloutState.RUNNING).select_related("bundle").order_by("id"):
            verdict = _judge_wave(rollout, now)
            if verdict:
                result.waves.append(f"{rollout.pk}: {verdict}")
        result.admitted = admit(now)
        pairs = lease_due_targets(now, limit or settings.FLEET_ROLLOUT_TICK_LIMIT)
        result.dispatched = len(pairs)
        chunks = chunks_of(pairs)
        result.messages = len(chunks)
        transaction.on_commit(lambda: send_steps(chunks))
    release_ended()  # resume the scheduler nodes of targets that ended (outside the tick's transaction)
    wave_reservations_sync()  # h19: the running waves' maintenance reservations, those of stopped waves deleted
    return result


def _judge_wave(rollout: Rollout, now: dt.datetime) -> str:
    """Gate the rollout's current wave; move on, complete, pause or abort. Returns what happened ("" if nothing)."""
    strategy = strategy_parse(rollout.strategy)
    wave = RolloutWave.objects.filter(rollout=rollout, index=rollout.current_wave).first()
    if wave is None:
        rollout_engine_complete(rollout=rollout)
        return "completed (no waves)"
    if wave.state == WaveState.PENDING:
        RolloutWave.objects.filter(pk=wave.pk).update(state=WaveState.RUNNING, started_at=now)
        return f"{wave.name} started"
    if wave.state not in (WaveState.RUNNING, WaveState.SOAKING):
        return ""
    is_canary = wave.index == 0 and strategy.canary
    if is_canary:
        moved, exhausted = canary_reinforce(wave)
        if moved:
            return f"{wave.name}: {moved} more target(s) for upgrade paths whose units failed on infrastructure"
        if exhausted and not RolloutTarget.objects.filter(wave=wave, state__in=TARGET_IN_FLIGHT + (
                TargetState.PENDING,)).exists():
            reason = (f"{wave.name}: {len(exhausted)} upgrade path(s) untested: every unit failed on "
                      "infrastructure and none is left to try")
            rollout_engine_pause(rollout_id=rollout.pk, reason=reason)
            return f"paused: {reason}"
    verdict = gates.wave_gate(wave=wave, strategy=strategy, now=now, is_canary=is_canary)
    if verdict.outcome == gates.WAIT:
        return ""
    gate = {**(wave.gate_result or {}), "outcome": verdict.outcome, "reason": verdict.reason,
            "counts": verdict.counts, "at": now.isoformat()}
    if verdict.outcome == gates.PASS:
        if strategy.soak_seconds and wave.soak_until is None:
            RolloutWave.objects.filter(pk=wave.pk).update(
                state=WaveState.SOAKING, soak_until=now + dt.timedelta(seconds=strategy.soak_seconds))
            return f"{wave.name} soaking"
        RolloutWave.objects.filter(pk=wave.pk).update(state=WaveState.PASSED, finished_at=now, gate_result=gate)
        nxt = RolloutWave.objects.filter(rollout=rollout, index__gt=wave.index).order_by("index").first()
        if nxt is None:
            rollout_engine_complete(rollout=rollout)
            return f"{wave.name} passed; completed"
        Rollout.objects.filter(pk=rollout.pk, state=RolloutState.RUNNING).update(
            current_wave=nxt.index, version=F("version") + 1)
        RolloutWave.objects.filter(pk=nxt.pk).update(state=WaveState.RUNNING, started_at=now)
        return f"{wave.name} passed; {nxt.name} started"
    RolloutWave.objects.filter(pk=wave.pk).update(state=WaveState.FAILED, finished_at=now, gate_result=gate)
    reason = f"{wave.name} gate {verdict.outcome}: {verdict.reason}"
    if verdict.outcome == gates.FAIL and strategy.on_failure == "abort":
        rollout_abort(rollout=rollout, actor=ENGINE, reason=reason)
        return f"aborted: {reason}"
    rollout_engine_pause(rollout_id=rollout.pk, reason=reason)
    return f"paused: {reason}"
