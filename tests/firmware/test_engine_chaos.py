"""Crash safety on real Celery worker processes, the BMC simulator in its own process, real Redis:
kill -9 of workers at random moments of a rollout (fresh ones started each time), and a Redis restart in the
middle of a rollout. Afterwards: no BMC component received two update requests for one release, no target is
lost, and the rollout completed (or paused with a reason)."""

import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection

from firmware.models import Rollout, RolloutState, RolloutTarget, TargetState
from firmware.services import engine
from firmware.services import rollout as svc
from fleet.bmcsim.testing import SimulatorProcess
from tests.firmware import rollout_fleet

pytestmark = [
    pytest.mark.celery,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (a real broker)"),
]
ROOT = Path(__file__).resolve().parents[2]
GPU_IDS = [f"HGX_FW_GPU_SXM_{n}" for n in range(1, 9)]
LEASE = 3


class Workers:
    """Celery worker processes (``--pool solo``: the process that runs the step is the one killed)."""

    def __init__(self, broker: str) -> None:
        db = connection.settings_dict
        self.env = {**os.environ, "REDIS_URL": broker,
                    "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
                    "FLEET_ROLLOUT_LEASE_SECONDS": str(LEASE), "FLEET_BMC_TIMEOUT": "2",
                    "FLEET_ROLLOUT_VERIFY_SECONDS": "30", "CELERY_TASK_ALWAYS_EAGER": "0"}
        self.procs: list[subprocess.Popen] = []
        self.started = 0

    def start(self) -> subprocess.Popen:
        self.started += 1
        proc = subprocess.Popen(  # noqa: S603 - our own interpreter
            [sys.executable, "-m", "celery", "-A", "fleet", "worker", "--pool", "solo", "--loglevel", "ERROR",
             "-n", f"chaos{self.started}@%h", "--without-heartbeat", "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def kill_one(self, rng: random.Random) -> None:
        alive = [p for p in self.procs if p.poll() is None]
        victim = rng.choice(alive)
        victim.kill()  # SIGKILL: no cleanup, the message it runs stays unacknowledged
        victim.wait(timeout=10)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def simulator():
    with SimulatorProcess(bmcs=24, task_seconds=0.6, seed=5) as sim:
        sim.control.configure(bmc_reset_seconds=0.3)
        yield sim


@pytest.fixture
def chaos_settings(settings):
    settings.FLEET_ROLLOUT_LEASE_SECONDS = LEASE
    settings.FLEET_ROLLOUT_CHUNK = 4  # several messages in flight, so kills land inside chunks
    settings.CELERY_TASK_ALWAYS_EAGER = True  # services do not publish their own tick; the test ticks (as beat)
    return settings


def _fleet(sim, users, n=24):
    fleet = rollout_fleet.build(servers=n, per_rack=3, bmc_url=lambda i: sim.bmc_url(f"bmc-{i + 1:04d}"))
    rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"],
                                     strategy={"waves": [25, 100], "retry": {"max_attempts": 10,
                                                                            "backoff_seconds": [1]}})
    return fleet, svc.rollout_start(rollout=rollout, actor=users["operator"])


def _tick_until_settled(rollout: Rollout, timeout: float, during=None) -> Rollout:
    """Tick like beat (every 0.5 s) until the rollout completes or pauses; ``during(elapsed)`` runs each round."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            engine.rollout_tick()
        except Exception as exc:  # noqa: BLE001 - a broker that is down: beat's tick fails too; the next one runs
            print("tick failed:", type(exc).__name__, exc)
        if during is not None:
            during(time.monotonic() - start)
        rollout.refresh_from_db()
        if rollout.state in (RolloutState.COMPLETED, RolloutState.PAUSED, RolloutState.ABORTED):
            return rollout
        time.sleep(0.5)
    states = list(RolloutTarget.objects.filter(rollout=rollout).values_list("state", "version", "last_error"))
    raise AssertionError(f"rollout still {rollout.state} after {timeout}s: {states}")


def _assert_exactly_once(sim, fleet, rollout):
    stats = sim.control.stats()
    assert stats["duplicate_updates"] == [], stats["duplicate_updates"]
    assert rollout.state == RolloutState.COMPLETED or (rollout.state == RolloutState.PAUSED and rollout.pause_reason)
    states = set(RolloutTarget.objects.filter(rollout=rollout).values_list("state", flat=True))
    if rollout.state == RolloutState.COMPLETED:
        assert states == {TargetState.SUCCEEDED}  # none lost
        for n in range(1, len(fleet.servers) + 1):
            components = sim.control.bmc(f"bmc-{n:04d}")["components"]
            assert {components[g]["version"] for g in GPU_IDS} == {rollout_fleet.NEW_VBIOS}
            # one update request per component for the release, exactly
            assert all(v == {rollout_fleet.NEW_VBIOS: 1} for v in stats["updates"][f"bmc-{n:04d}"].values())


def test_kill_9_workers_at_random_moments_no_duplicate_update_none_lost(users, simulator, chaos_settings):
    redis.Redis.from_url(settings.REDIS_URL).delete("celery")
    workers = Workers(settings.REDIS_URL)
    rng = random.Random(os.environ.get("CHAOS_SEED", 4))
    kills: list[float | None] = []  # seconds into the rollout; None: after it settled

    def kill_and_restart(at: float | None) -> None:
        workers.kill_one(rng)
        workers.start()  # a fresh worker each time
        kills.append(at)

    try:
        workers.start()
        workers.start()
        time.sleep(3)  # the workers import Django
        fleet, rollout = _fleet(simulator, users)
        next_kill = rng.uniform(0.3, 1.2)

        def chaos(elapsed: float) -> None:
            nonlocal next_kill
            if len(kills) < 5 and elapsed >= next_kill:
                kill_and_restart(round(elapsed, 1))
                next_kill = elapsed + rng.uniform(0.4, 1.5)

        rollout = _tick_until_settled(rollout, timeout=120, during=chaos)
        while len(kills) < 5:  # the rollout was faster than the kills: the rest hit idle workers
            kill_and_restart(None)
    finally:
        workers.stop()
    during = [k for k in kills if k is not None]
    assert len(kills) == 5 and workers.started == 7
    assert len(during) >= 3, f"only {len(during)} kills landed while the rollout ran: {kills}"
    _assert_exactly_once(simulator, fleet, rollout)
    assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_redis_restarted_mid_rollout(users, simulator, chaos_settings, monkeypatch):
    """A private redis-server (never the shared one) is killed and started again, empty, mid-rollout: the
    messages it held are gone; the leases bring the targets back."""
    port = _free_port()
    broker = f"redis://127.0.0.1:{port}/0"
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]

    def redis_start() -> subprocess.Popen:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603
        for _ in range(50):
            try:
                redis.Redis.from_url(broker).ping()
                return proc
            except redis.ConnectionError:
                time.sleep(0.1)
        raise AssertionError("redis-server did not start")

    from celery import Celery

    publisher = Celery("chaos-publisher", broker=broker, set_as_current=False)  # the tasks keep the app
    publisher.conf.broker_connection_retry_on_startup = False

    def send_steps(chunks):
        with publisher.connection_for_write() as conn:  # a new connection each time: Redis may have restarted
            for chunk in chunks:
                if chunk:
                    publisher.send_task("firmware.tasks.rollout_steps_task", args=[[list(p) for p in chunk]],
                                        connection=conn, retry=False)

    monkeypatch.setattr(engine, "send_steps", send_steps)
    server = redis_start()
    workers = Workers(broker)
    restarted: list[float] = []
    try:
        workers.start()
        workers.start()
        time.sleep(3)
        fleet, rollout = _fleet(simulator, users)

        def chaos(elapsed: float) -> None:
            nonlocal server
            if not restarted and elapsed >= 1.5:
                server.kill()
                server.wait(timeout=10)
                time.sleep(1.5)  # Redis is away: ticks and continuations fail to publish
                server = redis_start()
                restarted.append(elapsed)

        rollout = _tick_until_settled(rollout, timeout=120, during=chaos)
    finally:
        workers.stop()
        server.kill()
        server.wait(timeout=10)
    assert restarted
    _assert_exactly_once(simulator, fleet, rollout)
    assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
