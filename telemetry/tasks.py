"""Telemetry Celery tasks: thin adapters over the services (each safe to run twice). Beat entries: schedule.py."""

from __future__ import annotations

import datetime as dt
from typing import Any

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from fleet import dispatch
from fleet.audit import audit_source
from fleet.models import AuditSource
from telemetry import compact, partitions, rollup, services
from telemetry.health import health_evaluate
from telemetry.models import IngestSource


@shared_task
def telemetry_scrape_task() -> int:
    """Beat, every 30 s: claim the due scrape sources and send them in groups of ``services.SCRAPE_GROUP``
    (256) per message; each group task fetches its sources concurrently and writes once."""
    if settings.FLEET_TELEMETRY_BACKEND == "prometheus":
        return 0  # the store's own scrapers read the exporters: Fleet does not scrape them a second time
    ids = services.scrape_claim(now=timezone.now(), limit=settings.FLEET_TELEMETRY_SCRAPE_IN_FLIGHT)
    for start in range(0, len(ids), services.SCRAPE_GROUP):
        group = ids[start:start + services.SCRAPE_GROUP]
        dispatch.send_on_commit("telemetry.tasks.telemetry_scrape_many_task", group)
    return len(ids)


@shared_task(soft_time_limit=120, time_limit=150)
def telemetry_scrape_many_task(source_ids: list[int]) -> int:
    """Fetch a group of scrape sources (a thread pool; the timeout bounds each fetch) and ingest what arrived
    in one write. Errors are recorded on their sources. Returns the samples written."""
    sources = list(IngestSource.objects.filter(pk__in=source_ids, enabled=True).order_by("pk"))
    if not sources:
        return 0
    with audit_source(AuditSource.WORKER):
        outcomes = services.sources_scrape(sources=sources)
    return sum(outcome.samples for outcome in outcomes if isinstance(outcome, services.IngestResult))


@shared_task(expires=30)
def telemetry_merge_task() -> dict[str, int]:
    """Beat, every 15 s: merge the telemetry inbox into the raw, counter, XID and latest-value tables."""
    merged = services.telemetry_merge()
    return {"samples": merged.samples, "counter_rows": merged.counter_rows, "xid_events": merged.xid_events}


@shared_task
def telemetry_rollup_task() -> dict[str, int]:
    """Beat, every minute: merge the inbox, then roll up the complete 5-minute buckets and hours after the
    watermarks. With the prometheus backend: pull latest values, XID events and complete hours from the store."""
    if settings.FLEET_TELEMETRY_BACKEND == "prometheus":
        from telemetry.pull import pull_tick

        return pull_tick(now=timezone.now())
    return rollup.rollup_tick(now=timezone.now(), grace=dt.timedelta(seconds=settings.FLEET_TELEMETRY_ROLLUP_GRACE))


@shared_task
def telemetry_partitions_task() -> dict[str, list[str]]:
    """Beat, hourly: partitions for today and the days ahead; expired ones dropped (DETACH + DROP)."""
    return partitions.partitions_maintain(today=timezone.now().date(),
                                          ahead_days=settings.FLEET_TELEMETRY_PARTITIONS_AHEAD,
                                          raw_days=settings.FLEET_TELEMETRY_RAW_DAYS,
                                          rollup_days=settings.FLEET_TELEMETRY_5M_DAYS)


@shared_task
def telemetry_compact_task() -> dict[str, Any]:
    """Beat, hourly: compact the raw days older than FLEET_TELEMETRY_COMPACT_AFTER_DAYS (embedded store)."""
    if settings.FLEET_TELEMETRY_BACKEND == "prometheus":
        return {"days": []}
    done = compact.compact_due()
    return {"days": [d.isoformat() for d in done.days], "gpu_days": done.gpu_days, "samples": done.samples}


@shared_task
def health_evaluate_task() -> dict[str, Any]:
    """Beat, every 5 minutes: evaluate every GPU's health flags. Safe to run twice (an advisory lock serialises
    runs; same result)."""
    with audit_source(AuditSource.WORKER):
        return health_evaluate()
