"""GPU lifecycle -> the scheduler: a drained GPU drains its server's node, RMA needs the node drained and idle,
a GPU back in service ends its hold (the node is resumed when no other Fleet hold keeps it out).

``gpu_transition_scheduled`` is called by ``inventory.services.gpu_transition`` inside its transaction: the
hold is recorded in that transaction (so it commits with the state change) and sent when it commits; a drain or
resume that could not be sent then stays recorded and the beat refresh (``holds_sweep``) sends it.
The checks run in that same call, so a refusal (``ValidationError``) rolls the whole transition back: RMA needs the
node drained and idle (``gpu_rma_check``); a return to service needs every registered return check to pass
(``register_return_check``: telemetry's "health checks passed"). They are not lifecycle guards: the guard
registry is for states a workflow owns outright, these only apply with a scheduler configured. Bulk transitions (the job kind)
do not drain: a person draining hundreds of GPUs at once drains their nodes in the scheduler."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.core.exceptions import ValidationError
from django.db import transaction

from inventory.models import Gpu, GpuState, SchedulerHold
from inventory.models.scheduler import HOLD_OPEN
from inventory.scheduler import SchedulerError, configured, node_name
from inventory.scheduler.holds import hold_drain, hold_release, hold_request

logger = logging.getLogger(__name__)


def gpu_hold_key(gpu: Gpu) -> str:
    return f"gpu:{gpu.pk}"


def _send(action, hold: SchedulerHold) -> None:  # type: ignore[no-untyped-def]
    try:
        action(hold)
    except SchedulerError as exc:  # recorded: the beat refresh sends it
        logger.warning("scheduler: %s of %s not sent yet: %s", action.__name__, hold.node, exc)


ReturnCheck = Callable[[Gpu], None]
RETURN_CHECKS: list[ReturnCheck] = []


def register_return_check(check: ReturnCheck) -> None:
    """``check(gpu)`` raises ValidationError while a GPU Fleet drained in the scheduler may not return to service."""
    RETURN_CHECKS.append(check)


def gpu_transition_scheduled(*, gpu: Gpu, from_state: str, to_state: str, reason: str) -> None:
    if configured() is None or gpu.server_id is None:
        return
    if to_state == GpuState.RMA:
        gpu_rma_check(gpu)
    elif to_state == GpuState.IN_SERVICE:
        for check in RETURN_CHECKS:
            check(gpu)
    if to_state == GpuState.DRAINED:
        serial = gpu.serial or f"#{gpu.pk}"
        hold = hold_request(key=gpu_hold_key(gpu), server=gpu.server,
                            reason=f"GPU {serial} (slot {gpu.module_id}) drained: {reason or 'no reason given'}")
        transaction.on_commit(lambda: _send(hold_drain, hold))
    elif to_state == GpuState.IN_SERVICE:
        hold = SchedulerHold.objects.filter(key=gpu_hold_key(gpu), state__in=HOLD_OPEN).first()
        if hold is not None:
            transaction.on_commit(lambda: _send(hold_release, SchedulerHold.objects.get(pk=hold.pk)))


def gpu_rma_check(gpu: Gpu) -> None:
    """A GPU in a server goes to RMA only when its node is drained (or down) and runs no job."""
    sched = configured()
    if sched is None or gpu.server_id is None:
        return
    node = node_name(gpu.server)
    try:
        live = sched.node_state([node]).get(node)
    except SchedulerError as exc:
        raise ValidationError(f"Cannot tell whether node {node} is idle (the scheduler: {exc}); try again.",
                              code="scheduler_unavailable") from exc
    if live is None:
        return
    if not (live.drain or live.down) or live.jobs:
        jobs = f" with {len(live.jobs)} job(s) running ({', '.join(map(str, live.jobs[:5]))})" if live.jobs else ""
        raise ValidationError(f"GPU {gpu.serial or gpu.pk} cannot go to RMA yet: its node {node} is {live.display}"
                              f"{jobs}. Drain the GPU (its node drains) and wait until the node is idle.",
                              code="node_not_idle")
