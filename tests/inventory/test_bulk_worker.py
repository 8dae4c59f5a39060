"""A bulk transition above the sync limit runs as a job on a real Celery worker process over Redis."""

import datetime as dt
import subprocess
import time

import pytest
from django.conf import settings

from fleet import dispatch, jobs
from fleet.jobs import job_run_chunk, job_start
from fleet.models import AuditEvent, Job, JobStatus
from inventory import services
from inventory.models import Gpu, GpuStateChange
from tests import factories

pytestmark = [
    pytest.mark.celery,
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (a real broker)"),
]


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
    assert isinstance(job, Job) and job.total == 131 and job.chunks.count() == 4

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
def test_redelivered_chunk_does_nothing(operator):
    """A chunk message run twice (broker redelivery, a retry) changes nothing the second time."""
    gpus = [factories.gpu(state="in_service") for _ in range(3)]
    job = job_start(kind=services.BULK_TRANSITION_JOB, ids=[g.pk for g in gpus], actor=operator, chunk_size=10,
                    params={"to_state": "drained", "reason": ""})
    job_run_chunk(job_id=job.pk, index=0)
    job_run_chunk(job_id=job.pk, index=0)
    job.refresh_from_db()
    assert (job.done, job.failed, job.status) == (3, 0, JobStatus.SUCCEEDED)
    assert GpuStateChange.objects.filter(to_state="drained").count() == 3


@pytest.mark.django_db(transaction=True)
def test_a_job_whose_messages_were_lost_is_resumed_and_finishes(celery_worker_process, operator, monkeypatch):
    """The messages never reach a worker (lost with a killed worker); the stall watchdog sends them again."""
    gpus = [factories.gpu(state="in_service") for _ in range(7)]
    with monkeypatch.context() as patch:
        patch.setattr(dispatch, "send", lambda name, *args: None)  # lost on the way
        job = job_start(kind=services.BULK_TRANSITION_JOB, ids=[g.pk for g in gpus], actor=operator,
                        chunk_size=3, params={"to_state": "drained", "reason": "lost"})
    # No message was published (``send`` dropped them), so there is nothing to wait for: the job waits.
    job.refresh_from_db()
    assert (job.status, job.done) == (JobStatus.QUEUED, 0)
    assert jobs.jobs_resume_stalled(stalled_for=dt.timedelta(hours=1)) == 0  # not stalled long enough
    assert jobs.jobs_resume_stalled(stalled_for=dt.timedelta(0)) == 3
    job = _wait_for(job, celery_worker_process)
    assert (job.status, job.done, job.failed) == (JobStatus.SUCCEEDED, 7, 0)
    assert Gpu.objects.filter(state="drained").count() == 7
