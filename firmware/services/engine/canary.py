"""The canary proves every upgrade path: a path whose every canary unit failed on infrastructure (nothing was
learnt about the firmware) gets another unit of that path, taken from a later wave, before the waves start. A
path with no unit left to try keeps the rollout from going on (the tick pauses it with the reason)."""

from __future__ import annotations

from collections import defaultdict

from django.db.models import F

from firmware.models import ErrorClass, RolloutTarget, RolloutWave, TargetState


def untested_paths(wave: RolloutWave) -> list[str]:
    """Upgrade paths of the canary wave whose targets are all done and all failed on infrastructure."""
    states: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for path, state, error_class in RolloutTarget.objects.filter(wave=wave).values_list(
            "upgrade_path", "state", "error_class"):
        states[path].add((state, error_class))
    return sorted(path for path, seen in states.items()
                  if seen and all(s == TargetState.FAILED and e == ErrorClass.INFRA for s, e in seen))


def canary_reinforce(wave: RolloutWave) -> tuple[int, list[str]]:
    """Move one more unit of each untested path into the canary wave. Returns (targets moved, paths for which
    no unit is left)."""
    moved, exhausted = 0, []
    for path in untested_paths(wave):
        candidate = (RolloutTarget.objects.filter(rollout_id=wave.rollout_id, upgrade_path=path,
                                                  state=TargetState.PENDING, wave__index__gt=wave.index)
                     .order_by("wave__index", "id").values_list("unit_key", flat=True).first())
        if candidate is None:
            exhausted.append(path)
            continue
        n = RolloutTarget.objects.filter(rollout_id=wave.rollout_id, unit_key=candidate,
                                         state=TargetState.PENDING).update(wave=wave, version=F("version") + 1)
        RolloutWave.objects.filter(pk=wave.pk).update(planned=F("planned") + n)
        moved += n
    return moved, exhausted
