"""A bulk transition above the sync limit runs as a job on a real Celery worker process over Redis."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection

from fleet.models import AuditEvent, Job, JobStatus
from inventory import services
from inventory.models import Gpu, GpuStateChange
from tests import factories

pytestmark = [
    pytest.mark.celery,
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (a real broker)"),
]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def celery_worker_process(transactional_db):
    redis.Redis.from_url(settings.REDIS_URL).delete("celery")  # drop messages left by earlier runs
    db = connection.settings_dict
    env = {**os.environ, "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
           "REDIS_URL": settings.REDIS_URL}
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "fleet", "worker", "--pool", "solo", "--loglevel", "WARNING",
         "--without-heartbeat", "--without-gossip", "--without-mingle"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    yield proc
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def _wait_for(job: Job, proc: subprocess.Popen, timeout: float = 90) -> Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.finished:
            return job
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.3)
    raise AssertionError(f"job {job.pk} not finished: {job.done}/{job.total}")


@pytest.mark.django_db(transaction=True)
def test_bulk_transition_job_runs_on_a_worker(celery_worker_process, operator, settings):
    settings.FLEET_BULK_SYNC_LIMIT = 50
    settings.FLEET_BULK_CHUNK = 40
    server = factories.server()
    gpus = [factories.gpu(server, slot=i % 8 + 1, pci_bus_id=f"0000{i:04X}:18:00.0") for i in range(130)]
    blocked = factories.gpu(state="ordered")
    ids = [g.pk for g in gpus] + [blocked.pk]

    job = services.gpu_bulk_transition(gpu_ids=ids, to_state="drained", actor=operator, reason="rack swap")
    assert isinstance(job, Job) and job.total == 131 and job.params["chunks"] == 4

    job = _wait_for(job, celery_worker_process)
    assert job.status == JobStatus.SUCCEEDED
    assert (job.done, job.failed) == (131, 1)
    assert job.errors[0]["gpu"] == blocked.pk and "'ordered'" in job.errors[0]["error"]
    assert Gpu.objects.filter(state="drained").count() == 130
    assert GpuStateChange.objects.filter(to_state="drained", reason="rack swap", actor_name=operator.username).count() == 130
    events = AuditEvent.objects.filter(action="transition", changes__state=["in_service", "drained"])
    assert events.count() == 130 and set(events.values_list("source", flat=True)) == {"worker"}
    assert set(events.values_list("actor_name", flat=True)) == {operator.username}


@pytest.mark.django_db(transaction=True)
def test_redelivered_chunk_does_nothing(operator, settings):
    """A chunk task run twice (broker redelivery) changes nothing the second time."""
    settings.FLEET_BULK_SYNC_LIMIT = 2
    settings.CELERY_TASK_ALWAYS_EAGER = False
    gpus = [factories.gpu(state="in_service") for _ in range(3)]
    job = Job.objects.create(kind="gpu_bulk_transition", total=3, params={
        "to_state": "drained", "reason": "", "actor_name": "x", "chunks": 1, "done_chunks": []})
    ids = [g.pk for g in gpus]
    services.gpu_bulk_transition_chunk(job_id=job.pk, chunk_index=0, gpu_ids=ids, actor=operator)
    services.gpu_bulk_transition_chunk(job_id=job.pk, chunk_index=0, gpu_ids=ids, actor=operator)
    job.refresh_from_db()
    assert (job.done, job.failed, job.status) == (3, 0, JobStatus.SUCCEEDED)
    assert GpuStateChange.objects.filter(to_state="drained").count() == 3
