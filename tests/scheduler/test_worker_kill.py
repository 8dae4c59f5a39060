"""kill -9 of a real Celery worker between the drain and the resume: the node is still resumed exactly once
(slurmctld's own log), and the rollout completes. Ticks go to the workers the way beat sends them."""

import subprocess

import pytest
import redis
from django.conf import settings

from firmware.models import RolloutState
from inventory.models import HoldState, SchedulerHold
from tests.scheduler import rollout_helpers as rh
from tests.workers import start_worker
from world.bmc.testing import running_simulator

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (a real broker)")]


def test_kill_9_between_drain_and_resume_still_resumes_exactly_once(users, slurm, no_eager_celery, settings):
    settings.FLEET_ROLLOUT_LEASE_SECONDS = 3
    redis.Redis.from_url(settings.REDIS_URL).delete("celery")
    workers = []
    with running_simulator(bmcs=1, task_seconds=0.2, bmc_reset_seconds=0.2, seed=6) as sim:
        try:
            workers.append(start_worker(broker=settings.REDIS_URL, env=rh.worker_env(slurm), name="h19-kill-1"))
            fleet = rh.fleet_on_nodes(sim, ["gpu02"])
            job = slurm.sbatch("gpu02", 15)  # longer than the worker takes to start
            rollout = rh.start(fleet, users)
            rh.tick_until(lambda: SchedulerHold.objects.filter(state=HoldState.HELD).exists(), "the drain sent")
            assert slurm.node_line("gpu02")[0] == "draining" and slurm.job_state(job) == "RUNNING"
            workers[0].kill()  # SIGKILL: between the drain and the resume
            workers[0].wait(timeout=10)
            assert rh.activations(sim, "bmc-0001") == 0
            workers.append(start_worker(broker=settings.REDIS_URL, env=rh.worker_env(slurm), name="h19-kill-2"))

            def settled():
                rollout.refresh_from_db()
                return rollout.state in rh.DONE and not SchedulerHold.objects.exclude(
                    state__in=(HoldState.RELEASED, HoldState.LEFT)).exists()

            rh.tick_until(settled, "the rollout settled and its hold ended", timeout=90)
        finally:
            for proc in workers:
                if proc.poll() is None:
                    proc.terminate()
            for proc in workers:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
    assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
    assert SchedulerHold.objects.get().state == HoldState.RELEASED
    assert slurm.node_line("gpu02")[0] == "idle"
    assert rh.resumes(slurm, "gpu02") == 1
