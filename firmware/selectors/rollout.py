"""Reads of the rollout API: the targets of a rollout (filtered, keyset-paginated) and the progress document.

The per-wave and per-domain counting lives in ``firmware.selectors.rollout_pages`` (shared with the HTML pages);
this module shapes it as JSON and adds the failures with their reasons and error classes.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from firmware.models import Rollout, RolloutTarget
from firmware.selectors.rollout_pages import rollout_failures, rollout_progress

FAILURES_SHOWN = 100


def rollout_targets(*, rollout_id: int, state: str | None = None, error_class: str | None = None,
                    wave: int | None = None) -> QuerySet[RolloutTarget]:
    """A rollout's targets with their server and wave, ordered by id (index ``target_rollout_state_idx`` when
    filtered by state)."""
    qs = RolloutTarget.objects.filter(rollout_id=rollout_id).select_related("server", "wave")
    if state:
        qs = qs.filter(state=state)
    if error_class:
        qs = qs.filter(error_class=error_class)
    if wave is not None:
        qs = qs.filter(wave__index=wave)
    return qs.order_by("id")


def rollout_progress_json(rollout: Rollout) -> dict[str, Any]:
    """Waves (state, counts per target state, per-domain progress, gate verdict), totals, and the latest
    failures with their reason and error class (3 queries)."""
    progress = rollout_progress(rollout)
    waves = []
    for wp in progress.waves:
        wave = wp.wave
        waves.append({
            "index": wave.index, "name": wave.name, "state": wave.state, "planned": wave.planned,
            "counts": wp.counts, "done": wp.done, "failed": wp.failed, "in_flight": wp.in_flight,
            "percent": wp.percent, "soak_until": wave.soak_until, "gate": wave.gate_result or {},
            "domains": {kind: [{"name": d.name, "total": d.total, "done": d.done, "failed": d.failed,
                                "in_flight": d.in_flight} for d in rows] for kind, rows in wp.domains.items()},
        })
    failures = [{"target": t.pk, "server": t.server.hostname, "wave": t.wave.index, "state": t.state,
                 "error_class": t.error_class, "reason": t.last_error, "attempts": t.attempts,
                 "finished_at": t.finished_at}
                for t in rollout_failures(rollout)[:FAILURES_SHOWN]]
    return {"id": rollout.pk, "state": rollout.state, "pause_reason": rollout.pause_reason,
            "current_wave": rollout.current_wave, "total": progress.total, "done": progress.done,
            "failed": progress.failed, "in_flight": progress.in_flight, "percent": progress.percent,
            "counts": progress.counts, "waves": waves, "failures": failures}
