"""Celery: the periodic health evaluation (beat entry ``telemetry-health-evaluate``)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from fleet.audit import audit_source
from fleet.models import AuditSource
from inventory.telemetry.health import health_evaluate


@shared_task
def health_evaluate_task() -> dict[str, Any]:
    """Evaluate every GPU's health flags. Safe to run twice (an advisory lock serialises runs; same result)."""
    with audit_source(AuditSource.WORKER):
        return health_evaluate()
