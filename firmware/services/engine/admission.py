"""Admission: pending targets of the current wave to precheck, whole units, within per-BMC-class concurrency."""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict

from django.conf import settings
from django.db.models import Count, F

from firmware.models import Rollout, RolloutState, RolloutTarget, TargetState, WaveState
from firmware.models.rollout import TARGET_IN_FLIGHT


def _concurrency(bmc_class: str) -> int:
    return settings.FLEET_ROLLOUT_BMC_CONCURRENCY.get(bmc_class, settings.FLEET_ROLLOUT_DEFAULT_CONCURRENCY)


def admit(now: dt.datetime) -> int:
    """pending -> precheck for the current wave of running rollouts, whole units, within per-class concurrency."""
    in_flight = Counter(dict(RolloutTarget.objects.filter(state__in=TARGET_IN_FLIGHT).values("bmc_class")
                             .annotate(n=Count("id")).values_list("bmc_class", "n")))
    admitted = 0
    for rollout_id, wave_index in Rollout.objects.filter(state=RolloutState.RUNNING).values_list("id",
                                                                                                "current_wave"):
        rows = list(RolloutTarget.objects.filter(rollout_id=rollout_id, wave__index=wave_index,
                                                 wave__state=WaveState.RUNNING, state=TargetState.PENDING)
                    .order_by("id").select_for_update(skip_locked=True, of=("self",))
                    .values_list("id", "unit_key", "bmc_class")[:settings.FLEET_ROLLOUT_TICK_LIMIT])
        units: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for target_id, unit, bmc_class in rows:
            units[unit].append((target_id, bmc_class))
        chosen: list[int] = []
        for members in units.values():
            need = Counter(c for _, c in members)
            if all(in_flight[c] + n <= _concurrency(c) or in_flight[c] == 0 for c, n in need.items()):
                chosen += [t for t, _ in members]
                in_flight.update(need)
        if chosen:
            admitted += RolloutTarget.objects.filter(id__in=chosen, state=TargetState.PENDING).update(
                state=TargetState.PRECHECK, version=F("version") + 1, next_run_at=now, started_at=now,
                deadline_at=None)
    return admitted
