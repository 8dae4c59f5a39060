"""Crash and fault safety of the rollout engine on real Celery worker processes (no eager mode anywhere: the
test process only ticks, as beat does, and publishes; every step runs in a worker), the BMC simulator in its
own process and PostgreSQL. Each test proves its fault landed (the simulator's own counters, pg_locks,
pg_stat_activity) and asserts from the simulator's counters: 0 duplicate update requests, 0 duplicate resets,
0 lost targets, caps never exceeded, and the rollout in the state the rules say (tests/firmware/chaos.py)."""

import hashlib
import os
import random
import time

import pytest
import redis
from django.conf import settings

from firmware.models import Rollout, RolloutState, RolloutTarget, TargetState, TargetStep
from firmware.services import engine
from firmware.services import rollout as svc
from fleet import dispatch
from tests.firmware import chaos, rollout_fleet
from world.bmc.testing import SimulatorProcess

pytestmark = [
    pytest.mark.celery,
    pytest.mark.chaos,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (a real broker)"),
]


@pytest.fixture
def chaos_settings(settings, no_eager_celery):
    """The test process's side of the workers' settings (chaos.WORKER_ENV). Eager mode stays off."""
    settings.FLEET_ROLLOUT_LEASE_SECONDS = 3
    settings.FLEET_ROLLOUT_CHUNK = 4  # several messages in flight, so faults land inside chunks
    settings.FLEET_BMC_TIMEOUT = 1
    settings.FLEET_BMC_SETTLE_SECONDS = 4
    settings.FLEET_BMC_TASK_RETENTION_SECONDS = 600  # the simulator's default purge: a true retention
    return settings


def _start(sim, users, n, *, strategy, selector=None, name="vbios rollout", fleet=None):
    fleet = fleet or rollout_fleet.build(servers=n, per_rack=4,
                                         bmc_url=lambda i: sim.bmc_url(f"bmc-{i + 1:04d}"))
    rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"], strategy=strategy,
                                     selector=selector, name=name)
    return fleet, svc.rollout_start(rollout=rollout, actor=users["operator"])


STRATEGY = {"waves": [10, 100], "retry": {"max_attempts": 10, "backoff_seconds": [1]}}


def test_kill_9_of_workers_holding_server_locks_on_200_servers(users, chaos_settings):
    """At least 20 SIGKILLs, each of a worker whose PostgreSQL session holds a server lock at that moment (it
    is inside a step, talking to a BMC); fresh workers replace them."""
    redis.Redis.from_url(settings.REDIS_URL).delete("celery")
    rng = random.Random(os.environ.get("CHAOS_SEED", 8))
    with SimulatorProcess(bmcs=200, task_seconds=1.5, seed=3) as sim:
        sim.control.configure(bmc_reset_seconds=0.5)
        workers = chaos.Workers(settings.REDIS_URL)
        kills: list[tuple[str, int]] = []
        try:
            for _ in range(3):
                workers.start()
            time.sleep(4)  # the workers import Django
            fleet, rollout = _start(sim, users, 200, strategy=STRATEGY)

            def kill_lock_holders(elapsed: float) -> None:
                if len(kills) >= 21:
                    return
                deadline = time.monotonic() + 0.3
                while time.monotonic() < deadline:
                    holders = {n: c for n, c in chaos.server_locks_by_worker().items() if n in workers.alive()}
                    if holders:
                        victim = rng.choice(sorted(holders))
                        workers.kill(victim)
                        kills.append((victim, holders[victim]))
                        workers.start()
                        return
                    time.sleep(0.02)

            chaos.settle_with_a_person(sim, [rollout], users["operator"], timeout=420, during=kill_lock_holders)
        finally:
            workers.stop()
        assert len(kills) >= 20, f"only {len(kills)} kills landed on a worker holding a server lock"
        assert all(locks >= 1 for _, locks in kills)
        counters = chaos.assert_at_most_once(sim, [rollout], fleet.servers)
        assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
        chaos.assert_one_update_each(counters, fleet.servers, [rollout])


def test_redis_restart_and_every_worker_session_terminated_mid_chunk(users, chaos_settings, monkeypatch):
    """A private redis-server (never the shared one) is killed and started again, empty, mid-rollout: the
    messages it held are gone, the leases bring the targets back. Then every worker's PostgreSQL session is
    terminated (pg_terminate_backend) while the workers hold server locks: a worker that lost its session (and
    with it its locks) sends nothing more, because its claim can neither be renewed nor outlive its lease."""
    broker = chaos.PrivateRedis()
    broker.start()
    monkeypatch.setattr(dispatch, "send", chaos.publisher_send(broker.url))
    with SimulatorProcess(bmcs=60, task_seconds=1.0, seed=4) as sim:
        sim.control.configure(bmc_reset_seconds=0.5)
        workers = chaos.Workers(broker.url)
        restarted: list[float] = []
        terminated: list[tuple[list[str], dict[str, int]]] = []
        try:
            workers.start()
            workers.start()
            time.sleep(4)
            fleet, rollout = _start(sim, users, 60, strategy=STRATEGY)

            def chaos_round(elapsed: float) -> None:
                if not restarted and elapsed >= 2:
                    broker.kill()
                    time.sleep(1.5)  # Redis is away: ticks and continuations fail to publish
                    broker.start()
                    restarted.append(elapsed)
                elif restarted and len(terminated) < 3:
                    holders = chaos.server_locks_by_worker()
                    if holders:
                        terminated.append((chaos.terminate_worker_sessions(), holders))

            chaos.settle_with_a_person(sim, [rollout], users["operator"], timeout=180, during=chaos_round)
        finally:
            workers.stop()
            broker.kill()
        assert restarted
        assert terminated and all(names for names, _ in terminated), terminated
        assert any(holders for _, holders in terminated)  # sessions died while they held server locks
        chaos.assert_at_most_once(sim, [rollout], fleet.servers)
        assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason


def test_late_processing_task_purging_and_reboot_windows(users, chaos_settings):
    """Standard-only BMCs: 5 % of update requests (and every one of bmc-0007's) are processed only after the client
    timed out (its settle period then finds the task by its Messages), finished tasks vanish 10 s after they end
    (the workers are told that retention, as they would be told a BMC class's), and BMCs reboot (their ports
    refuse connections, nothing processed) after 3 % of reads. No request is processed twice; a reboot is never a firmware
    failure."""
    redis.Redis.from_url(settings.REDIS_URL).delete("celery")
    with SimulatorProcess(bmcs=60, task_seconds=0.5, seed=6) as sim:
        sim.control.configure(bmc_reset_seconds=0.5, purge_tasks_after=10.0, reboot_mode="refused", faults=[
            {"kind": "late", "bmc": "bmc-0007", "method": "POST", "seconds": 2.0, "path": chaos.UPDATE[5:]},
            {"kind": "late", "method": "POST", "rate": 0.05, "seconds": 2.0, "path": chaos.UPDATE[5:]},
            {"kind": "reboot", "method": "GET", "rate": 0.03, "seconds": 1.5}])
        workers = chaos.Workers(settings.REDIS_URL)
        env = {"FLEET_BMC_TASK_RETENTION_SECONDS": "10"}
        try:
            workers.start(env=env)
            workers.start(env=env)
            time.sleep(4)
            fleet, rollout = _start(sim, users, 60, strategy=STRATEGY)
            chaos.settle_with_a_person(sim, [rollout], users["operator"], timeout=180)
            # finished tasks are purged when their BMC is next asked: ask each (the control API) once they are due
            chaos.wait_for(lambda: sim.control.counters()["faults"].get("purged", 0) >= 1 or [
                sim.control.request("GET", f"bmcs/bmc-{n:04d}/tasks") for n in (1, 2)] and False, 30,
                "a finished task purged")
        finally:
            workers.stop()
        counters = chaos.assert_at_most_once(sim, [rollout], fleet.servers)
        faults = counters["faults"]
        assert faults.get("late", 0) >= 1 and faults.get("purged", 0) >= 1 and faults.get("reboot", 0) >= 1, faults
        assert faults.get("refused", 0) >= 1, faults  # a reboot window closed a BMC's port: connections refused
        assert counters["bmcs"]["bmc-0007"]["processed"].get(chaos.UPDATE) == 1
        settled = TargetStep.objects.filter(target__rollout=rollout, messages__icontains="settled: found")
        assert settled.exists()  # a late request was found by its task's Messages, not sent again
        assert not RolloutTarget.objects.filter(rollout=rollout, error_class="firmware").exists()
        assert rollout.state in (RolloutState.COMPLETED, RolloutState.COMPLETED_WITH_EXCEPTIONS), rollout.pause_reason


def test_two_concurrent_rollouts_with_tight_rack_and_site_caps(users, chaos_settings):
    """Two rollouts over the same racks and sites, two worker processes: at most 1 server per rack and 3 per
    site unavailable at once over BOTH rollouts (canary included), from the recorded history."""
    redis.Redis.from_url(settings.REDIS_URL).delete("celery")
    with SimulatorProcess(bmcs=48, task_seconds=0.3, seed=7) as sim:
        sim.control.configure(bmc_reset_seconds=0.3)
        other = "96.00.88.00.01"
        fleet = rollout_fleet.build(servers=48, per_rack=4, sites=2,
                                    bmc_url=lambda i: sim.bmc_url(f"bmc-{i + 1:04d}"),
                                    vbios={i: other for i in range(1, 48, 2)})
        strategy = {"waves": [25, 100], "domain_caps": {"rack": 1}, "max_unavailable": {"per_site": 3},
                    "retry": {"max_attempts": 10, "backoff_seconds": [1]}}
        workers = chaos.Workers(settings.REDIS_URL)
        try:
            workers.start()
            workers.start()
            time.sleep(4)
            _, first = _start(sim, users, 0, strategy=strategy, fleet=fleet, name="A",
                              selector={"vbios": rollout_fleet.OLD_VBIOS})
            _, second = _start(sim, users, 0, strategy=strategy, fleet=fleet, name="B", selector={"vbios": other})
            chaos.settle_with_a_person(sim, [first, second], users["operator"], timeout=240)
        finally:
            workers.stop()
        chaos.assert_at_most_once(sim, [first, second], fleet.servers)
        assert chaos.max_unavailable([first, second], "rack") <= 1
        assert chaos.max_unavailable([first, second], "site") <= 3
        assert chaos.max_unavailable([first, second], "rack") == 1  # the cap was reached, not avoided
        assert (first.state, second.state) == (RolloutState.COMPLETED, RolloutState.COMPLETED)


def _received(sim, key: str) -> int:
    return sum(seen["received"].get(key, 0) for seen in sim.control.counters()["bmcs"].values())


def test_a_pause_landing_mid_chunk_stops_new_requests_within_one_state_read(users, chaos_settings):
    """An operator pauses while workers are inside chunks. The window is made deterministic: the simulator holds
    the update requests of bmc-0031..0060 (parked, unprocessed) so the rollout cannot finish before the pause;
    the pause lands while a worker's request is parked and its session holds a server lock. Within one re-read of
    the rollout's state (every 0.5 s per chunk) plus a request in flight, no BMC receives another update request
    or activation for the rest of the pause; the targets hold (none lost, none failed); after resume every BMC
    gets exactly one update."""
    redis.Redis.from_url(settings.REDIS_URL).delete("celery")
    with SimulatorProcess(bmcs=60, task_seconds=2.0, seed=5) as sim:
        sim.control.configure(bmc_reset_seconds=0.3, faults=[
            {"kind": "hold", "bmc": "bmc-00[3-6][0-9]", "method": "POST", "path": chaos.UPDATE[5:]}])
        workers = chaos.Workers(settings.REDIS_URL)
        try:
            workers.start(env={"FLEET_BMC_TIMEOUT": "30"})
            workers.start(env={"FLEET_BMC_TIMEOUT": "30"})
            time.sleep(4)
            fleet, rollout = _start(sim, users, 60, strategy={"waves": [100], "retry": STRATEGY["retry"]})
            chaos.wait_for(lambda: chaos.holds(sim)["waiting"] and chaos.server_locks_by_worker(), 60,
                           "a worker inside a chunk with a parked update request", every=engine.rollout_tick)
            sent = _received(sim, chaos.UPDATE)
            svc.rollout_pause(rollout=Rollout.objects.get(pk=rollout.pk), actor=users["operator"],
                              reason="chaos: paused mid-chunk")
            paused_at = time.monotonic()
            sim.control.request("POST", "config", {"faults": []})
            sim.control.request("POST", "holds/release", {})  # in flight before the pause: they land now
            time.sleep(max(0.0, paused_at + 1.5 - time.monotonic()))  # one state read + a request in flight
            after_grace = (_received(sim, chaos.UPDATE), _received(sim, chaos.ACTIVATE))
            end = time.monotonic() + 6
            while time.monotonic() < end:  # the pause holds: ticks go on, workers keep their chunks
                engine.rollout_tick()
                time.sleep(0.3)
            held = (_received(sim, chaos.UPDATE), _received(sim, chaos.ACTIVATE))
            states = set(RolloutTarget.objects.filter(rollout=rollout).values_list("state", flat=True))
            rollout.refresh_from_db()
            assert rollout.state == RolloutState.PAUSED
            svc.rollout_resume(rollout=Rollout.objects.get(pk=rollout.pk), actor=users["operator"])
            chaos.tick_until_settled([rollout], timeout=240)
        finally:
            workers.stop()
        assert 1 <= sent < 60, f"the pause did not land mid-run ({sent} update requests before it)"
        assert held == after_grace, f"requests sent during the pause: {after_grace} -> {held}"
        assert after_grace[0] < 60, "every BMC had its update before the pause took hold"
        assert TargetState.FAILED not in states
        counters = chaos.assert_at_most_once(sim, [rollout], fleet.servers)
        assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
        chaos.assert_one_update_each(counters, fleet.servers, [rollout])


def test_a_pause_landing_between_the_gate_and_the_claim(users, chaos_settings):
    """The activation claim re-reads the rollout under its row lock, after the site's lock. Deterministic: this test
    holds the site's advisory lock until a worker's claim waits on it (pg_stat_activity: a worker session waiting
    on a lock, its gate passed), pauses, then lets go. The waiting claim sees the pause: not one Activate or reset
    reaches a BMC, no target becomes unavailable; after resume each BMC activates once."""
    from django.db import connection

    redis.Redis.from_url(settings.REDIS_URL).delete("celery")
    with SimulatorProcess(bmcs=12, task_seconds=0.3, seed=11) as sim:
        sim.control.configure(bmc_reset_seconds=0.3)
        workers = chaos.Workers(settings.REDIS_URL)
        try:
            workers.start()
            workers.start()
            time.sleep(4)
            fleet, rollout = _start(sim, users, 12, strategy={"waves": [100], "canary": False,
                                                              "retry": STRATEGY["retry"]})
            site = fleet.servers[0].rack.site_id
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_lock(%s, %s)", [engine.SITE_LOCK_NS, site])
            try:
                # a claim waits on the site's advisory lock (not a row lock two steps meet for a moment), for a
                # target in draining: the window the test is about
                waiting = chaos.wait_for(lambda: chaos.workers_waiting_on_locks(advisory_only=True) if (
                    RolloutTarget.objects.filter(rollout=rollout, state=TargetState.DRAINING).exists()) else [], 60,
                    "a worker's claim waiting on the site lock", every=engine.rollout_tick)
                draining = RolloutTarget.objects.filter(rollout=rollout, state=TargetState.DRAINING).count()
                svc.rollout_pause(rollout=Rollout.objects.get(pk=rollout.pk), actor=users["operator"],
                                  reason="chaos: paused between gate and claim")
            finally:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [engine.SITE_LOCK_NS, site])
            chaos.wait_for(lambda: not chaos.workers_waiting_on_locks(advisory_only=True), 30, "the claims went on")
            chaos.wait_for(lambda: not RolloutTarget.objects.filter(rollout=rollout, lease_owner__gt="").exists(),
                           30, "the chunks finished", every=engine.rollout_tick)
            activations = _received(sim, chaos.ACTIVATE)
            unavailable = RolloutTarget.objects.filter(rollout=rollout, state__in=(
                TargetState.ACTIVATING, TargetState.VERIFYING)).count()
            svc.rollout_resume(rollout=Rollout.objects.get(pk=rollout.pk), actor=users["operator"])
            chaos.tick_until_settled([rollout], timeout=120)
        finally:
            workers.stop()
        assert waiting and draining >= 1, (waiting, draining)  # the fault landed: a claim past its gate waited
        assert (activations, unavailable) == (0, 0), (activations, unavailable)
        counters = chaos.assert_at_most_once(sim, [rollout], fleet.servers)
        assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
        assert [c["processed"].get(chaos.ACTIVATE, 0) for c in counters["bmcs"].values()].count(1) == 12


def test_skewed_clocks_and_two_managers_per_server(users, chaos_settings, tmp_path):
    """Every BMC's clock is 5 minutes behind, one of the two workers runs 30 s ahead (``faketime`` around the real
    worker process), 5 % of update requests (and bmc-0003's) are processed late, and the bundle updates the HMC
    and the host BMC besides the GPUs: each server's two managers are reset once each, from one reading per
    manager taken on that BMC's own clock. No duplicate update or reset; the rollout completes."""
    redis.Redis.from_url(settings.REDIS_URL).delete("celery")
    log = tmp_path / "faketime-worker.log"
    with SimulatorProcess(bmcs=16, task_seconds=0.3, seed=12) as sim:
        sim.control.configure(bmc_reset_seconds=0.5, faults=[
            {"kind": "late", "bmc": "bmc-0003", "method": "POST", "seconds": 2.0, "path": chaos.UPDATE[5:]},
            {"kind": "late", "method": "POST", "rate": 0.05, "seconds": 2.0, "path": chaos.UPDATE[5:]}])
        for n in range(1, 17):
            sim.control.request("POST", f"bmcs/bmc-{n:04d}/clock", {"skew_seconds": -300})
        workers = chaos.Workers(settings.REDIS_URL)
        try:
            workers.start()
            workers.start_faketime("+30s", log=log)
            time.sleep(5)
            fleet = rollout_fleet.build(servers=16, per_rack=4, bmc_url=lambda i: sim.bmc_url(f"bmc-{i + 1:04d}"))
            from tests.firmware import fw_factories

            fleet.bundle = fw_factories.bundle({"gpu_vbios": rollout_fleet.NEW_VBIOS, "hmc": "HGX-23.01-1",
                                                "bmc": "01.05.00"})
            _, rollout = _start(sim, users, 0, strategy=STRATEGY, fleet=fleet)
            chaos.settle_with_a_person(sim, [rollout], users["operator"], timeout=240)
        finally:
            workers.stop()
        text = log.read_text(errors="replace")
        ran = [line for line in text.splitlines() if "rollout_steps_task" in line and "succeeded" in line]
        assert ran, text[-2000:]  # the skewed worker ran steps
        stamp = ran[-1].split("]", 1)[0].lstrip("[").split(",")[0]
        import datetime as dt

        ahead = (dt.datetime.fromisoformat(stamp) - dt.datetime.now(dt.UTC).replace(tzinfo=None)).total_seconds()
        assert ahead > 20, (stamp, ahead)  # its clock was ahead when it logged (the fault landed)
        bmc_clock = sim.control.bmc("bmc-0001")["clock_skew"]
        assert bmc_clock == -300
        counters = chaos.assert_at_most_once(sim, [rollout], fleet.servers)
        assert counters["bmcs"]["bmc-0003"]["processed"].get(chaos.UPDATE, 0) == 3  # three items, one update each
        assert counters["faults"].get("late", 0) >= 1
        stats = sim.control.stats()
        assert stats["manager_resets"] == {f"bmc-{n:04d}/{m}": 1 for n in range(1, 17) for m in ("1", "HGX_BMC_0")}
        assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason


def test_kills_during_multipart_uploads(users, chaos_settings, tmp_path, settings):
    """The VBIOS is pushed as a multipart upload. The simulator parks the uploads of four BMCs (received, not yet
    processed); every worker is killed while those uploads are in flight (each worker's session holding server
    locks); then the BMCs process them (a landing the dead workers never heard of). New workers settle, find the
    tasks by their Messages (the image's file name) and go on: no upload is processed twice."""
    from django.core.files.base import ContentFile

    from firmware.models import ComponentSpec, Release, UpdateMethod

    redis.Redis.from_url(settings.REDIS_URL).delete("celery")
    media = tmp_path / "media"
    settings.MEDIA_ROOT = media
    with SimulatorProcess(bmcs=8, task_seconds=0.3, seed=13) as sim:
        sim.control.configure(bmc_reset_seconds=0.3, faults=[
            {"kind": "hold", "bmc": "bmc-000[1-4]", "method": "POST", "path": chaos.MULTIPART[5:]}])
        workers = chaos.Workers(settings.REDIS_URL)
        env = {"FLEET_MEDIA_ROOT": str(media), "FLEET_BMC_TIMEOUT": "30"}
        try:
            workers.start(env=env)
            workers.start(env=env)
            time.sleep(4)
            fleet = rollout_fleet.build(servers=8, per_rack=4, bmc_url=lambda i: sim.bmc_url(f"bmc-{i + 1:04d}"))
            ComponentSpec.objects.filter(component="gpu_vbios").update(update_method=UpdateMethod.MULTIPART_PUSH)
            release = rollout_fleet.release()
            release.image_file.save(f"{rollout_fleet.NEW_VBIOS}.fwpkg", ContentFile(b"\0" * 4096))
            Release.objects.filter(pk=release.pk).update(  # the catalog holds the hash of the bytes sent
            image_file=release.image_file.name, sha256=hashlib.sha256(b"\0" * 4096).hexdigest())
            _, rollout = _start(sim, users, 0, strategy={"waves": [100], "canary": False,
                                                         "retry": STRATEGY["retry"]}, fleet=fleet)
            chaos.wait_for(lambda: len(chaos.holds(sim)["waiting"]) >= 1 and chaos.server_locks_by_worker(), 60,
                           lambda: ("uploads parked while workers hold server locks", list(
                               RolloutTarget.objects.filter(rollout=rollout).values_list("state", "last_error"))[:3]),
                           every=engine.rollout_tick)
            parked = len(chaos.holds(sim)["waiting"])
            holders = chaos.server_locks_by_worker()
            for name in workers.alive():
                workers.kill(name)
            sim.control.request("POST", "config", {"faults": []})
            sim.control.request("POST", "holds/release", {})  # the BMCs process what the dead workers sent
            workers.start(env=env)
            workers.start(env=env)
            chaos.settle_with_a_person(sim, [rollout], users["operator"], timeout=180)
        finally:
            workers.stop()
        assert parked >= 1 and holders, (parked, holders)  # the kills landed during uploads in flight
        counters = chaos.assert_at_most_once(sim, [rollout], fleet.servers)
        dup = [(b, n) for b, c in counters["bmcs"].items() if (n := c["processed"].get(chaos.MULTIPART, 0)) > 1]
        assert not dup, dup
        assert all(c["processed"].get(chaos.MULTIPART, 0) == 1 for c in counters["bmcs"].values())
        assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason


def test_the_soft_time_limit_firing_inside_an_update_request(users, chaos_settings, tmp_path):
    """Celery's soft time limit fires while a step waits on a BMC (a prefork worker with a 4 s soft limit and an
    8 s settle period; one BMC takes 9 s over its update request and processes it then, after its client gave
    up): the chunk stops there and hands the rest of its targets on; the interrupted request is never sent
    again, because its settle period counts from when the wait was interrupted, not from when the chunk
    recorded it (from the record, 8 s would end before the BMC processed it: the BMC would show nothing yet and
    the update would go out twice). The worker's own log proves the limit fired."""
    redis.Redis.from_url(settings.REDIS_URL).delete("celery")
    slow_bmc = "bmc-0006"
    log = tmp_path / "worker.log"
    with SimulatorProcess(bmcs=12, task_seconds=0.5, seed=9) as sim:
        sim.control.configure(bmc_reset_seconds=0.3, faults=[
            {"kind": "slow", "bmc": slow_bmc, "method": "POST", "path": chaos.UPDATE[5:],
             "seconds": 9}])
        workers = chaos.Workers(settings.REDIS_URL)
        try:
            workers.start(pool="prefork", log=log, env={
                "CELERY_TASK_SOFT_TIME_LIMIT": "4", "CELERY_TASK_TIME_LIMIT": "30", "FLEET_BMC_TIMEOUT": "20",
                "FLEET_BMC_SETTLE_SECONDS": "8",
                # the chunk waits for its slow BMC (a chunk that left it to its thread would return before the
                # limit: the limit firing mid-request is what this test is about)
                "FLEET_ROLLOUT_DETACH_SECONDS": "0"})
            time.sleep(5)
            fleet, rollout = _start(sim, users, 12, strategy=STRATEGY)
            chaos.settle_with_a_person(sim, [rollout], users["operator"], timeout=240)
        finally:
            workers.stop()
        text = log.read_text(errors="replace")
        assert "Soft time limit (4.0s) exceeded" in text or "Soft time limit (4s) exceeded" in text, text[-3000:]
        counters = chaos.assert_at_most_once(sim, [rollout], fleet.servers)
        assert counters["bmcs"][slow_bmc]["received"].get(chaos.UPDATE) == 1  # interrupted, never sent again
        assert counters["bmcs"][slow_bmc]["processed"].get(chaos.UPDATE) == 1
        target = RolloutTarget.objects.get(rollout=rollout, server__bmc_address=sim.bmc_url(slow_bmc))
        step = TargetStep.objects.get(target=target, kind="update")
        # The chunk's thread waiting on that BMC is not interrupted by the limit (it fires in the chunk's own
        # thread): it records the answer when it comes, or the next owner settles and finds the task.
        assert step.outcome not in ("", "not_sent") and (
            step.response_status is not None or any("settled: found" in m for m in step.messages)), step.messages
        assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
