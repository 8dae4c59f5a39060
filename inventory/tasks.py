from celery import shared_task
from django.db import OperationalError

from fleet.audit import SystemActor, audit_source
from fleet.models import AuditSource, Job
from inventory import services


@shared_task(acks_late=True, autoretry_for=(OperationalError,), retry_backoff=1, max_retries=8)
def gpu_bulk_transition_chunk_task(job_id: int, chunk_index: int, gpu_ids: list[int]) -> None:
    """One chunk (FLEET_BULK_CHUNK ids, 500 measured at ~0.1 s) of a bulk transition job.

    Retried on database errors (a lock timeout, a dropped connection): a chunk that already ran is
    skipped, so a retry never applies it twice."""
    job = Job.objects.select_related("created_by").get(pk=job_id)
    actor = job.created_by or SystemActor(job.params.get("actor_name", "worker"))
    with audit_source(AuditSource.WORKER):
        services.gpu_bulk_transition_chunk(job_id=job_id, chunk_index=chunk_index, gpu_ids=gpu_ids, actor=actor)
