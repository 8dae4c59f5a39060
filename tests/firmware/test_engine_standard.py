"""The engine against BMCs that show standard Redfish only (the simulator's default profiles), driven in this
process: two managers reset once each, an update whose answer was lost is adopted from its task's Messages, and
when the BMC cannot show whether a request landed (its task purged, nothing else to see) the target is held for
a person with the evidence and the request is never sent again."""

import hashlib

import pytest

from firmware.models import ErrorClass, RolloutState, RolloutTarget, TargetState, TargetStep
from firmware.services import rollout as svc
from tests.firmware import rollout_fleet
from world.bmc.testing import running_simulator

pytestmark = pytest.mark.django_db(transaction=True)
UPDATE = "POST /redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"


def _start(sim, users, n, versions=None, **strategy):
    fleet = rollout_fleet.build(servers=n, bmc_url=lambda i: sim.bmc_url(f"bmc-{i + 1:04d}"))
    if versions:
        from tests.firmware import fw_factories

        fleet.bundle = fw_factories.bundle(versions)
    rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"], strategy=strategy)
    return svc.rollout_start(rollout=rollout, actor=users["operator"])


def _settled(rollout):
    return rollout.state in (RolloutState.COMPLETED, RolloutState.COMPLETED_WITH_EXCEPTIONS, RolloutState.PAUSED)


def test_a_bundle_for_the_hmc_and_the_host_bmc_resets_each_manager_once(users, drive):
    with running_simulator(bmcs=2, task_seconds=0, bmc_reset_seconds=0.2) as sim:
        rollout = _start(sim, users, 2, versions={"gpu_vbios": rollout_fleet.NEW_VBIOS, "hmc": "HGX-23.01-1",
                                                  "bmc": "01.05.00"}, canary=False, waves=[100])
        rollout = drive(rollout, _settled, timeout=60)
        assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
        stats = sim.sim.stats.as_json()
        assert stats["manager_resets"] == {f"bmc-000{n}/{m}": 1 for n in (1, 2) for m in ("1", "HGX_BMC_0")}
        counters = sim.sim.stats.counters_json()
        for bmc in ("bmc-0001", "bmc-0002"):
            processed = counters["bmcs"][bmc]["processed"]
            assert processed["POST /redfish/v1/Managers/1/Actions/Manager.Reset"] == 1
            assert processed["POST /redfish/v1/Managers/HGX_BMC_0/Actions/Manager.Reset"] == 1
            assert sim.sim.versions(bmc)["HGX_FW_BMC_0"] == "HGX-23.01-1" and sim.sim.versions(bmc)["BMC"] == "01.05.00"
        evidence = TargetStep.objects.filter(kind="reset", idem_key__contains="bmc_reset:HGX_BMC_0")
        assert evidence.count() == 2
        assert all(any(m.startswith("last_reset=/redfish/v1/Managers/HGX_BMC_0|") for m in s.messages)
                   for s in evidence)


def test_a_lost_answer_is_adopted_from_the_task_messages(users, drive):
    with running_simulator(bmcs=1, task_seconds=0, bmc_reset_seconds=0.1, faults=[
            {"kind": "timeout", "when": "after", "method": "POST", "rate": 1.0, "seconds": 3,
             "path": "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"}]) as sim:
        rollout = _start(sim, users, 1, canary=False, waves=[100])
        rollout = drive(rollout, _settled, timeout=60)
        assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
        assert sim.sim.stats.counters_json()["bmcs"]["bmc-0001"]["processed"][UPDATE] == 1
        step = TargetStep.objects.get(kind="update")
        assert any("settled: found" in m and "names 96.00.9F.00.01" in m for m in step.messages), step.messages


def test_when_the_bmc_cannot_show_whether_an_update_landed_the_target_is_held_not_resent(users, drive, settings):
    """The answer is lost and the task purged before the settle period ends: no standard property shows the staged
    image, the inventory still has the old version. UNKNOWN, a longer settle, UNKNOWN again: held for a person."""
    settings.FLEET_BMC_UNKNOWN_SETTLE_FACTOR = 0.5
    with running_simulator(bmcs=1, task_seconds=0, purge_tasks_after=0.2, faults=[
            {"kind": "timeout", "when": "after", "method": "POST", "rate": 1.0, "seconds": 3,
             "path": "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"}]) as sim:
        rollout = _start(sim, users, 1, canary=False, waves=[100])
        rollout = drive(rollout, lambda r: r.state == RolloutState.PAUSED, timeout=60)
        target = RolloutTarget.objects.get(rollout=rollout)
        assert (target.state, target.error_class) == (TargetState.FAILED, ErrorClass.INCONCLUSIVE)
        assert "held for a person" in target.last_error and "no task names 96.00.9F.00.01" in target.last_error
        assert "held for a person" in rollout.pause_reason or "inconclusive" in rollout.pause_reason
        counters = sim.sim.stats.counters_json()["bmcs"]["bmc-0001"]
        assert counters["received"][UPDATE] == 1 and counters["processed"][UPDATE] == 1  # never sent again
        assert sim.sim.stats.as_json()["faults"]["purged"] >= 1
        step = TargetStep.objects.get(kind="update")
        assert sum(m.startswith("unknown: ") for m in step.messages) == 2, step.messages


def test_a_known_task_retention_proves_an_unanswered_update_absent(users, drive, settings):
    """The BMC class keeps finished tasks 600 s (the simulator's default) and none names the update: it did not
    land (a 503 after the client's send is processed by nobody), so it is sent again, once."""
    settings.FLEET_BMC_TASK_RETENTION_SECONDS = 600
    with running_simulator(bmcs=1, task_seconds=0, faults=[
            {"kind": "timeout", "when": "before", "method": "POST", "rate": 0.5, "seconds": 3,
             "path": "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"}], seed=2) as sim:
        rollout = _start(sim, users, 1, canary=False, waves=[100])
        rollout = drive(rollout, _settled, timeout=60)
        assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
        counters = sim.sim.stats.counters_json()["bmcs"]["bmc-0001"]
        assert counters["processed"][UPDATE] == 1
        step = TargetStep.objects.get(kind="update")
        if counters["received"][UPDATE] > 1:  # the first one timed out unprocessed: proven absent, sent again
            assert any("settled: absent" in m for m in step.messages), step.messages


def test_a_multipart_push_lands_once(users, drive, settings, tmp_path):
    from django.core.files.base import ContentFile

    from firmware.models import ComponentSpec, Release, UpdateMethod

    settings.MEDIA_ROOT = tmp_path
    with running_simulator(bmcs=1, task_seconds=0, bmc_reset_seconds=0.1) as sim:
        fleet = rollout_fleet.build(servers=1, bmc_url=lambda i: sim.bmc_url(f"bmc-{i + 1:04d}"))
        ComponentSpec.objects.filter(component="gpu_vbios").update(update_method=UpdateMethod.MULTIPART_PUSH)
        release = rollout_fleet.release()
        release.image_file.save(f"{rollout_fleet.NEW_VBIOS}.fwpkg", ContentFile(b"\0" * 4096))
        Release.objects.filter(pk=release.pk).update(  # the catalog holds the hash of the bytes sent
            image_file=release.image_file.name, sha256=hashlib.sha256(b"\0" * 4096).hexdigest())
        rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"],
                                         strategy={"canary": False, "waves": [100]})
        rollout = drive(svc.rollout_start(rollout=rollout, actor=users["operator"]), _settled, timeout=60)
        assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
        processed = sim.sim.stats.counters_json()["bmcs"]["bmc-0001"]["processed"]
        assert processed["POST /redfish/v1/UpdateService/update-multipart"] == 1


def test_a_target_failed_after_activation_keeps_its_slot_when_retried_until_it_verifies(users):
    """The caps count a server from its Activate until it verifies healthy: failed after activation, then retried
    (back to pending, staging or draining), it still counts; succeeded, it does not; never activated, it never did."""
    from django.utils import timezone

    from firmware.services.engine.activation_gate import unavailable

    fleet = rollout_fleet.build(servers=2)
    rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"], strategy={"canary": False})
    activated, never = RolloutTarget.objects.filter(rollout=rollout).order_by("id")
    TargetStep.objects.create(target=activated, kind="activate", idem_key=f"{activated.pk}:activate",
                              requested_at=timezone.now())
    expected = {  # state -> (the activated target counts, the never-activated one counts)
        TargetState.ACTIVATING: (True, True), TargetState.VERIFYING: (True, True),
        TargetState.FAILED: (True, False), TargetState.PENDING: (True, False), TargetState.STAGING: (True, False),
        TargetState.DRAINING: (True, False), TargetState.SUCCEEDED: (False, False),
    }
    for state, (first, second) in expected.items():
        RolloutTarget.objects.filter(pk__in=[activated.pk, never.pk]).update(state=state)
        busy = set(RolloutTarget.objects.filter(unavailable()).values_list("pk", flat=True))
        assert (activated.pk in busy, never.pk in busy) == (first, second), state


ACTIVATE = "POST /redfish/v1/UpdateService/Actions/UpdateService.Activate"


@pytest.mark.parametrize("landed", [True, False], ids=["it-landed", "it-did-not-land"])
def test_an_unanswered_activate_is_held_and_a_person_records_what_the_bmc_showed(users, drive, settings, client,
                                                                                   landed):
    """Activate leaves no standard trace before the reset (the staged state is not exposed): its lost answer is
    UNKNOWN twice, then the target is held for a person, never sent again by the engine. The person records what
    they found on the BMC (a note is required); retried, the target goes on from the Activate that landed, or sends
    the one that did not land exactly once more."""
    settings.FLEET_BMC_UNKNOWN_SETTLE_FACTOR = 0.5
    when = "after" if landed else "before"  # processed with its answer lost, or never processed
    with running_simulator(bmcs=1, task_seconds=0, bmc_reset_seconds=0.1, faults=[
            {"kind": "timeout", "when": when, "method": "POST", "rate": 1.0, "seconds": 3,
             "path": "/redfish/v1/UpdateService/Actions/UpdateService.Activate"}]) as sim:
        rollout = _start(sim, users, 1, canary=False, waves=[100])
        rollout = drive(rollout, _settled, timeout=60)
        assert rollout.state == RolloutState.PAUSED, rollout.state
        target = RolloutTarget.objects.get(rollout=rollout)
        assert (target.state, target.error_class) == (TargetState.FAILED, ErrorClass.INCONCLUSIVE)
        assert "held for a person" in target.last_error and "Activate leaves no standard trace" in target.last_error
        from fleet.metrics import DataCollector

        gauge = next(m for m in DataCollector().collect() if m.name == "fleet_rollout_targets_held")
        assert [s.value for s in gauge.samples] == [1]
        counters = sim.sim.stats.counters_json()["bmcs"]["bmc-0001"]
        assert counters["received"][ACTIVATE] == 1 and counters["processed"].get(ACTIVATE, 0) == (1 if landed else 0)

        # the page shows it with the evidence and the two answers (an operator)
        client.force_login(users["operator"])
        page = client.get(f"/firmware/rollouts/{rollout.pk}/").content.decode()
        assert 'id="held"' in page and f"resolve-landed-{target.pk}" in page and "Activate leaves no" in page
        api = f"/api/v1/rollouts/{rollout.pk}/targets/{target.pk}/resolve/"
        assert client.post(api, {"landed": landed}, content_type="application/json").status_code == 400  # no note
        sim.sim.configure({"faults": []})  # the person also mended what dropped the answers
        answer = client.post(api, {"landed": landed, "note": "checked the BMC's audit log"},
                             content_type="application/json")
        assert answer.status_code == 200, answer.content
        assert client.post(api, {"landed": landed, "note": "again"}, content_type="application/json").status_code == 409
        client.force_login(users["viewer"])
        assert client.post(api, {"landed": landed, "note": "x"}, content_type="application/json").status_code == 403

        rollout = svc.rollout_resume(rollout=rollout, actor=users["operator"])
        rollout = drive(rollout, _settled, timeout=30)
        assert rollout.state == RolloutState.COMPLETED_WITH_EXCEPTIONS, rollout.state
        rollout = svc.rollout_retry_exceptions(rollout=rollout, actor=users["operator"])
        rollout = drive(rollout, _settled, timeout=60)
        assert rollout.state == RolloutState.COMPLETED, (rollout.state, rollout.pause_reason)
        counters = sim.sim.stats.counters_json()["bmcs"]["bmc-0001"]
        assert counters["processed"][ACTIVATE] == 1  # once in all: the landed one, or the one sent after the check
        assert counters["received"][ACTIVATE] == (1 if landed else 2)
        step = TargetStep.objects.get(kind="activate")
        assert any("checked by operator-user" in m for m in step.messages), step.messages
