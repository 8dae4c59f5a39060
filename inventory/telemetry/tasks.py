"""Telemetry Celery tasks: thin adapters over the services (each safe to run twice). Beat entries: schedule.py."""

from __future__ import annotations

import datetime as dt

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from fleet.audit import audit_source
from fleet.models import AuditSource
from inventory.telemetry import partitions, rollup, services
from inventory.telemetry.models import IngestSource


@shared_task
def telemetry_scrape_task() -> int:
    """Beat, every 30 s: claim the due scrape sources (at most FLEET_TELEMETRY_SCRAPE_CONCURRENCY in flight)
    and send one message per source, so a slow or failing endpoint holds up only its own task."""
    ids = services.scrape_claim(now=timezone.now(), limit=settings.FLEET_TELEMETRY_SCRAPE_CONCURRENCY)
    for source_id in ids:
        transaction.on_commit(lambda source_id=source_id: telemetry_scrape_one_task.delay(source_id))
    return len(ids)


@shared_task(soft_time_limit=120, time_limit=150)
def telemetry_scrape_one_task(source_id: int) -> int | None:
    """Fetch and ingest one scrape source (its timeout bounds the fetch). Errors are recorded on the source."""
    source = IngestSource.objects.filter(pk=source_id, enabled=True).first()
    if source is None:
        return None
    with audit_source(AuditSource.WORKER):
        result = services.source_scrape(source=source)
    return None if result is None else result.samples


@shared_task
def telemetry_rollup_task() -> dict[str, int]:
    """Beat, every minute: roll up the complete 5-minute buckets and hours after the watermarks."""
    return rollup.rollup_tick(now=timezone.now(), grace=dt.timedelta(seconds=settings.FLEET_TELEMETRY_ROLLUP_GRACE))


@shared_task
def telemetry_partitions_task() -> dict[str, list[str]]:
    """Beat, hourly: partitions for today and the days ahead; expired ones dropped (DETACH + DROP)."""
    return partitions.partitions_maintain(today=timezone.now().date(),
                                          ahead_days=settings.FLEET_TELEMETRY_PARTITIONS_AHEAD,
                                          raw_days=settings.FLEET_TELEMETRY_RAW_DAYS,
                                          rollup_days=settings.FLEET_TELEMETRY_5M_DAYS)
