"""Reads of the cross-cutting records: the audit trail and background jobs."""

from __future__ import annotations

from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import QuerySet

from fleet.models import AuditEvent, Job


def audit_for(obj: models.Model) -> QuerySet[AuditEvent]:
    """One object's audit trail, newest first (index ``audit_object_idx``). The pages show the actor's name as
    recorded (``actor_name``), so the user row is not joined."""
    return (AuditEvent.objects.filter(content_type=ContentType.objects.get_for_model(obj), object_id=str(obj.pk))
            .order_by("-at", "-id"))


def audit_list() -> QuerySet[AuditEvent]:
    return AuditEvent.objects.select_related("content_type").order_by("-id")


def job_list() -> QuerySet[Job]:
    return Job.objects.select_related("created_by").order_by("-id")
