"""Background jobs over many objects: chunked, idempotent, resumable.

A job's chunks are rows (``JobChunk``); a Celery message carries only (job id, chunk index). A chunk
runs under the job's row lock and is marked done in the same transaction as its work, so a redelivered
or repeated message does nothing. A beat task re-sends the unfinished chunks of a job that has made
no progress for ``FLEET_JOB_STALL_SECONDS`` (a message lost with a killed worker, retries exhausted).

Apps register what a kind of job does with :func:`register_job_kind` (in their ``AppConfig.ready``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from fleet import dispatch
from fleet.audit import Actor, SystemActor, actor_fields
from fleet.models import Job, JobChunk, JobStatus

# A handler does one chunk's work and returns the per-object errors (``{"error": ..., ...}`` dicts).
Handler = Callable[..., list[dict[str, Any]]]
_HANDLERS: dict[str, Handler] = {}

# Errors kept on a job (the count in ``failed`` is complete).
MAX_ERRORS = 1000


def register_job_kind(kind: str, handler: Handler) -> None:
    """``handler(*, job, ids, actor)`` does the work of one chunk, in the chunk's transaction."""
    _HANDLERS[kind] = handler


def job_start(*, kind: str, ids: Sequence[int], params: dict[str, Any], actor: Actor | None,
              chunk_size: int) -> Job:
    """Create a job over ``ids`` in chunks of ``chunk_size``; its messages are sent when the caller commits."""
    if kind not in _HANDLERS:
        raise ValueError(f"no handler registered for job kind {kind!r}")
    user = actor if actor is not None and getattr(actor, "pk", None) else None
    job = Job.objects.create(kind=kind, total=len(ids), created_by=user,
                             params={**params, "actor_name": actor_fields(actor)["actor_name"]})
    chunks = JobChunk.objects.bulk_create(
        JobChunk(job=job, index=n, ids=list(ids[start:start + chunk_size]))
        for n, start in enumerate(range(0, len(ids), chunk_size))
    )
    transaction.on_commit(lambda: _send(job.pk, [c.index for c in chunks]))
    return job


JOB_CHUNK_TASK = "fleet.tasks.job_chunk_task"


def _send(job_id: int, indexes: Sequence[int]) -> None:
    for index in indexes:
        dispatch.send(JOB_CHUNK_TASK, job_id, index)


@transaction.atomic
def job_run_chunk(*, job_id: int, index: int) -> None:
    """Do one chunk of a job, once. A chunk already done (a redelivered message) is skipped."""
    job = Job.objects.select_for_update(of=("self",)).select_related("created_by").get(pk=job_id)
    chunk = JobChunk.objects.get(job=job, index=index)
    if chunk.done:
        return
    if job.status == JobStatus.QUEUED:
        job.status, job.started_at = JobStatus.RUNNING, timezone.now()
    actor = job.created_by or SystemActor(job.params.get("actor_name", "worker"))
    errors = _HANDLERS[job.kind](job=job, ids=chunk.ids, actor=actor)
    chunk.done = True
    chunk.save(update_fields=["done"])
    job.done = F("done") + len(chunk.ids)
    job.failed = F("failed") + len(errors)
    job.errors = (job.errors + errors)[:MAX_ERRORS]
    if not JobChunk.objects.filter(job=job, done=False).exists():
        job.status = JobStatus.SUCCEEDED  # refusals of single objects are counted in ``failed`` and listed
        job.finished_at = timezone.now()
    job.save()


def jobs_resume_stalled(*, stalled_for: dt.timedelta) -> int:
    """Re-send the unfinished chunks of every unfinished job without progress for ``stalled_for``.

    Returns the number of chunks sent. Safe to run at any time: a chunk runs at most once.
    """
    sent = 0
    cutoff = timezone.now() - stalled_for
    for job_id in Job.objects.filter(status__in=[JobStatus.QUEUED, JobStatus.RUNNING], updated_at__lt=cutoff
                                     ).values_list("id", flat=True):
        with transaction.atomic():
            job = Job.objects.select_for_update(skip_locked=True).filter(pk=job_id, updated_at__lt=cutoff).first()
            if job is None:  # a chunk is running on it right now, or it just moved
                continue
            indexes = list(JobChunk.objects.filter(job=job, done=False).values_list("index", flat=True))
            job.save(update_fields=["updated_at"])  # the next resume waits a full period again
            transaction.on_commit(lambda j=job.pk, i=indexes: _send(j, i))
            sent += len(indexes)
    return sent
