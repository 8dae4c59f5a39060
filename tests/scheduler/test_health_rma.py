"""Health and RMA act on the scheduler (a real Slurm cluster): draining a flagged GPU drains its node with a reason
naming the GPU's serial and the evidence; RMA is refused while the node runs a job and allowed once it is idle;
a repaired GPU returns to service only after its health checks pass, and then its node is resumed."""

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from inventory.models import GpuState, HoldState, SchedulerHold
from inventory.scheduler.refresh import scheduler_refresh
from telemetry.health import health_flag_act
from telemetry.models import HealthFlag
from tests import factories
from tests.acceptance.helpers import pass_run
from tests.scheduler import rollout_helpers as rh

pytestmark = pytest.mark.django_db(transaction=True)


def _flagged_gpu(node):
    server = factories.server(factories.rack(factories.site()), hostname=f"{node}.cluster.example")
    gpu = factories.gpu(server)
    now = timezone.now()
    flag = HealthFlag.objects.create(gpu=gpu, kind="rma_xid", severity="rma", raised_at=now, last_seen_at=now,
                                     evidence={"xids": [{"xid": 79, "meaning": "GPU has fallen off the bus",
                                                         "at": now.isoformat()}], "count": 1})
    return gpu, flag


def test_health_drain_drains_the_node_rma_waits_for_idle_and_repair_resumes(users, slurm):
    gpu, flag = _flagged_gpu("gpu03")  # the hostname's first label is the node's name
    job = slurm.sbatch("gpu03", 120)
    health_flag_act(flag=flag, action="drain", actor=users["operator"])
    state, reason = slurm.node_line("gpu03")
    assert state == "draining" and reason.startswith("fleet: GPU ") and gpu.serial in reason and "XID 79" in reason
    with pytest.raises(ValidationError) as err:
        health_flag_act(flag=flag, action="rma", actor=users["operator"])
    assert "cannot go to RMA yet" in str(err.value) and str(job) in str(err.value)
    gpu.refresh_from_db()
    assert gpu.state == GpuState.DRAINED
    slurm.run("scancel", str(job))
    slurm.wait(lambda: slurm.node_line("gpu03")[0] == "drained", "the node drained and idle")
    health_flag_act(flag=flag, action="rma", actor=users["operator"])
    gpu.refresh_from_db()
    assert gpu.state == GpuState.RMA and slurm.node_line("gpu03")[0] == "drained"
    # repaired: back through received -> burn-in -> in service; in service only once health passes
    from inventory import services

    services.gpu_transition(gpu=gpu, to_state=GpuState.RECEIVED, actor=users["operator"], reason="repaired")
    services.gpu_transition(gpu=gpu, to_state=GpuState.BURN_IN, actor=users["operator"], reason="burn-in")
    pass_run([gpu])  # the burn-in gate is met (acceptance): what still holds it out is its health flag
    with pytest.raises(ValidationError) as err:
        services.gpu_transition(gpu=gpu, to_state=GpuState.IN_SERVICE, actor=users["operator"], reason="back")
    assert "health checks have not passed" in str(err.value)
    assert slurm.node_line("gpu03")[0] == "drained"
    HealthFlag.objects.filter(pk=flag.pk).update(cleared_at=timezone.now())
    services.gpu_transition(gpu=gpu, to_state=GpuState.IN_SERVICE, actor=users["operator"], reason="passed")
    assert slurm.node_line("gpu03")[0] == "idle"
    assert SchedulerHold.objects.get().state == HoldState.RELEASED
    assert rh.resumes(slurm, "gpu03") == 1
    scheduler_refresh()
    assert gpu.server.scheduler_state.state == "idle"


def test_two_flagged_gpus_keep_the_node_drained_until_both_return(users, slurm):
    gpu, flag = _flagged_gpu("gpu04")
    other = factories.gpu(gpu.server)
    health_flag_act(flag=flag, action="drain", actor=users["operator"])
    from inventory import services

    services.gpu_transition(gpu=other, to_state=GpuState.DRAINED, actor=users["operator"], reason="fan noise")
    HealthFlag.objects.filter(pk=flag.pk).update(cleared_at=timezone.now())
    pass_run([gpu, other])  # a drained GPU's return needs its burn-in evidence (acceptance's gate)
    services.gpu_transition(gpu=gpu, to_state=GpuState.IN_SERVICE, actor=users["operator"], reason="ok")
    assert slurm.node_line("gpu04")[0] == "drained"  # the other GPU's hold keeps it out
    services.gpu_transition(gpu=other, to_state=GpuState.IN_SERVICE, actor=users["operator"], reason="ok")
    assert slurm.node_line("gpu04")[0] == "idle" and rh.resumes(slurm, "gpu04") == 1
