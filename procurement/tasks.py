"""Celery adapters of the procurement app (thin: one service call each, safe to run twice)."""

from __future__ import annotations

import datetime as dt

from celery import shared_task

from fleet.audit import WORKER, audit_source
from fleet.models import AuditSource
from procurement.services.forecast import forecast_compute
from procurement.services.sync import history_sync


@shared_task(name="procurement.tasks.forecast_compute_task")
def forecast_compute_task(as_of: str | None = None) -> int:
    """Bring failures and assets in step with the lifecycle, then recompute every spares forecast (nightly from
    beat, or on demand from the forecast page)."""
    with audit_source(AuditSource.WORKER):
        history_sync(actor=WORKER)
        run = forecast_compute(as_of=dt.date.fromisoformat(as_of) if as_of else None, actor=WORKER)
    return run.pk
