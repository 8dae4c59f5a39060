"""What a chunk of steps shares (StepContext), and the idempotency keys of a target's side effects."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from typing import Any

from django.db import connection, transaction

from firmware.models import (
    BundleItem,
    ComponentSpec,
    Rollout,
    RolloutState,
    RolloutTarget,
    TargetState,
    TargetStep,
)
from firmware.redfish import resets_for
from firmware.services.engine import clock
from firmware.services.engine.claims import Claims
from firmware.services.engine.locks import is_postgres
from firmware.services.plan import Strategy, strategy_parse


class StepContext:
    """What a chunk of steps shares: bundle items, component specs, windows, the servers' pools (read once per
    chunk), and the successes to count and observe at its end."""

    def __init__(self, server_ids: list[int]) -> None:
        from firmware.models import MaintenanceWindow, Pool

        self.items: dict[int, list[BundleItem]] = {}
        self.specs = {s.component: s for s in ComponentSpec.objects.all()}
        self.strategies: dict[int, Strategy] = {}
        self.windows = list(MaintenanceWindow.objects.filter(enabled=True).order_by("kind", "id"))
        self.pools: dict[int, list[int]] = defaultdict(list)
        if server_ids:
            for server_id, pool_id in Pool.servers.through.objects.filter(server_id__in=server_ids).values_list(
                    "server_id", "pool_id"):
                self.pools[server_id].append(pool_id)
        self.succeeded: list[tuple[Any, list[int], list[dict[str, Any]]]] = []
        self.steps: dict[int, dict[str, TargetStep]] = defaultdict(dict)
        self.fresh: set[str] = set()  # keys recorded by this chunk: their side effect is still to send
        self.claims: Claims | None = None  # set by target_steps: the chunk's fences, checked before every send
        self.target_ids: list[int] = []
        self.rollout_states: dict[int, str] = {}
        self.states_read_at = -1.0
        self.scheduler: Any = None  # drain.ChunkScheduler: one scheduler reading and the drains to send, per chunk

    def rollout_running(self, rollout_id: int) -> bool:
        """Whether the rollout is still running, re-read at most every half second for the whole chunk: a pause,
        an abort or a demotion stops the chunk's staging requests within one step."""
        now = time.monotonic()
        if now - self.states_read_at >= 0.5:
            self.rollout_states = dict(Rollout.objects.filter(targets__in=self.target_ids).distinct()
                                       .values_list("id", "state"))
            self.states_read_at = now
        return self.rollout_states.get(rollout_id) == RolloutState.RUNNING

    def load_steps(self, targets: list[RolloutTarget]) -> None:
        """The recorded steps of the chunk's targets, by their possible keys: an equality lookup on the unique
        ``idem_key`` index, whatever the table's statistics say (a target_id IN list seq-scanned a table that grew
        during the benchmark)."""
        keys = [key for t in targets for key in _step_keys(t)]
        for start in range(0, len(keys), 1000):
            for step in TargetStep.objects.filter(idem_key__in=keys[start:start + 1000]):
                self.steps[step.target_id][step.idem_key] = step

    def record_fenced(self, targets: list[RolloutTarget], claims: Claims) -> list[RolloutTarget]:
        """Record, in ONE flushed transaction that first re-checks every target's fence ``FOR UPDATE``, the side
        effect each target is about to send (an update of its current item, or its next activation action).
        Returns the targets still held (a target whose fence moved is dropped: nothing recorded, nothing sent)."""
        planned: list[TargetStep] = []
        now = clock.now()
        token = f"recorded by chunk {uuid.uuid4().hex}"  # tells our inserts from a concurrent step's
        for t in targets:
            recorded = self.steps[t.pk]
            if t.state == TargetState.STAGING and t.item_index < len(t.work):
                item = t.work[t.item_index]
                key = f"{t.pk}:{item['release']}:update"
                if key not in recorded:
                    planned.append(TargetStep(target=t, release_id=item["release"], kind="update", idem_key=key,
                                              requested_at=now, messages=[token]))
            elif t.state == TargetState.ACTIVATING:
                for action in activation_actions(t.work):
                    key = f"{t.pk}:{action}"
                    if key not in recorded:
                        planned.append(TargetStep(target=t, kind="activate" if action == "activate" else "reset",
                                                  idem_key=key, requested_at=now, messages=[token]))
                        break
                    if recorded[key].response_status is None:
                        break  # recorded, never confirmed: reconciled (settle rule), no new record
        if not planned:  # nothing to record: the claim (fence bumped a moment ago) is the proof of ownership
            return [t for t in targets if claims.holds(t)]
        with transaction.atomic():
            if is_postgres():
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL synchronous_commit TO on")
            planned_ids = {p.target_id for p in planned}
            held = set(RolloutTarget.objects.select_for_update().filter(
                pk__in=[t.pk for t in targets if t.pk in planned_ids and claims.holds(t)],
                lease_owner=claims.owner).values_list("pk", "fence"))
            lost = {t.pk for t in targets if t.pk in planned_ids} - {
                pk for pk, fence in held if claims.fences.get(pk) == fence}
            for pk in lost:
                claims.drop(pk)
            planned = [p for p in planned if p.target_id not in lost]
            if planned:
                TargetStep.objects.bulk_create(planned, ignore_conflicts=True)
        held_ids = {t.pk for t in targets if claims.holds(t)}
        if planned:
            keys = [p.idem_key for p in planned]
            for step in TargetStep.objects.filter(idem_key__in=keys):
                self.steps[step.target_id][step.idem_key] = step
                if step.messages == [token]:  # inserted by this chunk (ignore_conflicts hides which rows were)
                    self.fresh.add(step.idem_key)
        return [t for t in targets if t.pk in held_ids]

    def step(self, target: RolloutTarget, key: str) -> tuple[TargetStep | None, bool]:
        """(the recorded step for ``key``, whether it was recorded by this chunk and not sent yet)."""
        return self.steps[target.pk].get(key), key in self.fresh

    def windows_for(self, site_id: int | None, pool_ids: list[int]) -> list[Any]:
        return [w for w in self.windows if (w.site_id is None and w.pool_id is None)
                or (w.site_id is not None and w.site_id == site_id and w.pool_id is None)
                or (w.pool_id is not None and w.pool_id in pool_ids)]

    def bundle_items(self, bundle_id: int) -> list[BundleItem]:
        if bundle_id not in self.items:
            self.items[bundle_id] = list(BundleItem.objects.filter(bundle_id=bundle_id).select_related("release")
                                         .order_by("order", "id"))
        return self.items[bundle_id]

    def strategy(self, rollout: Rollout) -> Strategy:
        if rollout.pk not in self.strategies:
            self.strategies[rollout.pk] = strategy_parse(rollout.strategy)
        return self.strategies[rollout.pk]


def _step_keys(target: RolloutTarget) -> list[str]:
    """Every idempotency key a target's steps may have recorded (one update per bundle item, the activation
    actions)."""
    work = target.work or []
    return ([f"{target.pk}:{item['release']}:update" for item in work]
            + [f"{target.pk}:{action}" for action in activation_actions(work)] if work else [])


def activation_actions(work: list[dict[str, Any]]) -> list[str]:
    """Activate, then each reset the work needs; a BMC reset is one action per manager the updated items name
    (on HGX: the HMC ``HGX_BMC_0`` first, then the host BMC ``Managers/1``, which takes the BMC down), each
    recorded, read and reconciled on its own."""
    actions = ["activate"]
    for kind in resets_for({w["activation"] for w in work}):
        if kind == "bmc_reset":
            names = manager_names(work)
            actions += [f"reset:bmc_reset:{name}" for name in names] or ["reset:bmc_reset"]
        else:
            actions.append(f"reset:{kind}")
    return actions


def manager_names(work: list[dict[str, Any]]) -> list[str]:
    """The managers a BMC reset of this work goes to, by the last segment of the items' RelatedItem (a chassis
    named like a manager, ``/Chassis/HGX_BMC_0``, or ``/Managers/1``); direct manager links last."""
    related = {r for w in work if w["activation"] == "bmc_reset" for r in w.get("related", [])}
    names: list[str] = []
    for uri in sorted(related, key=lambda r: ("/Managers/" in r, r)):
        name = uri.rstrip("/").rsplit("/", 1)[-1]
        if name not in names:
            names.append(name)
    return names
