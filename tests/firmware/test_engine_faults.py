"""The engine's fault rules over real HTTP, driven in this process: a claim held by another worker blocks every
request, infra failures end 'completed with exceptions' with a role-checked retry, the canary tries another unit
of a path whose unit failed on infrastructure, an unanswered update is found after the settle period."""

import datetime as dt

import pytest
from django.test import Client
from django.utils import timezone

from firmware.models import ErrorClass, RolloutState, RolloutTarget, RolloutWave, TargetState, TargetStep
from firmware.services import engine
from firmware.services import rollout as svc
from tests.firmware import rollout_fleet
from world.bmc.testing import running_simulator

pytestmark = pytest.mark.django_db(transaction=True)
UPDATE = "POST /redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"


def _fleet(sim, n, **kwargs):
    return rollout_fleet.build(servers=n, bmc_url=lambda i: sim.bmc_url(f"bmc-{i + 1:04d}"), **kwargs)


def _start(fleet, users, **strategy):
    rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"], strategy=strategy)
    return svc.rollout_start(rollout=rollout, actor=users["operator"])


def _settled(rollout):
    return rollout.state in (RolloutState.COMPLETED, RolloutState.COMPLETED_WITH_EXCEPTIONS, RolloutState.PAUSED)


def test_a_target_claimed_by_another_worker_gets_no_request(users, drive):
    with running_simulator(bmcs=1, task_seconds=0) as sim:
        fleet = _fleet(sim, 1)
        rollout = _start(fleet, users, canary=False, waves=[100])
        engine.rollout_tick()  # admitted: precheck, due now
        target = RolloutTarget.objects.get(rollout=rollout)
        assert target.state == TargetState.PRECHECK
        RolloutTarget.objects.filter(pk=target.pk).update(  # another worker holds the row's lease
            lease_owner="elsewhere", lease_until=timezone.now() + dt.timedelta(minutes=5))
        before = sim.sim.stats.requests
        result = engine.target_steps([[target.pk, target.version]])
        assert (result.done, result.stale) == (0, 1) and sim.sim.stats.requests == before  # not one request
        RolloutTarget.objects.filter(pk=target.pk).update(lease_until=timezone.now() - dt.timedelta(seconds=1))
        assert engine.target_steps([[target.pk, target.version]]).done == 1  # the lease ran out: ours now
        assert sim.sim.stats.requests > before
        target.refresh_from_db()
        assert (target.state, target.fence, target.lease_owner) == (TargetState.STAGING, 1, "")


def test_infra_failures_end_completed_with_exceptions_and_an_operator_retries_them(users, drive, api):
    with running_simulator(bmcs=3, task_seconds=0, bmc_reset_seconds=0.1, seed=1,
                           faults=[{"kind": "http_error", "bmc": "bmc-0002", "status": 503}]) as sim:
        fleet = _fleet(sim, 3)
        rollout = _start(fleet, users, canary=False, waves=[100], retry={"max_attempts": 2, "backoff_seconds": [0]})
        rollout = drive(rollout, _settled)
        assert rollout.state == RolloutState.COMPLETED_WITH_EXCEPTIONS
        listed = api("viewer").get(f"/api/v1/rollouts/{rollout.pk}/exceptions/").json()
        assert [t["error_class"] for t in listed] == [ErrorClass.INFRA]
        drift = api("viewer").get("/api/v1/firmware/drift/").json()["rollout_exceptions"]
        assert [(e["rollout_id"], e["error_class"]) for e in drift] == [(rollout.pk, ErrorClass.INFRA)]
        client = Client()
        client.force_login(users["viewer"])
        page = client.get(f"/firmware/rollouts/{rollout.pk}/").content.decode()
        assert 'id="exceptions"' in page and 'id="action-retry_exceptions"' not in page  # a viewer sees, no button
        assert 'id="rollout-exceptions"' in client.get("/firmware/drift/").content.decode()
        client.force_login(users["operator"])
        assert 'id="action-retry_exceptions"' in client.get(f"/firmware/rollouts/{rollout.pk}/").content.decode()
        assert api("viewer").post(f"/api/v1/rollouts/{rollout.pk}/retry_exceptions/").status_code == 403
        sim.sim.configure({"faults": []})  # the BMC is back
        response = api("operator").post(f"/api/v1/rollouts/{rollout.pk}/retry_exceptions/")
        assert response.status_code == 200 and response.json()["state"] == RolloutState.RUNNING
        assert api("operator").post(f"/api/v1/rollouts/{rollout.pk}/retry_exceptions/").status_code == 409
        rollout = drive(rollout, _settled)
    assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
    assert set(RolloutTarget.objects.filter(rollout=rollout).values_list("state", flat=True)) == {
        TargetState.SUCCEEDED}
    assert RolloutWave.objects.filter(rollout=rollout, name__startswith="retry").count() == 1


def test_the_canary_tries_another_unit_of_a_path_whose_unit_failed_on_infra(users, drive):
    with running_simulator(bmcs=6, task_seconds=0, bmc_reset_seconds=0.1, seed=1) as sim:
        fleet = _fleet(sim, 6)
        rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"],
                                         strategy={"waves": [100], "retry": {"max_attempts": 1,
                                                                             "backoff_seconds": [0]}})
        canary = RolloutTarget.objects.filter(rollout=rollout, wave__index=0).select_related("server")
        assert canary.count() == 1  # one upgrade path, one unit
        first = canary.get()
        bmc = first.server.bmc_address.rsplit("/", 1)[-1]
        sim.sim.configure({"faults": [{"kind": "http_error", "bmc": bmc, "status": 503}]})
        rollout = svc.rollout_start(rollout=rollout, actor=users["operator"])
        rollout = drive(rollout, _settled, timeout=60)
    canary_targets = RolloutTarget.objects.filter(rollout=rollout, wave__index=0)
    assert canary_targets.count() == 2
    assert set(canary_targets.values_list("state", flat=True)) == {TargetState.FAILED, TargetState.SUCCEEDED}
    assert rollout.state == RolloutState.COMPLETED_WITH_EXCEPTIONS


def test_an_update_whose_answer_was_lost_is_found_after_the_settle_period_not_resent(users, drive):
    faults = [{"kind": "late", "method": "POST", "seconds": 2.5,
               "path": "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"}]
    with running_simulator(bmcs=1, task_seconds=0, bmc_reset_seconds=0.1, faults=faults) as sim:
        fleet = _fleet(sim, 1)
        rollout = _start(fleet, users, canary=False, waves=[100])
        rollout = drive(rollout, _settled, timeout=60)
        counters = sim.sim.stats.counters_json()["bmcs"]["bmc-0001"]
    assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
    assert counters["received"][UPDATE] == 1 and counters["processed"][UPDATE] == 1
    step = TargetStep.objects.get(target__rollout=rollout, kind="update")
    assert any("ambiguous" in str(m) for m in step.messages)
    assert any("settled: found" in str(m) for m in step.messages)
