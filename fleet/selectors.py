"""Reads of the cross-cutting records: the audit trail and background jobs."""

from __future__ import annotations

from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import QuerySet

from fleet.kept import KeptRead
from fleet.models import AuditEvent, Job

AUDIT_SHOWN = 50  # events in an object page's audit table (the audit page lists them all)

# On every view of a GPU, server or rollout page: the statement is kept (fleet.kept).
_audit_latest = KeptRead(lambda content_type_id, object_id: AuditEvent.objects.filter(
    content_type_id=content_type_id, object_id=object_id).order_by("-at", "-id")[:AUDIT_SHOWN])


def audit_latest(obj: models.Model) -> list[AuditEvent]:
    """The newest events of one object's audit trail, newest first (index ``audit_object_idx``). The pages show
    the actor's name as recorded (``actor_name``), so the user row is not joined."""
    return _audit_latest(ContentType.objects.get_for_model(obj).pk, str(obj.pk))


def audit_list() -> QuerySet[AuditEvent]:
    return AuditEvent.objects.select_related("content_type").order_by("-id")


def job_list() -> QuerySet[Job]:
    return Job.objects.select_related("created_by").order_by("-id")
