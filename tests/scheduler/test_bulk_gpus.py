"""Bulk GPU transitions act on the scheduler like the single-GPU path, with one request per node (a real Slurm
cluster; the Slurm clients Fleet runs are counted by wrapper scripts on PATH): the GPU list's bulk drain drains
each node once, its reason naming that node's GPUs; a bulk RMA changes nothing while a node runs a job and goes
through once the nodes are drained and idle; a bulk return to service resumes each node once; a GPU drained a
second time drains its node again; above the sync limit the background job does the same per chunk."""

import pytest
from django.urls import reverse

from fleet.models import Job, JobStatus
from inventory.models import Gpu, GpuState, HoldState, SchedulerHold
from tests import factories
from tests.acceptance.helpers import pass_run
from tests.scheduler import rollout_helpers as rh

pytestmark = pytest.mark.django_db(transaction=True)


def _gpus(rack, node, n):
    server = factories.server(rack, hostname=f"{node}.dc.example")  # the hostname's first label: the node
    return [factories.gpu(server) for _ in range(n)]


def _states(gpus):
    return set(Gpu.objects.filter(pk__in=[g.pk for g in gpus]).values_list("state", flat=True))


def _bulk(client, gpus, to_state, reason=""):
    return client.post(reverse("gpu-bulk-transition"), {"gpu": [g.pk for g in gpus], "to_state": to_state,
                                                         "scope": "selected", "reason": reason}, follow=True)


def test_bulk_drain_drains_each_node_once_and_bulk_rma_waits_for_idle_nodes(users, slurm, slurm_calls, client):
    rack = factories.rack(factories.site())
    first, second = _gpus(rack, "gpu01", 3), _gpus(rack, "gpu02", 2)
    job = slurm.sbatch("gpu01", 120)
    client.force_login(users["operator"])

    page = _bulk(client, first + second, "drained", "NVLink errors after the PSU swap").content.decode()
    assert "5 GPUs moved to Drained." in page
    state, reason = slurm.node_line("gpu01")
    assert state == "draining" and reason.startswith("fleet: GPUs ") and "NVLink errors after the PSU swap" in reason
    assert all(g.serial in reason for g in first) and not any(g.serial in reason for g in second)
    state, reason = slurm.node_line("gpu02")
    assert state == "drained" and all(g.serial in reason for g in second)
    assert slurm_calls.count("scontrol update") == 2  # one DRAIN per node, not one per GPU
    assert slurm_calls.count("sinfo") == 1 and slurm_calls.count("squeue") == 1  # one read for the batch
    assert SchedulerHold.objects.filter(state=HoldState.HELD).count() == 5  # one hold per GPU

    slurm_calls.reset()
    page = _bulk(client, first + second, "rma").content.decode()
    assert "Nothing was changed" in page and "its node gpu01 is draining" in page and str(job) in page
    assert _states(first + second) == {GpuState.DRAINED}  # all or nothing: gpu02's GPUs did not move either
    assert slurm_calls.count("sinfo") == 1  # one read for five GPUs on two nodes

    slurm.run("scancel", str(job))
    slurm.wait(lambda: slurm.node_line("gpu01")[0] == "drained", "gpu01 drained and idle")
    page = _bulk(client, first + second, "rma").content.decode()
    assert "5 GPUs moved to RMA." in page and _states(first + second) == {GpuState.RMA}
    assert [slurm.node_line(n)[0] for n in ("gpu01", "gpu02")] == ["drained", "drained"]


def test_bulk_return_to_service_resumes_each_node_once_and_a_second_drain_drains_again(users, slurm, slurm_calls,
                                                                                      client):
    rack = factories.rack(factories.site())
    first, second = _gpus(rack, "gpu03", 2), _gpus(rack, "gpu04", 2)
    client.force_login(users["operator"])
    _bulk(client, first + second, "drained", "cooling work")
    assert [slurm.node_line(n)[0] for n in ("gpu03", "gpu04")] == ["drained", "drained"]
    pass_run(first + second)  # a drained GPU's return needs its burn-in evidence (acceptance's gate)

    slurm_calls.reset()
    page = _bulk(client, first + second, "in_service", "cooling fixed").content.decode()
    assert "4 GPUs moved to In service." in page
    assert [slurm.node_line(n)[0] for n in ("gpu03", "gpu04")] == ["idle", "idle"]
    assert rh.resumes(slurm, "gpu03") == 1 and rh.resumes(slurm, "gpu04") == 1
    assert slurm_calls.count("scontrol update") == 2 and slurm_calls.count("sinfo") == 1
    assert set(SchedulerHold.objects.values_list("state", flat=True)) == {HoldState.RELEASED}

    _bulk(client, first[:1], "drained", "again")  # the same GPU drained a second time: a new hold, a new drain
    state, reason = slurm.node_line("gpu03")
    assert state == "drained" and first[0].serial in reason and "again" in reason
    assert SchedulerHold.objects.filter(owner="gpu", owner_id=first[0].pk).count() == 2


def test_a_bulk_transition_above_the_sync_limit_drains_per_chunk_in_its_job(users, slurm, slurm_calls, api,
                                                                            settings, eager_celery):
    settings.FLEET_BULK_SYNC_LIMIT = 2
    settings.FLEET_BULK_CHUNK = 10
    rack = factories.rack(factories.site())
    gpus = _gpus(rack, "gpu01", 2) + _gpus(rack, "gpu02", 2)
    response = api("operator").post("/api/v1/gpus/bulk-transition/", {
        "gpus": [g.pk for g in gpus], "to_state": "drained", "reason": "firmware recall"}, format="json")
    assert response.status_code in (200, 202), response.content
    job = Job.objects.get()
    assert (job.status, job.done) == (JobStatus.SUCCEEDED, 4)
    assert [slurm.node_line(n)[0] for n in ("gpu01", "gpu02")] == ["drained", "drained"]
    assert "firmware recall" in slurm.node_line("gpu02")[1]
    assert slurm_calls.count("scontrol update") == 2
