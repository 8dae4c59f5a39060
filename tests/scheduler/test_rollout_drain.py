"""Rollouts drain before they touch, against a real Slurm cluster and the BMC simulator over HTTP: a running job
holds the activation until it ends (the simulator's counters: no activation while the job runs), a node a person
drained is never resumed, each drain-deadline policy, and a partition cap held across two rollouts."""

import pytest
from django.urls import reverse

from firmware.models import ErrorClass, RolloutState, RolloutTarget, TargetState
from inventory.models import HoldState, SchedulerHold
from tests.firmware.conftest import drive  # noqa: F401 - the fixture
from tests.scheduler import rollout_helpers as rh
from world.bmc.testing import running_simulator

pytestmark = pytest.mark.django_db(transaction=True)


def _done(rollout):
    return rollout.state in rh.DONE


def test_a_rollout_waits_for_the_running_job_and_activates_only_after_it_ends(users, drive, slurm,  # noqa: F811
                                                                             client):
    with running_simulator(bmcs=2, task_seconds=0.2, bmc_reset_seconds=0.2, seed=1) as sim:
        fleet = rh.fleet_on_nodes(sim, ["gpu01", "gpu02"])
        job = slurm.sbatch("gpu01", 6)
        seen = {"while_running": [], "waiting": set(), "draining": False}

        def watch():
            count = rh.activations(sim, "bmc-0001")  # read first: then the job state that follows is later
            running = slurm.job_state(job) == "RUNNING"
            if running:
                seen["while_running"].append(count)
                seen["draining"] |= slurm.node_line("gpu01")[0] == "draining"
            target = RolloutTarget.objects.filter(server=fleet.servers[0]).first()
            if target and "job left" in target.last_error and not seen["waiting"]:  # after "drain requested"
                seen["waiting"].add(target.last_error)
                client.force_login(users["viewer"])
                page = client.get(reverse("rollout-detail", args=[target.rollout_id])).content.decode()
                seen["page"] = f"1 job left, ids {job}, since" in page

        rollout = rh.start(fleet, users, drain={"deadline_seconds": 1, "on_deadline": "wait"})
        rollout = drive(rollout, _done, timeout=60, each_step=watch)
        assert rh.activations(sim, "bmc-0001") > 0
    assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
    assert seen["while_running"] and set(seen["while_running"]) == {0}  # never an activation while it ran
    assert seen["draining"] and seen["page"]  # the rollout page said what the target waited for
    assert any(f"1 job left, ids {job}, since" in w for w in seen["waiting"]), seen["waiting"]
    assert slurm.job_state(job) != "RUNNING"
    # both nodes resumed, each exactly once
    assert set(SchedulerHold.objects.values_list("state", flat=True)) == {HoldState.RELEASED}
    assert [slurm.node_line(n)[0] for n in ("gpu01", "gpu02")] == ["idle", "idle"]
    assert rh.resumes(slurm, "gpu01") == 1 and rh.resumes(slurm, "gpu02") == 1


def test_a_node_a_person_drained_is_never_resumed(users, drive, slurm, client):  # noqa: F811
    slurm.run("scontrol", "update", "NodeName=gpu03", "State=DRAIN", "Reason=replacing a PSU (ops ticket 17)")
    with running_simulator(bmcs=1, task_seconds=0.1, bmc_reset_seconds=0.1, seed=2) as sim:
        fleet = rh.fleet_on_nodes(sim, ["gpu03"])
        rollout = drive(rh.start(fleet, users), _done, timeout=40)
    assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
    hold = SchedulerHold.objects.get()
    assert hold.state == HoldState.LEFT and "replacing a PSU" in hold.note
    assert slurm.node_line("gpu03") == ("drained", "replacing a PSU (ops ticket 17)")
    assert rh.resumes(slurm, "gpu03") == 0
    client.force_login(users["viewer"])
    page = client.get(reverse("rollout-detail", args=[rollout.pk])).content.decode()
    assert "Node gpu03 not resumed by Fleet" in page and "replacing a PSU" in page  # the rollout page says so


def test_drain_deadline_skip_leaves_the_server_as_an_exception_and_resumes_its_node(users, drive, slurm):  # noqa: F811
    with running_simulator(bmcs=2, task_seconds=0.1, bmc_reset_seconds=0.1, seed=3) as sim:
        fleet = rh.fleet_on_nodes(sim, ["gpu01", "gpu02"])
        job = slurm.sbatch("gpu01", 120)
        rollout = drive(rh.start(fleet, users, drain={"deadline_seconds": 1, "on_deadline": "skip"}), _done,
                        timeout=40)
        assert rh.activations(sim, "bmc-0001") == 0 and rh.activations(sim, "bmc-0002") > 0
    assert rollout.state == RolloutState.COMPLETED_WITH_EXCEPTIONS, rollout.pause_reason
    skipped = RolloutTarget.objects.get(server=fleet.servers[0])
    assert skipped.state == TargetState.FAILED and skipped.error_class == ErrorClass.INFRA
    assert "drain deadline" in skipped.last_error and str(job) in skipped.last_error
    assert slurm.job_state(job) == "RUNNING"  # the job was never touched
    assert slurm.node_line("gpu01") == ("allocated", "none")  # resumed: back in service, still running it
    assert rh.resumes(slurm, "gpu01") == 1


def test_drain_deadline_requeue_sends_the_jobs_back_once_then_activates(users, drive, slurm):  # noqa: F811
    with running_simulator(bmcs=1, task_seconds=0.1, bmc_reset_seconds=0.1, seed=4) as sim:
        fleet = rh.fleet_on_nodes(sim, ["gpu02"])
        job = slurm.sbatch("gpu02", 120)
        seen = []

        def watch():
            count = rh.activations(sim, "bmc-0001")
            if job in _jobs_on(slurm, "gpu02"):
                seen.append(count)

        rollout = drive(rh.start(fleet, users, drain={"deadline_seconds": 1, "on_deadline": "requeue",
                                                      "allow_requeue": True}), _done, timeout=40, each_step=watch)
    assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
    assert set(seen) <= {0}
    hold = SchedulerHold.objects.get()
    assert hold.requeued == [job] and hold.state == HoldState.RELEASED
    assert "Restarts=1 " in slurm.run("scontrol", "show", "job", "-o", str(job))  # requeued once, not lost


def _jobs_on(slurm, node):
    out = slurm.run("squeue", "-h", "-w", node, "-t", "RUNNING", "-o", "%i", check=False)
    return {int(x) for x in out.split()}


def test_requeue_needs_the_strategy_to_allow_it(users):
    from django.core.exceptions import ValidationError

    from firmware.services.plan import strategy_parse

    with pytest.raises(ValidationError) as err:
        strategy_parse({"drain": {"on_deadline": "requeue"}})
    assert "strategy.drain.on_deadline" in err.value.message_dict
    with pytest.raises(ValidationError) as err:
        strategy_parse({"drain": {"on_deadline": "later", "deadline_seconds": -1}})
    assert {"strategy.drain.on_deadline", "strategy.drain.deadline_seconds"} <= set(err.value.message_dict)


def test_a_partition_cap_holds_across_two_concurrent_rollouts(users, drive, slurm, settings):  # noqa: F811
    settings.FLEET_SCHEDULER_PARTITION_MAX_DRAIN_PERCENT = 25  # 4 nodes: one drained by Fleet at a time
    with running_simulator(bmcs=4, task_seconds=0.1, bmc_reset_seconds=0.1, seed=5) as sim:
        fleet = rh.fleet_on_nodes(sim, ["gpu01", "gpu02", "gpu03", "gpu04"], per_rack=4)
        for node in ("gpu01", "gpu03"):
            slurm.sbatch(node, 2)
        first = rh.start(fleet, users, servers=fleet.servers[:2], name="first")
        second = rh.start(fleet, users, servers=fleet.servers[2:], name="second")
        peak = []

        def watch():
            drained = [n for n in slurm.nodes if slurm.node_line(n)[1].startswith("fleet:")]
            peak.append(len(drained))
            second.refresh_from_db()

        drive(first, lambda r: _done(r) and _done(second.__class__.objects.get(pk=second.pk)), timeout=90,
              each_step=watch)
    assert {r.state for r in (first.__class__.objects.filter(pk__in=[first.pk, second.pk]))} == {
        RolloutState.COMPLETED}
    assert max(peak) == 1  # the cap was reached, never passed
    assert SchedulerHold.objects.filter(state=HoldState.RELEASED).count() == 4
    assert [rh.resumes(slurm, n) for n in slurm.nodes] == [1, 1, 1, 1]
