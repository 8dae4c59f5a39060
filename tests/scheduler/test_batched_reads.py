"""Scheduler reads per batch, not per node (a real Slurm cluster; every ``sinfo``/``squeue``/``scontrol`` Fleet
runs is counted by wrapper scripts on PATH, the process cache off): a chunk of rollout targets waiting for jobs
costs one read; the chunk that admits them costs one read for the admissions and one for sending their drains
(one DRAIN per node); beat's refresh
is one read for the cluster and one per batch of holds it sends or ends, whatever the number of holds."""

import datetime as dt
import time

import pytest
from django.utils import timezone

from firmware.models import MaintenanceWindow, RolloutTarget, TargetState, WindowKind
from inventory.models import HoldState, SchedulerHold
from inventory.scheduler import holds
from inventory.scheduler.refresh import scheduler_refresh
from tests import factories
from tests.firmware.conftest import drive  # noqa: F401 - the fixture
from tests.scheduler import rollout_helpers as rh
from world.bmc.testing import running_simulator

pytestmark = pytest.mark.django_db(transaction=True)
NODES = ["gpu01", "gpu02", "gpu03", "gpu04"]


def test_a_chunk_of_waiting_targets_reads_the_scheduler_once(users, drive, slurm, slurm_calls, settings):  # noqa: F811
    # The chunk waits for all four steps: a step left to its thread (FLEET_ROLLOUT_DETACH_SECONDS) sends the drain
    # it recorded from that thread, one more read, which this count is not about.
    settings.FLEET_ROLLOUT_DETACH_SECONDS = 0
    for node in NODES:
        slurm.sbatch(node, 120)
    with running_simulator(bmcs=4, task_seconds=0.1, bmc_reset_seconds=0.1, seed=7) as sim:
        fleet = rh.fleet_on_nodes(sim, NODES, per_rack=4)
        now = timezone.now()  # a change freeze holds the four targets at the draining gate, none admitted yet
        freeze = MaintenanceWindow.objects.create(name="freeze", kind=WindowKind.FREEZE,
                                                  starts_at=now - dt.timedelta(minutes=5),
                                                  ends_at=now + dt.timedelta(hours=1))
        rollout = rh.start(fleet, users, drain={"deadline_seconds": 3600, "on_deadline": "wait"})
        drive(rollout, lambda r: RolloutTarget.objects.filter(state=TargetState.DRAINING).count() == 4, timeout=40)
        assert not SchedulerHold.objects.exists()
        MaintenanceWindow.objects.filter(pk=freeze.pk).update(enabled=False)
        RolloutTarget.objects.update(next_run_at=timezone.now())
        slurm_calls.reset()
        drive(rollout, lambda r: True)  # one chunk admits the four and sends their drains at its end
        assert SchedulerHold.objects.filter(state=HoldState.HELD).count() == 4
        assert [slurm.node_line(n)[0] for n in NODES] == ["draining"] * 4
        assert slurm_calls.count("scontrol update") == 4  # one DRAIN per node
        # one read for the four admissions (caps, partitions), one under the four nodes' locks before the DRAINs
        assert slurm_calls.count("sinfo") == 2 and slurm_calls.count("squeue") == 2

        time.sleep(0.6)  # the targets' next look (FLEET_SCHEDULER_POLL_SECONDS = 0.5)
        versions = dict(RolloutTarget.objects.values_list("id", "version"))
        slurm_calls.reset()
        drive(rollout, lambda r: True)  # one tick, one chunk of the four waiting targets
        stepped = [t for t in RolloutTarget.objects.all() if t.version != versions[t.pk]]
        assert len(stepped) == 4 and all("1 job left" in t.last_error for t in stepped), [
            t.last_error for t in RolloutTarget.objects.all()]
        assert slurm_calls.count("sinfo") == 1 and slurm_calls.count("squeue") == 1  # not one per target
        assert slurm_calls.count("scontrol") == 0
        assert rh.activations(sim, "bmc-0001") == 0


def test_the_refresh_sends_and_ends_holds_with_one_read_per_batch(slurm, slurm_calls):
    rack = factories.rack(factories.site())
    servers = [factories.server(rack, hostname=node) for node in NODES[:3]]
    # six holds whose senders died before sending: two per node
    holds.holds_request([(f"gpu:{100 + i}:1", servers[i % 3], f"GPU {i} drained") for i in range(6)])
    slurm_calls.reset()
    done = scheduler_refresh()
    assert done["drained"] == 6 and SchedulerHold.objects.filter(state=HoldState.HELD).count() == 6
    assert slurm_calls.count("sinfo") == 2  # the refresh's read of the cluster, the sweep's read under the locks
    assert slurm_calls.count("scontrol update") == 3  # one DRAIN per node
    # their resumes recorded, never sent (the workers died): the next refresh ends them, one RESUME per node
    SchedulerHold.objects.update(state=HoldState.RELEASING)
    slurm_calls.reset()
    done = scheduler_refresh()
    assert done["released"] == 6
    assert set(SchedulerHold.objects.values_list("state", flat=True)) == {HoldState.RELEASED}
    assert slurm_calls.count("sinfo") == 2 and slurm_calls.count("scontrol update") == 3
    assert [slurm.node_line(n)[0] for n in NODES] == ["idle"] * 4
    assert [rh.resumes(slurm, n) for n in NODES[:3]] == [1, 1, 1]
