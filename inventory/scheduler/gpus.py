"""GPU lifecycle -> the scheduler: a drained GPU drains its server's node, RMA needs the node drained and idle,
a GPU back in service ends its hold (the node is resumed when no other Fleet hold keeps it out).

One path for one GPU and for many (the GPU page, the health page's one-click actions, the API, and the bulk
transitions of the GPU list, the API and the admin, sync or as a job):

- ``gpus_transition_refusals(gpus, to_state)`` before the move: why a GPU may not move (RMA: its node is not
  drained, or not idle; back in service: a registered return check, e.g. telemetry's "health checks passed"),
  with ONE scheduler read for all the GPUs' nodes. A single transition raises the refusal (``ValidationError``,
  rolling it back); a bulk one reports it per GPU like an illegal transition.
- ``gpus_transition_scheduled(gpus, to_state, reason)`` after the move, inside the caller's transaction: drains
  are recorded (one hold per GPU, its GPUs' serials named in one reason per node) and sent when the transaction
  commits, one DRAIN per node whatever the number of its GPUs; a GPU back in service ends its holds (one RESUME
  per node, once its last Fleet hold ends). A drain or resume that could not be sent stays recorded and the
  beat refresh (``holds_sweep``) sends it.

These are not lifecycle guards: the guard registry is for states a workflow owns outright, these only apply with
a scheduler configured.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count

from inventory.models import Gpu, GpuState, SchedulerHold, Server
from inventory.models.scheduler import HOLD_OPEN
from inventory.scheduler import SchedulerError, configured, node_name
from inventory.scheduler.holds import holds_drain, holds_release, holds_request

logger = logging.getLogger(__name__)
OWNER = "gpu"
SERIALS_IN_REASON = 16  # the rest is counted: Slurm's reason is one line


ReturnCheck = Callable[[Gpu], None]
RETURN_CHECKS: list[ReturnCheck] = []


def register_return_check(check: ReturnCheck) -> None:
    """``check(gpu)`` raises ValidationError while a GPU Fleet drained in the scheduler may not return to service."""
    RETURN_CHECKS.append(check)


def gpu_transition_scheduled(*, gpu: Gpu, from_state: str, to_state: str, reason: str) -> None:
    """The single-GPU transition's hook (``inventory.services.gpu_transition``, inside its transaction)."""
    refusals = gpus_transition_refusals(gpus=[gpu], to_state=to_state)
    if refusals:
        message, code = refusals[gpu.pk]
        raise ValidationError(message, code=code)
    gpus_transition_scheduled(gpus=[gpu], to_state=to_state, reason=reason)


def gpus_transition_refusals(*, gpus: Sequence[Gpu], to_state: str) -> dict[int, tuple[str, str]]:
    """{gpu id: (message, code)} of the GPUs that may not move to ``to_state`` because of the scheduler (empty
    without one). One scheduler read for every node."""
    placed = [g for g in gpus if g.server_id is not None]
    if configured() is None or not placed:
        return {}
    if to_state == GpuState.RMA:
        return _rma_refusals(placed)
    refusals: dict[int, tuple[str, str]] = {}
    if to_state == GpuState.IN_SERVICE:
        for gpu in placed:
            for check in RETURN_CHECKS:
                try:
                    check(gpu)
                except ValidationError as exc:
                    refusals[gpu.pk] = (" ".join(exc.messages), exc.code or "return_check")
                    break
    return refusals


def _rma_refusals(gpus: Sequence[Gpu]) -> dict[int, tuple[str, str]]:
    servers = _servers(gpus)
    nodes = {g.pk: node_name(servers[g.server_id]) for g in gpus}
    sched = configured()
    try:
        live = sched.node_state(sorted(set(nodes.values()))) if sched else {}
    except SchedulerError as exc:
        return {g.pk: (f"Cannot tell whether node {nodes[g.pk]} is idle (the scheduler: {exc}); try again.",
                       "scheduler_unavailable") for g in gpus}
    refusals = {}
    for gpu in gpus:
        state = live.get(nodes[gpu.pk])
        if state is None or ((state.drain or state.down) and not state.jobs):
            continue  # not a node of the scheduler, or drained and idle
        jobs = (f" with {len(state.jobs)} job(s) running ({', '.join(map(str, state.jobs[:5]))})"
                if state.jobs else "")
        refusals[gpu.pk] = (f"GPU {gpu.serial or gpu.pk} cannot go to RMA yet: its node {state.name} is "
                            f"{state.display}{jobs}. Drain the GPU (its node drains) and wait until the node is "
                            "idle.", "node_not_idle")
    return refusals


def gpus_transition_scheduled(*, gpus: Sequence[Gpu], to_state: str, reason: str) -> None:
    """Record the moved GPUs' drains or the end of their holds, sent when the caller's transaction commits."""
    placed = [g for g in gpus if g.server_id is not None]
    if configured() is None or not placed:
        return
    if to_state == GpuState.DRAINED:
        servers = _servers(placed)
        by_node: dict[str, list[Gpu]] = defaultdict(list)
        for gpu in placed:
            by_node[node_name(servers[gpu.server_id])].append(gpu)
        # One hold per drain of a GPU: drained, back in service and drained again is a new hold (its n-th).
        earlier = dict(SchedulerHold.objects.filter(owner=OWNER, owner_id__in=[g.pk for g in placed])
                       .values("owner_id").annotate(n=Count("id")).values_list("owner_id", "n"))
        requests = [(f"{OWNER}:{g.pk}:{earlier.get(g.pk, 0) + 1}", servers[g.server_id],
                     _drain_reason(node_gpus, reason))
                    for node_gpus in by_node.values() for g in node_gpus]
        recorded = holds_request(requests)
        transaction.on_commit(lambda: _send(holds_drain, recorded))
    elif to_state == GpuState.IN_SERVICE:
        open_holds = list(SchedulerHold.objects.filter(owner=OWNER, owner_id__in=[g.pk for g in placed],
                                                       state__in=HOLD_OPEN).order_by("id"))
        if open_holds:
            ids = [h.pk for h in open_holds]
            transaction.on_commit(lambda: _send(holds_release, list(
                SchedulerHold.objects.filter(pk__in=ids).select_related("server").order_by("id"))))


def _drain_reason(gpus: Sequence[Gpu], reason: str) -> str:
    """"GPU 1650124000004 (slot 3) drained: ..." or "GPUs A (slot 1), B (slot 2) drained: ..." for one node."""
    named = [f"{g.serial or f'#{g.pk}'} (slot {g.module_id})" for g in gpus[:SERIALS_IN_REASON]]
    more = f" and {len(gpus) - SERIALS_IN_REASON} more" if len(gpus) > SERIALS_IN_REASON else ""
    return f"GPU{'s' if len(gpus) > 1 else ''} {', '.join(named)}{more} drained: {reason or 'no reason given'}"


def _servers(gpus: Sequence[Gpu]) -> dict[int, Server]:
    """The GPUs' servers in one query (a GPU that carries its server already adds none)."""
    known = {g.server_id: g.server for g in gpus if Gpu.server.is_cached(g) and g.server is not None}
    missing = {g.server_id for g in gpus} - set(known)
    if missing:
        known.update(Server.objects.in_bulk(list(missing)))
    return known


def _send(action, holds: list[SchedulerHold]) -> None:  # type: ignore[no-untyped-def]
    try:
        action(holds)
    except SchedulerError as exc:  # recorded: the beat refresh sends it
        logger.warning("scheduler: %s of %s not sent yet: %s", action.__name__,
                       ", ".join(sorted({h.node for h in holds})), exc)
