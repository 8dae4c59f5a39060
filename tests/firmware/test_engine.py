"""The engine against the BMC simulator over real HTTP, driven in this process (tick, then the steps it sends):
happy path, infrastructure errors retried, a stuck task, a version that does not change, a failing upgrade path
caught by the canary, the XID gate, and the Redfish driver itself."""


import pytest
from django.utils import timezone

from firmware import redfish
from firmware.models import ErrorClass, RolloutState, RolloutTarget, TargetState, TargetStep, WaveState
from firmware.models.rollout import TARGET_PAST_NO_RETURN
from firmware.services import rollout as svc
from firmware.services import rollout_demo
from tests.firmware import rollout_fleet
from world.bmc.testing import running_simulator

pytestmark = pytest.mark.django_db(transaction=True)
GPU_IDS = [f"HGX_FW_GPU_SXM_{n}" for n in range(1, 9)]


def _fleet(sim, n, **kwargs):
    return rollout_fleet.build(servers=n, bmc_url=lambda i: sim.bmc_url(f"bmc-{i + 1:04d}"), **kwargs)


def _start(fleet, users, **strategy):
    rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"], strategy=strategy)
    return svc.rollout_start(rollout=rollout, actor=users["operator"])


def _done(rollout):
    return rollout.state in (RolloutState.COMPLETED, RolloutState.COMPLETED_WITH_EXCEPTIONS, RolloutState.PAUSED,
                             RolloutState.ABORTED)


def test_happy_path_completes_and_every_gpu_reports_the_new_version(users, drive):
    with running_simulator(bmcs=6, task_seconds=0.3, bmc_reset_seconds=0.3, seed=1) as sim:
        fleet = _fleet(sim, 6, per_rack=2)
        rollout = _start(fleet, users, waves=[50, 100])
        rollout = drive(rollout, _done)
        assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
        assert set(rollout.targets.values_list("state", flat=True)) == {TargetState.SUCCEEDED}
        assert set(rollout.waves.values_list("state", flat=True)) == {WaveState.PASSED}
        for n in range(1, 7):
            versions = sim.sim.versions(f"bmc-{n:04d}")
            assert {versions[g] for g in GPU_IDS} == {rollout_fleet.NEW_VBIOS}
        stats = sim.sim.stats.as_json()
        assert stats["duplicate_updates"] == [] and stats["update_requests"] == 6 * 8
        assert all(kinds == {"chassis_power_cycle": 1, "host_reboot": 1} for kinds in stats["resets"].values())
    release = rollout_fleet.release()
    assert release.success_count == 6 and release.failure_count == 0
    # the verified version is observed firmware now
    assert fleet.servers[0].gpus.get().vbios_version == rollout_fleet.NEW_VBIOS
    target = rollout.targets.first()
    assert target.before == {"gpu_vbios": [rollout_fleet.OLD_VBIOS]}
    assert target.after == {"gpu_vbios": [rollout_fleet.NEW_VBIOS]}
    assert set(TargetStep.objects.filter(target=target).values_list("kind", flat=True)) == {
        "update", "activate", "reset"}


def test_bmc_5xx_and_timeouts_are_infra_retried_and_never_duplicate_an_update(users, drive, settings):
    faults = [{"kind": "http_error", "rate": 0.3, "method": "POST"},
              {"kind": "http_error", "rate": 0.1, "method": "GET", "path": "/redfish/v1/UpdateService/*"},
              {"kind": "timeout", "rate": 0.3, "seconds": 3, "when": "after", "method": "POST",
               "path": "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"}]
    with running_simulator(bmcs=4, task_seconds=0, bmc_reset_seconds=0.2, seed=3, faults=faults) as sim:
        fleet = _fleet(sim, 4)
        rollout = _start(fleet, users, canary=False, waves=[100],
                         retry={"max_attempts": 20, "backoff_seconds": [0, 1]})
        rollout = drive(rollout, _done, timeout=90)
        stats = sim.sim.stats.as_json()
    assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
    assert stats["faults"].get("http_error", 0) > 0 and stats["duplicate_updates"] == []
    retried = RolloutTarget.objects.filter(rollout=rollout, attempts__gt=0)
    assert retried.exists() and not RolloutTarget.objects.filter(error_class=ErrorClass.FIRMWARE).exists()
    assert rollout_fleet.release().failure_count == 0  # infra errors never count toward demotion


def test_infra_failures_exhaust_the_retry_policy_and_are_classified(users, drive):
    with running_simulator(bmcs=2, task_seconds=0, seed=1,
                           faults=[{"kind": "http_error", "bmc": "bmc-0002", "status": 500}]) as sim:
        fleet = _fleet(sim, 2)
        rollout = _start(fleet, users, canary=False, waves=[100], retry={"max_attempts": 2, "backoff_seconds": [0]})
        rollout = drive(rollout, _done)
    failed = RolloutTarget.objects.get(rollout=rollout, server=fleet.servers[1])
    assert (failed.state, failed.error_class) == (TargetState.FAILED, ErrorClass.INFRA)
    assert "500" in failed.last_error and failed.attempts == 2
    assert rollout_fleet.release().failure_count == 0


def test_a_stuck_task_is_inconclusive_after_its_deadline_and_pauses(users, drive, settings):
    settings.FLEET_ROLLOUT_TASK_TIMEOUT_SECONDS = 2
    with running_simulator(bmcs=3, task_seconds=0, seed=1, faults=[{"kind": "stuck", "bmc": "bmc-0002"}]) as sim:
        fleet = _fleet(sim, 3)
        rollout = _start(fleet, users, canary=False, waves=[100])
        rollout = drive(rollout, lambda r: r.state == RolloutState.PAUSED)
    stuck = RolloutTarget.objects.get(rollout=rollout, server=fleet.servers[1])
    assert (stuck.state, stuck.error_class) == (TargetState.FAILED, ErrorClass.INCONCLUSIVE)
    assert "still Running" in stuck.last_error and "inconclusive" in rollout.pause_reason


def test_a_version_that_does_not_change_is_a_firmware_failure_and_the_canary_pauses(users, drive, settings):
    settings.FLEET_ROLLOUT_VERIFY_SECONDS = 2
    with running_simulator(bmcs=2, task_seconds=0, bmc_reset_seconds=0.2, seed=1,
                           faults=[{"kind": "no_version_change", "component": "HGX_FW_GPU_SXM_3"}]) as sim:
        fleet = _fleet(sim, 2)
        rollout = _start(fleet, users)
        rollout = drive(rollout, _done)
    assert rollout.state == RolloutState.PAUSED and "canary: 1 firmware failure" in rollout.pause_reason
    failed = RolloutTarget.objects.get(rollout=rollout, state=TargetState.FAILED)
    assert failed.error_class == ErrorClass.FIRMWARE
    assert "HGX_FW_GPU_SXM_3 reports 96.00.89.00.01, expected 96.00.9F.00.01" in failed.last_error
    assert rollout_fleet.release().failure_count == 1


def test_a_bad_upgrade_path_on_2_percent_is_caught_by_the_canary_touching_at_most_half_a_percent(users, drive):
    n, bad_version = 400, "96.00.74.00.02"
    bad = set(range(0, n, 50))  # 8 servers: 2 %
    with running_simulator(bmcs=0, task_seconds=0, bmc_reset_seconds=0.1, seed=1,
                           faults=[{"kind": "fail", "from_version": bad_version}]) as sim:
        for i in range(n):
            versions = dict.fromkeys(GPU_IDS, bad_version) if i in bad else None
            sim.sim.create_bmcs(ids=[f"bmc-{i + 1:04d}"], versions=versions)
        fleet = rollout_fleet.build(servers=n, per_rack=8, bmc_url=lambda i: sim.bmc_url(f"bmc-{i + 1:04d}"),
                                    vbios={i: bad_version for i in bad})
        rollout = _start(fleet, users, waves=[1, 5, 25, 100])
        rollout = drive(rollout, _done, timeout=60)
        touched = len(sim.sim.stats.as_json()["updates"])
    assert rollout.state == RolloutState.PAUSED and "canary" in rollout.pause_reason
    assert touched <= n * 0.005, touched
    failed = RolloutTarget.objects.get(rollout=rollout, state=TargetState.FAILED)
    assert failed.server_id in {fleet.servers[i].pk for i in bad} and "ApplyFailed" in failed.last_error
    assert not RolloutTarget.objects.filter(rollout=rollout, wave__index__gt=0).exclude(
        state=TargetState.PENDING).exists()


def test_a_hardware_xid_during_soak_fails_the_wave(users, drive):
    from telemetry.models import XidEvent

    with running_simulator(bmcs=2, task_seconds=0, bmc_reset_seconds=0.1, seed=1) as sim:
        fleet = _fleet(sim, 2)
        rollout = _start(fleet, users, soak_seconds=300, waves=[100])
        rollout = drive(rollout, lambda r: r.waves.filter(index=0, state=WaveState.SOAKING).exists())
        canary = RolloutTarget.objects.get(rollout=rollout, wave__index=0)
        XidEvent.objects.create(gpu=canary.server.gpus.get(), at=timezone.now(), xid=79, hardware=True,
                                source="kernel")
        rollout = drive(rollout, _done)
    assert rollout.state == RolloutState.PAUSED and "hardware XID 79" in rollout.pause_reason


def _most_unavailable(servers_of: dict[str, set[int]]):
    """An ``each_step`` observer: the most targets of each group (name -> server ids) seen at once past the point
    of no return (activating or verifying: the server is down)."""
    most = dict.fromkeys(servers_of, 0)

    def observe():
        down = set(RolloutTarget.objects.filter(state__in=TARGET_PAST_NO_RETURN).values_list("server_id", flat=True))
        for name, ids in servers_of.items():
            most[name] = max(most[name], len(down & ids))

    return most, observe


def test_max_unavailable_per_site_holds_at_every_step_and_the_rollout_completes(users, drive, settings):
    settings.FLEET_ROLLOUT_CHUNK = 1  # one target per chunk: the observer sees every single transition
    with running_simulator(bmcs=8, task_seconds=0, bmc_reset_seconds=0.3, seed=1) as sim:
        fleet = _fleet(sim, 8, per_rack=1, sites=2)
        rollout = _start(fleet, users, canary=False, waves=[100], max_unavailable={"per_site": 2})
        sites = {site.code: {s.pk for s in fleet.servers if s.rack.site_id == site.pk} for site in fleet.sites}
        most, observe = _most_unavailable(sites)
        waited = set()

        def each_step():
            observe()
            waited.update(RolloutTarget.objects.filter(last_error__contains="servers of the site unavailable")
                          .values_list("pk", flat=True))

        rollout = drive(rollout, _done, timeout=60, each_step=each_step)
        assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
    assert set(rollout.targets.values_list("state", flat=True)) == {TargetState.SUCCEEDED}
    assert all(len(ids) == 4 for ids in sites.values())
    assert most == dict.fromkeys(sites, 2), most  # reached, never passed
    assert waited  # the cap held targets back, it was not merely never tested


def test_max_unavailable_per_pool_holds_at_every_step_and_the_rollout_completes(users, drive, settings):
    from firmware.services import catalog
    from fleet.audit import SYSTEM

    settings.FLEET_ROLLOUT_CHUNK = 1
    with running_simulator(bmcs=6, task_seconds=0, bmc_reset_seconds=0.3, seed=1) as sim:
        fleet = _fleet(sim, 6, per_rack=1, sites=2)
        pool = catalog.pool_create(name="train", actor=SYSTEM, servers=fleet.servers[:4])  # spans both sites
        rollout = _start(fleet, users, canary=False, waves=[100], max_unavailable={"per_pool": 1})
        most, observe = _most_unavailable({"train": {s.pk for s in pool.servers.all()},
                                           "outside": {s.pk for s in fleet.servers[4:]}})
        rollout = drive(rollout, _done, timeout=60, each_step=observe)
        assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
    assert set(rollout.targets.values_list("state", flat=True)) == {TargetState.SUCCEEDED}
    assert most["train"] == 1, most
    assert most["outside"] == 2, most  # servers in no pool are not held back by the pool cap


def test_redfish_driver_multipart_push_and_retry_after(settings):
    settings.FLEET_BMC_TIMEOUT = 2
    with running_simulator(bmcs=1, task_seconds=5, retry_after_seconds=3, seed=1) as sim:
        client = redfish.BmcClient(sim.bmc_url("bmc-0001"))
        accepted = client.update(image_uri="http://fw.example/HGX-22.10-1-rc70.fwpkg", targets=["HGX_FW_BMC_0"],
                                 method="multipart_push", stage=True, image=b"\0" * 64)
        assert accepted.status == 202 and accepted.task_uri.startswith("/redfish/v1/TaskService/Tasks/")
        task = client.task(accepted.task_uri)
        assert not task.done and task.retry_after == 3  # come back later: the driver never sleeps
        assert client.find_update_task(image_uri="HGX-22.10-1-rc70.fwpkg", targets=["HGX_FW_BMC_0"]).uri
        with pytest.raises(redfish.BmcError) as err:
            redfish.BmcClient("http://127.0.0.1:9/bmc/none", timeout=0.5).inventory_ids()
        assert err.value.error_class == ErrorClass.INFRA
    assert redfish.resets_for({"bmc_reset", "host_reboot"}) == ["host_reboot", "bmc_reset"]
    assert redfish.resets_for({"ac_power_cycle", "bmc_reset"}) == ["ac_power_cycle"]


def test_the_demo_rollout_progresses_against_the_simulator(users, drive, make_user):
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_superuser("demo-admin", password="x")  # noqa: S106
    with running_simulator(bmcs=4, prefix="demo-", task_seconds=0, bmc_reset_seconds=0.1) as sim:
        rollout_fleet.build(servers=4)
        rollout = rollout_demo.rollout_demo_create(simulator_url=sim.url, servers=4, soak_seconds=0)
        assert rollout.state == RolloutState.RUNNING and rollout.approved_by == users["approver"]
        assert rollout_demo.rollout_demo_create(simulator_url=sim.url) == rollout  # idempotent
        rollout = drive(rollout, lambda r: r.state == RolloutState.COMPLETED or r.state == RolloutState.PAUSED,
                        timeout=90)
    assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason


def test_redfish_driver_resets_the_manager_an_item_belongs_to(settings):
    """The HMC image (HGX_FW_BMC_0, RelatedItem /Chassis/HGX_BMC_0) activates on the HGX_BMC_0 manager's reset,
    not the host BMC's."""
    settings.FLEET_BMC_TIMEOUT = 2
    with running_simulator(bmcs=1, task_seconds=0, bmc_reset_seconds=0, seed=1) as sim:
        client = redfish.BmcClient(sim.bmc_url("bmc-0001"))
        accepted = client.update(image_uri="http://fw.example/HGX-22.10-1-rc70.fwpkg", targets=["HGX_FW_BMC_0"],
                                 stage=False)
        assert accepted.task is not None and accepted.task.ok
        related = [r["@odata.id"] for r in client.inventory(["HGX_FW_BMC_0"])[0]["RelatedItem"]]
        assert client.versions(["HGX_FW_BMC_0"]) == {"HGX_FW_BMC_0": "HGX-22.10-1-rc67"}  # not active yet
        client.reset("bmc_reset", related=related)
        assert client.versions(["HGX_FW_BMC_0"]) == {"HGX_FW_BMC_0": "HGX-22.10-1-rc70"}
