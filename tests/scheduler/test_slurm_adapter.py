"""The Slurm backend against a real cluster: node state and jobs, drain, resume only with our reason,
requeue, a maintenance reservation; and the recorded holds (drain, foreign, release exactly once)."""

import datetime as dt

import pytest
from django.utils import timezone

from inventory import scheduler
from inventory.models import HoldState, SchedulerNode
from inventory.scheduler import holds
from inventory.scheduler.refresh import scheduler_refresh
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


def test_node_state_jobs_drain_and_resume_only_with_our_reason(slurm):
    sched = scheduler.configured()
    assert sched.name == "slurm"
    job = slurm.sbatch("gpu02", 30)
    state = sched.node_state(["gpu02", "gpu01", "nope"])
    assert set(state) == {"gpu01", "gpu02"}
    assert state["gpu02"].jobs == (job,) and state["gpu02"].display == "allocated"
    assert state["gpu01"].display == "idle" and state["gpu01"].partitions == ("batch",)
    assert sched.jobs_on("gpu02") == [job]
    sched.drain("gpu02", "fleet: test")
    assert slurm.node_line("gpu02") == ("draining", "fleet: test")
    assert sched.node_state(["gpu02"])["gpu02"].display == "draining"
    assert not sched.resume("gpu02", only_if_reason="fleet: something else")
    assert slurm.node_line("gpu02")[0] == "draining"
    assert sched.resume("gpu02", only_if_reason="fleet: test")
    assert slurm.node_line("gpu02")[0] == "allocated"
    sched.requeue([job])
    slurm.wait(lambda: slurm.job_state(job) == "PENDING", "the job requeued")


def test_maintenance_reservation(slurm):
    sched = scheduler.configured()
    sched.reserve("fleet-test", ["gpu03"], timezone.now() + dt.timedelta(minutes=5), 600)
    shown = slurm.run("scontrol", "show", "reservation", "fleet-test")
    assert "fleet-test" in shown and "Users=root " in shown  # FLEET_SLURM_RESERVATION_USER's default
    sched.unreserve("fleet-test")
    assert "fleet-test" not in slurm.run("scontrol", "show", "reservation", check=False)


def test_the_reservation_user_is_a_setting(slurm, settings):
    settings.FLEET_SLURM_RESERVATION_USER = "nobody"
    scheduler.configured().reserve("fleet-test-user", ["gpu03"], timezone.now() + dt.timedelta(minutes=5), 600)
    assert "Users=nobody " in slurm.run("scontrol", "show", "reservation", "fleet-test-user")
    settings.FLEET_SLURM_RESERVATION_USER = "root Flags=FLEX"  # one more scontrol argument: refused
    with pytest.raises(ValueError, match="FLEET_SLURM_RESERVATION_USER"):
        scheduler.configured()


def _server(name):
    return factories.server(factories.rack(factories.site()), hostname=name)


def test_a_node_a_person_drained_is_foreign_and_never_resumed(slurm):
    server = _server("gpu03")
    slurm.run("scontrol", "update", "NodeName=gpu03", "State=DRAIN", "Reason=bad cable (ticket 99)")
    hold = holds.hold_drain(holds.hold_request(key="t:1", server=server, reason="rollout 1"))
    assert hold.state == HoldState.FOREIGN and "bad cable" in hold.note
    hold = holds.hold_release(hold)
    assert hold.state == HoldState.LEFT
    assert slurm.node_line("gpu03") == ("drained", "bad cable (ticket 99)")


def test_hold_drains_and_releases_exactly_once_and_leaves_a_node_someone_took_over(slurm):
    server = _server("gpu04")
    hold = holds.hold_drain(holds.hold_request(key="t:2", server=server, reason="rollout 2"))
    assert hold.state == HoldState.HELD and slurm.node_line("gpu04") == ("drained", "fleet: rollout 2")
    assert holds.hold_request(key="t:2", server=server, reason="rollout 2").pk == hold.pk  # idempotent
    # A worker that recorded the resume and died before sending it: the sweep sends it, once.
    from inventory.models import SchedulerHold

    SchedulerHold.objects.filter(pk=hold.pk).update(state=HoldState.RELEASING)
    scheduler_refresh()
    hold.refresh_from_db()
    assert hold.state == HoldState.RELEASED and slurm.node_line("gpu04")[0] == "idle"
    assert holds.hold_release(hold).state == HoldState.RELEASED
    # someone else drains it while Fleet holds it: left alone
    hold = holds.hold_drain(holds.hold_request(key="t:3", server=server, reason="rollout 3"))
    slurm.run("scontrol", "update", "NodeName=gpu04", "State=DRAIN", "Reason=memory test by ops")
    assert holds.hold_release(hold).state == HoldState.LEFT
    assert slurm.node_line("gpu04") == ("drained", "memory test by ops")
    row = SchedulerNode.objects.get(name="gpu04")
    scheduler_refresh()
    row.refresh_from_db()
    assert row.server_id == server.pk and row.drained_by == "other" and row.reason == "memory test by ops"
    assert slurm.log().count("update_node: node gpu04 state set to IDLE") == 1
