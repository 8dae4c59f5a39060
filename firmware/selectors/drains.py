"""The rollout page's scheduler panel: what each draining target waits for, and the nodes Fleet did not resume."""

from __future__ import annotations

from typing import Any

from firmware.models import Rollout, RolloutTarget, TargetState
from inventory import scheduler
from inventory.models import HoldState, SchedulerHold

OWNER = "rollout-target"  # (firmware.services.engine.drain's hold owner)


def rollout_drain_context(rollout: Rollout) -> dict[str, Any]:
    """``scheduler`` (configured?), ``draining`` (targets in the draining state with what they wait for: jobs,
    a cap, the window; at most 50) and ``not_resumed`` (holds of this rollout's targets Fleet left out of service
    because someone else has the node: never resumed by Fleet)."""
    if scheduler.configured() is None:
        return {"scheduler": False, "draining": [], "not_resumed": []}
    draining = list(RolloutTarget.objects.filter(rollout=rollout, state=TargetState.DRAINING)
                    .select_related("server").order_by("id")[:50])
    targets = RolloutTarget.objects.filter(rollout=rollout).values("pk")
    not_resumed = list(SchedulerHold.objects.filter(owner=OWNER, owner_id__in=targets,
                                                    state__in=(HoldState.FOREIGN, HoldState.LEFT))
                       .select_related("server").order_by("id")[:50])
    return {"scheduler": True, "draining": draining, "not_resumed": not_resumed}
