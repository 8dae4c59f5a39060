"""Dispatch: lease due targets and publish their (target id, version) pairs to Celery in chunks."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Sequence

from django.conf import settings
from django.db.models import Q

from firmware.models import RolloutState, RolloutTarget
from firmware.models.rollout import TARGET_IN_FLIGHT, TARGET_PAST_NO_RETURN
from fleet import dispatch

logger = logging.getLogger(__name__)


def chunks_of(pairs: Sequence[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    size = settings.FLEET_ROLLOUT_CHUNK
    return [list(pairs[i:i + size]) for i in range(0, len(pairs), size)]


STEPS_TASK = "firmware.tasks.rollout_steps_task"


def send_steps(chunks: Iterable[list[tuple[int, int]]]) -> None:
    """Publish step chunks through ``fleet.dispatch`` (by name; tests patch ``dispatch.send``). A broker that
    is down loses nothing: the targets are leased, and the tick sends them again when the lease runs out."""
    for chunk in chunks:
        if chunk and not dispatch.send(STEPS_TASK, [[t, v] for t, v in chunk]):
            logger.warning("rollout: could not publish %d steps; the lease brings them back", len(chunk))


def lease_due_targets(now: dt.datetime, limit: int) -> list[tuple[int, int]]:
    """Lease and return (id, version) of due targets: in flight, of a running rollout (or past activation,
    which always finishes), ``next_run_at <= now``. ``FOR UPDATE SKIP LOCKED``: a row a step is writing right
    now is left for the next tick."""
    lease = now + dt.timedelta(seconds=settings.FLEET_ROLLOUT_LEASE_SECONDS)
    rows = list(RolloutTarget.objects.select_for_update(skip_locked=True, of=("self",))
                .filter(Q(rollout__state=RolloutState.RUNNING) | Q(state__in=TARGET_PAST_NO_RETURN),
                        state__in=TARGET_IN_FLIGHT, next_run_at__lte=now)
                .order_by("next_run_at", "id").values_list("id", "version")[:limit])
    if rows:
        RolloutTarget.objects.filter(id__in=[r[0] for r in rows]).update(next_run_at=lease)
    return sorted(rows)
