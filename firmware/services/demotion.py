"""Release demotion (LVFS): firmware outcomes counted on each release; at FLEET_DEMOTE_MIN_FAILURES failures
and FLEET_DEMOTE_FAILURE_RATIO of outcomes the release is revoked and every running rollout using it pauses."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.db.models import F

from firmware.models import Channel, Release, Rollout, RolloutState
from firmware.services.rollout import ENGINE, rollout_pause
from fleet.audit import Actor


def release_record_outcomes(*, release_ids: list[int], succeeded: bool) -> None:
    """Count one target's outcome on each release it applied (firmware outcomes only: never infra errors)."""
    if not release_ids:
        return
    field = "success_count" if succeeded else "failure_count"
    Release.objects.filter(pk__in=release_ids).update(**{field: F(field) + 1})


@transaction.atomic
def release_check_demotion(*, release: Release, actor: Actor | None = ENGINE) -> bool:
    """Revoke ``release`` when its firmware failures reach FLEET_DEMOTE_MIN_FAILURES and
    FLEET_DEMOTE_FAILURE_RATIO of its outcomes, and pause every running rollout that uses it. Returns whether
    it was demoted now."""
    release = Release.objects.select_for_update().get(pk=release.pk)
    total = release.success_count + release.failure_count
    if release.channel == Channel.REVOKED or total == 0:
        return False
    ratio = release.failure_count / total
    if release.failure_count < settings.FLEET_DEMOTE_MIN_FAILURES or ratio < settings.FLEET_DEMOTE_FAILURE_RATIO:
        return False
    reason = (f"demoted automatically: {release.failure_count} firmware failures in {total} updates "
              f"({ratio:.0%})")
    from firmware.services.catalog import release_set_channel

    release_set_channel(release=release, channel=Channel.REVOKED, actor=actor, reason=reason)
    rollouts_pause_using(release=release, reason=f"{release} was revoked ({reason})", actor=actor)
    return True


def rollouts_pause_using(*, release: Release, reason: str, actor: Actor | None) -> int:
    """Pause every running rollout whose bundle holds ``release``. Returns how many paused."""
    paused = 0
    using = Rollout.objects.filter(state=RolloutState.RUNNING, bundle__items__release=release).values("id")
    for rollout in Rollout.objects.select_for_update().filter(id__in=using).order_by("id"):
        rollout_pause(rollout=rollout, actor=actor, reason=reason)
        paused += 1
    return paused
