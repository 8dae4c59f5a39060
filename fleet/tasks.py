from celery import shared_task
from django.conf import settings

from fleet.audit import audit_prune, audit_source
from fleet.models import AuditSource


@shared_task
def audit_prune_task() -> int:
    with audit_source(AuditSource.WORKER):
        return audit_prune(older_than_days=settings.FLEET_AUDIT_RETENTION_DAYS)
