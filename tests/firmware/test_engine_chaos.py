"""Crash and fault safety of the rollout engine on real Celery worker processes (no eager mode anywhere: the
test process only ticks, as beat does, and publishes; every step runs in a worker), the BMC simulator in its
own process and PostgreSQL. Each test proves its fault landed (the simulator's own counters, pg_locks,
pg_stat_activity) and asserts from the simulator's counters: 0 duplicate update requests, 0 duplicate resets,
0 lost targets, caps never exceeded, and the rollout in the state the rules say (tests/firmware/chaos.py)."""

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
from world.bmc.testing import SimulatorProcess
from tests.firmware import chaos, rollout_fleet

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

            chaos.tick_until_settled([rollout], timeout=420, during=kill_lock_holders)
        finally:
            workers.stop()
        assert len(kills) >= 20, f"only {len(kills)} kills landed on a worker holding a server lock"
        assert all(locks >= 1 for _, locks in kills)
        counters = chaos.assert_at_most_once(sim, [rollout])
        assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
        assert RolloutTarget.objects.filter(rollout=rollout).count() == 200
        processed = [c["processed"].get(chaos.UPDATE, 0) for c in counters["bmcs"].values()]
        assert processed.count(1) == 200  # every BMC: exactly one update request processed


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

            chaos.tick_until_settled([rollout], timeout=180, during=chaos_round)
        finally:
            workers.stop()
            broker.kill()
        assert restarted
        assert terminated and all(names for names, _ in terminated), terminated
        assert any(holders for _, holders in terminated)  # sessions died while they held server locks
        chaos.assert_at_most_once(sim, [rollout])
        assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason


def test_late_processing_task_purging_and_reboot_windows(users, chaos_settings):
    """5 % of mutating requests are processed only after the client timed out (its settle period then finds
    them), finished tasks vanish a second after they end (a staged image still shows), and BMCs reboot
    (refused, 503, 404) after 3 % of reads. No request is processed twice; a reboot is never a firmware
    failure."""
    redis.Redis.from_url(settings.REDIS_URL).delete("celery")
    with SimulatorProcess(bmcs=60, task_seconds=0.5, seed=6) as sim:
        sim.control.configure(bmc_reset_seconds=0.5, purge_tasks_after=1.0, reboot_mode="mixed", faults=[
            {"kind": "late", "method": "POST", "rate": 0.05, "seconds": 2.0},
            {"kind": "reboot", "method": "GET", "rate": 0.03, "seconds": 1.5}])
        workers = chaos.Workers(settings.REDIS_URL)
        try:
            workers.start()
            workers.start()
            time.sleep(4)
            fleet, rollout = _start(sim, users, 60, strategy=STRATEGY)
            chaos.tick_until_settled([rollout], timeout=180)
        finally:
            workers.stop()
        counters = chaos.assert_at_most_once(sim, [rollout])
        faults = counters["faults"]
        assert faults.get("late", 0) >= 3 and faults.get("purged", 0) >= 1 and faults.get("reboot", 0) >= 1, faults
        late_updates = [b for b, c in counters["bmcs"].items() if c["received"].get(chaos.UPDATE, 0) >= 1]
        assert len(late_updates) == 60
        settled = TargetStep.objects.filter(target__rollout=rollout, messages__icontains="settled: found")
        assert settled.exists()  # a late request was found by the settle rule, not sent again
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
            chaos.tick_until_settled([first, second], timeout=240)
        finally:
            workers.stop()
        chaos.assert_at_most_once(sim, [first, second])
        assert RolloutTarget.objects.filter(rollout__in=[first, second]).count() == 48
        assert chaos.max_unavailable([first, second], "rack") <= 1
        assert chaos.max_unavailable([first, second], "site") <= 3
        assert chaos.max_unavailable([first, second], "rack") == 1  # the cap was reached, not avoided
        assert (first.state, second.state) == (RolloutState.COMPLETED, RolloutState.COMPLETED)


def _received(sim, key: str) -> int:
    return sum(seen["received"].get(key, 0) for seen in sim.control.counters()["bmcs"].values())


def test_a_pause_landing_mid_chunk_stops_new_requests_within_one_state_read(users, chaos_settings):
    """An operator pauses while workers are inside chunks (a worker's session holds a server lock, some BMCs
    have their update request and most do not): within one re-read of the rollout's state (every 0.5 s per
    chunk) plus a request in flight, no BMC receives another update request or activation, for the rest of the
    pause; the targets hold (none lost, none failed); after resume every BMC gets exactly one update."""
    redis.Redis.from_url(settings.REDIS_URL).delete("celery")
    with SimulatorProcess(bmcs=60, task_seconds=2.0, seed=5) as sim:
        sim.control.configure(bmc_reset_seconds=0.3)
        workers = chaos.Workers(settings.REDIS_URL)
        paused: dict = {}
        try:
            workers.start()
            workers.start()
            time.sleep(4)
            fleet, rollout = _start(sim, users, 60, strategy={"waves": [100], "retry": STRATEGY["retry"]})

            def pause_mid_chunk(elapsed: float) -> None:
                deadline = time.monotonic() + 0.3
                while not paused and time.monotonic() < deadline:  # the canary done, the wave under way
                    if (holders := chaos.server_locks_by_worker()) and 1 < (sent := _received(sim, chaos.UPDATE)) < 40:
                        svc.rollout_pause(rollout=Rollout.objects.get(pk=rollout.pk), actor=users["operator"],
                                          reason="chaos: paused mid-chunk")
                        paused.update(at=time.monotonic(), holders=holders, sent=sent)
                    time.sleep(0.02)

            chaos.tick_until_settled([rollout], timeout=120, during=pause_mid_chunk)
            assert rollout.state == RolloutState.PAUSED and paused, (rollout.state, paused)
            time.sleep(max(0.0, paused["at"] + 1.5 - time.monotonic()))  # one state read + a request in flight
            after_grace = (_received(sim, chaos.UPDATE), _received(sim, chaos.ACTIVATE))
            end = time.monotonic() + 8
            while time.monotonic() < end:  # the pause holds: ticks go on, workers keep their chunks
                engine.rollout_tick()
                time.sleep(0.3)
            held = (_received(sim, chaos.UPDATE), _received(sim, chaos.ACTIVATE))
            states = set(RolloutTarget.objects.filter(rollout=rollout).values_list("state", flat=True))
            svc.rollout_resume(rollout=Rollout.objects.get(pk=rollout.pk), actor=users["operator"])
            chaos.tick_until_settled([rollout], timeout=240)
        finally:
            workers.stop()
        assert held == after_grace, f"requests sent during the pause: {after_grace} -> {held}"
        assert after_grace[0] < 60, "every BMC had its update before the pause took hold: it did not land mid-run"
        assert TargetState.FAILED not in states
        counters = chaos.assert_at_most_once(sim, [rollout])
        assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
        processed = [c["processed"].get(chaos.UPDATE, 0) for c in counters["bmcs"].values()]
        assert processed.count(1) == 60


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
            {"kind": "slow", "bmc": slow_bmc, "method": "POST", "path": "/redfish/v1/UpdateService/Actions/*",
             "seconds": 9}])
        workers = chaos.Workers(settings.REDIS_URL)
        try:
            workers.start(pool="prefork", log=log, env={
                "CELERY_TASK_SOFT_TIME_LIMIT": "4", "CELERY_TASK_TIME_LIMIT": "30", "FLEET_BMC_TIMEOUT": "20",
                "FLEET_BMC_SETTLE_SECONDS": "8"})
            time.sleep(5)
            fleet, rollout = _start(sim, users, 12, strategy=STRATEGY)
            chaos.tick_until_settled([rollout], timeout=240)
        finally:
            workers.stop()
        text = log.read_text(errors="replace")
        assert "Soft time limit (4.0s) exceeded" in text or "Soft time limit (4s) exceeded" in text, text[-3000:]
        counters = chaos.assert_at_most_once(sim, [rollout])
        assert counters["bmcs"][slow_bmc]["received"].get(chaos.UPDATE) == 1  # interrupted, never sent again
        assert counters["bmcs"][slow_bmc]["processed"].get(chaos.UPDATE) == 1
        target = RolloutTarget.objects.get(rollout=rollout, server__bmc_address=sim.bmc_url(slow_bmc))
        step = TargetStep.objects.get(target=target, kind="update")
        assert any("interrupted waiting for the answer (SoftTimeLimitExceeded)" in m for m in step.messages)
        assert any("settled: found" in m for m in step.messages), step.messages
        assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
