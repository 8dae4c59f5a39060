"""Rollouts over servers whose scheduler nodes are the test cluster's (the per-server ``scheduler_node``
override: the factories' hostnames are not the cluster's node names)."""

from __future__ import annotations

import time

import redis
from django.conf import settings

from firmware.models import RolloutState
from firmware.services import rollout as svc
from fleet import dispatch
from fleet.audit import SYSTEM
from inventory import services
from tests.firmware import rollout_fleet
from world.bmc.testing import SimulatorControl

DONE = (RolloutState.COMPLETED, RolloutState.COMPLETED_WITH_EXCEPTIONS, RolloutState.PAUSED, RolloutState.ABORTED)


def fleet_on_nodes(sim, nodes: list[str], **kwargs):
    """One server per node; server i's BMC is the simulator's bmc-000{i+1}."""
    fleet = rollout_fleet.build(servers=len(nodes), bmc_url=lambda i: sim.bmc_url(f"bmc-{i + 1:04d}"), **kwargs)
    for server, node in zip(fleet.servers, nodes, strict=True):
        services.record_update(obj=server, actor=SYSTEM, scheduler_node=node)
        server.refresh_from_db()
    return fleet


def start(fleet, users, *, servers=None, name="vbios rollout", **strategy):
    strategy.setdefault("canary", False)
    strategy.setdefault("waves", [100])
    selector = {"_server_ids": [s.pk for s in servers]} if servers else None
    rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"], strategy=strategy,
                                     selector=selector, name=name)
    return svc.rollout_start(rollout=rollout, actor=users["operator"])


def activations(sim, bmc: str) -> int:
    """Activation and reset requests the simulator PROCESSED for ``bmc`` (its control API's counters)."""
    processed = SimulatorControl(sim.url).counters(bmc)["bmcs"].get(bmc, {}).get("processed", {})
    return sum(n for key, n in processed.items() if "Activate" in key or ".Reset" in key)


def resumes(slurm, node: str) -> int:
    """RESUMEs slurmctld applied to ``node`` (its log), and the ones it refused (a second resume would be)."""
    log = slurm.log()
    applied = sum(log.count(f"update_node: node {node} state set to {s}\n") for s in ("IDLE", "ALLOCATED", "MIXED"))
    refused = log.count(f"Invalid node state transition requested for node {node} ")
    return applied + refused


def worker_env(slurm) -> dict[str, str]:
    """The environment of a real worker process pointed at the test cluster."""
    return {"FLEET_SCHEDULER": "slurm", "SLURM_CONF": str(slurm.conf), "FLEET_SCHEDULER_POLL_SECONDS": "0.5",
            "FLEET_SCHEDULER_CACHE_SECONDS": "0", "FLEET_ROLLOUT_LEASE_SECONDS": "3", "FLEET_BMC_TIMEOUT": "1",
            "FLEET_BMC_SETTLE_SECONDS": "4"}


def tick_until(condition, what: str, timeout: float = 60) -> None:
    """Tick like beat (once a second, never piling ticks up in the queue) until ``condition()``."""
    broker = redis.Redis.from_url(settings.REDIS_URL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if broker.llen("celery") < 2:
            dispatch.send("firmware.tasks.rollout_tick_task")
        if condition():
            return
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")
