"""The drain deadline is decided on the database's clock: a real Celery worker whose own clock runs four minutes
ahead (Debian's libfaketime preloaded into the worker process) steps a target that waits for a running job under
a 90-second deadline with ``on_deadline: skip``. The hold's times are the database's and the engine compares them
with the database's clock: the target keeps waiting, is never skipped, and activates once the job ends. On the
worker's own clock the deadline would have passed at its first step (the code before this test skipped it)."""

import datetime as dt
from pathlib import Path

import pytest
import redis
from django.conf import settings

from firmware.models import RolloutState, RolloutTarget, TargetState
from inventory.models import HoldState, SchedulerHold
from tests.scheduler import rollout_helpers as rh
from tests.workers import start_worker
from world.bmc.testing import running_simulator

FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
SKEW = 240  # seconds. The monotonic clock is shifted with the wall clock (libfaketime's FAKETIME_DONT_FAKE_MONOTONIC
# makes every time.sleep fail with EINVAL here, a subprocess wait included); the engine only takes its differences.

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (a real broker)"),
              pytest.mark.skipif(not FAKETIME_LIB.exists(), reason="needs Debian's faketime")]


def _steps_run(log: Path) -> list[str]:
    """The skewed worker's log lines of steps it ran, each stamped with its own clock."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return [line for line in text.splitlines() if "rollout_steps_task" in line and "succeeded" in line]


def test_a_worker_minutes_ahead_does_not_pass_the_drain_deadline(users, slurm, no_eager_celery, settings, tmp_path):
    settings.FLEET_ROLLOUT_LEASE_SECONDS = 3
    redis.Redis.from_url(settings.REDIS_URL).delete("celery")
    env = rh.worker_env(slurm)
    log = tmp_path / "skewed-worker.log"
    skewed = None
    with running_simulator(bmcs=1, task_seconds=0.2, bmc_reset_seconds=0.2, seed=8) as sim:
        right = start_worker(broker=settings.REDIS_URL, env=env, name="h19-clock-right")
        try:
            fleet = rh.fleet_on_nodes(sim, ["gpu03"])
            job = slurm.sbatch("gpu03", 300)
            rollout = rh.start(fleet, users, drain={"deadline_seconds": 90, "on_deadline": "skip"})

            def target():
                return RolloutTarget.objects.get(rollout=rollout)

            # A worker on the right clock records the drain, sends it and starts waiting for the job.
            rh.tick_until(lambda: "1 job left" in target().last_error, "the target waiting for the job")
            right.terminate()
            right.wait(timeout=20)
            skewed = start_worker(broker=settings.REDIS_URL, name="h19-clock-ahead", loglevel="INFO",
                                  output=log.open("ab"), env={**env, "LD_PRELOAD": str(FAKETIME_LIB),
                                                             "FAKETIME": f"+{SKEW}s"})
            rh.tick_until(lambda: len(_steps_run(log)) >= 4 or target().state != TargetState.DRAINING,
                          "the skewed worker stepping the target", timeout=90)
            waiting = target()
            assert waiting.state == TargetState.DRAINING and "1 job left" in waiting.last_error, (
                waiting.state, waiting.last_error)
            assert rh.activations(sim, "bmc-0001") == 0 and slurm.job_state(job) == "RUNNING"
            slurm.run("scancel", str(job))

            def settled():
                rollout.refresh_from_db()
                return rollout.state in rh.DONE and not SchedulerHold.objects.exclude(
                    state__in=(HoldState.RELEASED, HoldState.LEFT)).exists()

            rh.tick_until(settled, "the rollout settled and its hold ended", timeout=90)
            assert rh.activations(sim, "bmc-0001") > 0
        finally:
            for proc in (right, skewed):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    proc.wait(timeout=20)
    # The fault landed: the worker that stepped the target while it waited ran minutes ahead.
    stamp = _steps_run(log)[0].split("]", 1)[0].lstrip("[").split(",")[0]
    ahead = (dt.datetime.fromisoformat(stamp) - dt.datetime.now(dt.UTC).replace(tzinfo=None)).total_seconds()
    assert ahead > SKEW - 30, (stamp, ahead)
    assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
    assert RolloutTarget.objects.get(rollout=rollout).state == TargetState.SUCCEEDED
    assert SchedulerHold.objects.get().state == HoldState.RELEASED and rh.resumes(slurm, "gpu03") == 1
