"""Decommission waits for an idle, drained node before any wipe step (a real Slurm cluster and the BMC simulator's
decommission plugin): while a job runs on the server's node the BMC receives nothing; the request page says what
the wipe waits for; once the job ends the wipe starts."""

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from decommission import services
from decommission.executor import run_due
from decommission.inventory_run import inventory_collect
from decommission.models import Asset
from inventory.models import HoldState, SchedulerHold
from inventory.services import record_update
from tests.decommission.decom_factories import server_with_gpus
from world.bmc.testing import running_simulator

pytestmark = pytest.mark.django_db(transaction=True)


def _due_now():
    Asset.objects.update(next_run_at=timezone.now() - dt.timedelta(seconds=1))


def test_the_wipe_waits_for_the_running_job_and_starts_once_the_node_is_idle(users, slurm, settings, tmp_path,
                                                                             client):
    settings.DECOMMISSION_SIGNING_KEY_DIR = str(tmp_path / "keys")
    settings.DECOMMISSION_SETTLE_SECONDS = 0.0
    settings.DECOMMISSION_POLL_SECONDS = 0.0
    with running_simulator(bmcs=1, task_seconds=0, plugins=["world.bmc.decommission"], bmc_reset_seconds=0) as sim:
        sim.sim.bmc("bmc-0001").extra["decommission"]["erase_seconds"] = 0
        server = server_with_gpus(hostname="gpu01")
        record_update(obj=server, actor=None, bmc_address=sim.bmc_url("bmc-0001"))
        r = services.request_create(servers=[server], reason="eol", category="moderate", destination="resale",
                                    actor=users["operator"])
        services.request_approve(request=r, actor=users["approver"])
        job = slurm.sbatch("gpu01", 120)
        # The request's drain moves the GPUs through "drained" (inventory's bulk transition): the node drains,
        # naming them, and the job goes on running.
        services.request_drain(request=r, actor=users["operator"])
        state, reason = slurm.node_line("gpu01")
        assert state == "draining" and all(g.serial in reason for g in server.gpus.all()), reason
        assert inventory_collect(request_id=r.pk) == 1
        services.request_start_sanitizing(request=r, actor=users["operator"])
        sim.sim.stats.clear_counters()
        for _ in range(3):
            _due_now()
            run_due()
        assert sim.sim.stats.counters_json("bmc-0001")["bmcs"] == {}  # not one request reached the BMC
        assert slurm.node_line("gpu01")[0] == "draining"
        assert SchedulerHold.objects.get(owner="decommission-asset").state == HoldState.HELD
        client.force_login(users["viewer"])
        page = client.get(reverse("decommission:request-detail", args=[r.pk])).content.decode()
        assert "1 job left on gpu01" in page and str(job) in page
        slurm.run("scancel", str(job))
        slurm.wait(lambda: slurm.node_line("gpu01")[0] == "drained", "the node drained and idle")
        _due_now()
        run_due()
        received = sim.sim.stats.counters_json("bmc-0001")["bmcs"]["bmc-0001"]["received"]
        assert received, "the wipe started once the node was idle"
    assert slurm.node_line("gpu01")[0] == "drained"  # a decommissioned server's node is never resumed
