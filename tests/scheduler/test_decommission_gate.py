"""Decommission waits for an idle, drained node before any wipe step (a real Slurm cluster and the BMC simulator's
decommission plugin): while a job runs on the server's node the BMC receives nothing; the request page says what
the wipe waits for; once the job ends the wipe starts. The gate reads the scheduler once per chunk of servers, not per
server (the Slurm clients counted by wrappers on PATH), and skips a server whose lease another worker took."""

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from decommission import services
from decommission.executor import run_due
from decommission.inventory_run import inventory_collect
from decommission.models import Asset
from decommission.scheduler_gate import assets_gate
from fleet.execution import lease_due, lease_take
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


def test_a_chunk_of_servers_reads_the_scheduler_once_per_pass(users, slurm, slurm_calls, settings, tmp_path):
    """The gate asks the scheduler for the chunk, not per server (the Slurm clients counted by wrappers on PATH,
    the process cache off): the pass that sends the drains reads once under the nodes' locks and once for their
    state, one DRAIN per node not yet drained; every later pass reads once, whatever the number of servers."""
    settings.DECOMMISSION_SIGNING_KEY_DIR = str(tmp_path / "keys")
    settings.DECOMMISSION_SETTLE_SECONDS = 0.0
    settings.DECOMMISSION_POLL_SECONDS = 0.0
    nodes = ["gpu01", "gpu02", "gpu03"]
    with running_simulator(bmcs=3, task_seconds=0, plugins=["world.bmc.decommission"], bmc_reset_seconds=0) as sim:
        servers = []
        for i, node in enumerate(nodes, start=1):
            sim.sim.bmc(f"bmc-{i:04d}").extra["decommission"]["erase_seconds"] = 0
            # gpu03's server has no GPUs: the request's drain (its GPUs' transitions) leaves its node alone
            server = server_with_gpus(gpus=0 if node == "gpu03" else 2, hostname=node)
            record_update(obj=server, actor=None, bmc_address=sim.bmc_url(f"bmc-{i:04d}"))
            servers.append(server)
        r = services.request_create(servers=servers, reason="eol", category="moderate", destination="resale",
                                    actor=users["operator"])
        services.request_approve(request=r, actor=users["approver"])
        jobs = [slurm.sbatch(node, 120) for node in nodes]
        services.request_drain(request=r, actor=users["operator"])
        assert [slurm.node_line(n)[0] for n in nodes] == ["draining", "draining", "allocated"]
        assert inventory_collect(request_id=r.pk) == 3
        services.request_start_sanitizing(request=r, actor=users["operator"])
        sim.sim.stats.clear_counters()

        slurm_calls.reset()
        _due_now()
        assert run_due() == 3
        assert slurm_calls.count("scontrol update") == 1  # gpu03's DRAIN; gpu01-02 already drained by Fleet
        assert slurm_calls.count("sinfo") == 2 and slurm_calls.count("squeue") == 2  # under the locks; the state
        assert [slurm.node_line(n)[0] for n in nodes] == ["draining"] * 3
        assert SchedulerHold.objects.filter(owner="decommission-asset", state=HoldState.HELD).count() == 3

        for _ in range(2):
            slurm_calls.reset()
            _due_now()
            assert run_due() == 3
            assert slurm_calls.count("sinfo") == 1 and slurm_calls.count("squeue") == 1  # not one per server
            assert slurm_calls.count("scontrol") == 0
        assert all(sim.sim.stats.counters_json(f"bmc-{i:04d}")["bmcs"] == {} for i in (1, 2, 3))

        slurm.run("scancel", *map(str, jobs))
        slurm.wait(lambda: [slurm.node_line(n)[0] for n in nodes] == ["drained"] * 3, "the nodes drained and idle")
        slurm_calls.reset()
        _due_now()
        run_due()
        assert slurm_calls.count("sinfo") == 1 and slurm_calls.count("squeue") == 1
        for i in (1, 2, 3):
            assert sim.sim.stats.counters_json(f"bmc-{i:04d}")["bmcs"][f"bmc-{i:04d}"]["received"], (
                "the wipe started once the node was idle")


def test_a_server_whose_lease_another_worker_took_is_skipped_and_its_node_not_drained(users, slurm, slurm_calls):
    servers = [server_with_gpus(gpus=0, hostname=node) for node in ("gpu01", "gpu02")]
    r = services.request_create(servers=servers, reason="eol", category="moderate", destination="resale",
                                actor=users["operator"])
    leases = lease_due(Asset.objects.filter(request=r), limit=10, seconds=60)
    mine = {a.server.hostname: a.pk for a in Asset.objects.filter(request=r).select_related("server")}
    lease_take(Asset, mine["gpu01"], seconds=60, owner="another-worker")  # its fence moves on
    slurm_calls.reset()
    gate = assets_gate(leases)
    assert gate.lost == {mine["gpu01"]} and gate.waiting == set()  # gpu02: drained now, and idle: go on
    assert slurm_calls.count("scontrol update") == 1 and slurm.node_line("gpu01")[0] == "idle"
    assert slurm.node_line("gpu02")[0] == "drained"
    held = dict(SchedulerHold.objects.values_list("node", "state"))
    assert held == {"gpu01": HoldState.REQUESTED, "gpu02": HoldState.HELD}  # the other worker sends gpu01's
