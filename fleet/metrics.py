"""``/metrics`` in Prometheus format, multiprocess-safe under gunicorn and Celery.

Counters and histograms live in each process (``prometheus_client``'s multiprocess mode: one mmap file per
process in ``PROMETHEUS_MULTIPROC_DIR``, which ``fleet/settings.py`` points at ``var/prometheus/`` unless it
is set), and ``/metrics`` sums them over every process: the web workers' requests, the Celery workers' task
outcomes, telemetry samples ingested and rejected wherever the ingest ran. Gauges that describe the data
(queue depth, inbox backlog and merge lag, rollout targets by state, running jobs, open health flags) are
read when scraped, by a few cheap queries; apps are read by label (``apps.get_model``), not imported.

Protected like the API (a signed-in viewer, or any API token that may read) or by ``FLEET_METRICS_TOKEN``
(``Authorization: Bearer <token>``) for a Prometheus server.
"""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from django.apps import apps
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

log = logging.getLogger(__name__)

REQUESTS = Counter("fleet_http_requests_total", "HTTP requests answered, by view, method and status",
                   ["view", "method", "status"])
LATENCY = Histogram("fleet_http_request_duration_seconds", "Time to answer a request, by view", ["view"],
                    buckets=(0.005, 0.01, 0.015, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10))
EXCEPTIONS = Counter("fleet_http_exceptions_total", "Requests that raised (answered 500), by view", ["view"])
TASKS = Counter("fleet_celery_tasks_total", "Celery tasks finished, by task and outcome", ["task", "outcome"])
SAMPLES = Counter("fleet_telemetry_samples_ingested_total", "Telemetry samples written to the inbox")
UNKNOWN = Counter("fleet_telemetry_samples_unknown_total", "Telemetry samples of GPUs Fleet does not know")
REJECTED = Counter("fleet_telemetry_samples_rejected_total", "Telemetry samples or bodies refused, by reason",
                   ["reason"])


def telemetry_observe(*, samples: int = 0, unknown: int = 0, rejected: Mapping[str, int] | None = None) -> None:
    """Count one ingest's outcome (called by the telemetry ingest service)."""
    if samples:
        SAMPLES.inc(samples)
    if unknown:
        UNKNOWN.inc(unknown)
    for reason, count in (rejected or {}).items():
        REJECTED.labels(reason=reason).inc(count)


def request_observe(*, view: str, method: str, status: int, seconds: float) -> None:
    REQUESTS.labels(view=view, method=method, status=str(status)).inc()
    LATENCY.labels(view=view).observe(seconds)


def celery_signals_connect() -> None:
    """Count task outcomes in the worker processes (connected from ``FleetConfig.ready()``)."""
    from celery import signals

    def outcome(name: str) -> Callable[..., None]:
        def handler(sender: Any = None, **_: Any) -> None:
            TASKS.labels(task=getattr(sender, "name", str(sender)), outcome=name).inc()
        return handler

    for signal, name in ((signals.task_success, "success"), (signals.task_failure, "failure"),
                         (signals.task_retry, "retry"), (signals.task_revoked, "revoked")):
        signal.connect(outcome(name), weak=False)


# --- gauges read at scrape time ---------------------------------------------------------------------------


def _model(label: str, name: str) -> Any:
    try:
        return apps.get_model(label, name)
    except LookupError:
        return None


def _queue_depths() -> Iterator[tuple[str, int]]:
    """Messages waiting per Celery queue (Redis broker: the length of the queue's list)."""
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        return
    import redis

    queues = {"celery", *(route.get("queue", "celery") for route in
                          (getattr(settings, "CELERY_TASK_ROUTES", None) or {}).values() if isinstance(route, dict))}
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=1, socket_connect_timeout=1)
    try:
        for queue in sorted(queues):
            yield queue, int(client.llen(queue))
    finally:
        client.close()


class DataCollector:
    """The fleet's state as gauges, read from the database and the broker when ``/metrics`` is scraped."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from self.broker()
        yield from self.inbox()
        flag = _model("telemetry", "HealthFlag")
        if flag is not None:
            gauge = GaugeMetricFamily("fleet_health_flags_open", "Open health flags, by kind", labels=["kind"])
            for row in flag.objects.filter(cleared_at__isnull=True).values("kind").order_by("kind").annotate(
                    n=_count()):
                gauge.add_metric([row["kind"]], row["n"])
            yield gauge
        target = _model("firmware", "RolloutTarget")
        if target is not None:
            gauge = GaugeMetricFamily("fleet_rollout_targets", "Rollout targets of active rollouts, by state",
                                      labels=["state"])
            active = target.objects.exclude(rollout__state__in=["draft", "completed", "aborted", "rolled_back"])
            for row in active.values("state").order_by("state").annotate(n=_count()):
                gauge.add_metric([row["state"]], row["n"])
            yield gauge
            # failed inconclusive: held for a person (an unanswered request the BMC could not account for, or
            # verification that could not tell); the rollout page says what each one waits for
            yield GaugeMetricFamily("fleet_rollout_targets_held", "Rollout targets held for a person",
                                    value=active.filter(state="failed", error_class="inconclusive").count())
        asset = _model("decommission", "Asset")
        if asset is not None:  # assets held for a person (the evidence could not show whether an action landed)
            yield GaugeMetricFamily("fleet_decommission_assets_held", "Decommission assets held for a person",
                                    value=asset.objects.exclude(hold_reason="").count())
        yield from self.jobs()

    def broker(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily("fleet_celery_queue_length", "Messages waiting in a Celery queue", labels=["queue"])
        try:
            for queue, depth in _queue_depths():
                gauge.add_metric([queue], depth)
        except Exception:  # noqa: BLE001 - an unreachable broker is /readyz's to report; the gauge stays empty
            log.debug("broker queue length unavailable", exc_info=True)
        yield gauge

    def inbox(self) -> Iterator[GaugeMetricFamily]:
        if connection.vendor != "postgresql" or _model("telemetry", "GpuLatest") is None:
            return
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass('telemetry_inbox') IS NOT NULL")
            if not cursor.fetchone()[0]:
                return
            # Counted up to a bound so a scrape stays cheap when the merge has fallen far behind.
            cursor.execute("SELECT count(*), min(ts) FROM (SELECT ts FROM telemetry_inbox LIMIT 1000000) i")
            rows, oldest = cursor.fetchone()
        yield GaugeMetricFamily("fleet_telemetry_inbox_rows", "Samples waiting in the inbox for the merge "
                                "(counted up to 1,000,000)", value=rows)
        lag = (timezone.now() - oldest).total_seconds() if oldest is not None else 0.0
        yield GaugeMetricFamily("fleet_telemetry_merge_lag_seconds", "Age of the oldest sample waiting for the "
                                "merge (0 when the inbox is empty)", value=lag)

    def jobs(self) -> Iterator[GaugeMetricFamily]:
        from fleet.models import Job, JobStatus

        count = GaugeMetricFamily("fleet_jobs", "Background jobs not finished, by status", labels=["status"])
        done = GaugeMetricFamily("fleet_job_items_done", "Items done of unfinished background jobs", labels=["kind"])
        total = GaugeMetricFamily("fleet_job_items_total", "Items of unfinished background jobs", labels=["kind"])
        rows = Job.objects.filter(status__in=[JobStatus.QUEUED, JobStatus.RUNNING]).values_list(
            "kind", "status", "done", "total")
        by_status: dict[str, int] = {}
        by_kind: dict[str, list[int]] = {}
        for kind, status, job_done, job_total in rows:
            by_status[status] = by_status.get(status, 0) + 1
            sums = by_kind.setdefault(kind, [0, 0])
            sums[0] += job_done
            sums[1] += job_total
        for status in (JobStatus.QUEUED, JobStatus.RUNNING):
            count.add_metric([status], by_status.get(status, 0))
        for kind, (job_done, job_total) in sorted(by_kind.items()):
            done.add_metric([kind], job_done)
            total.add_metric([kind], job_total)
        yield from (count, done, total)


def _count() -> Any:
    from django.db.models import Count

    return Count("id")


# --- the endpoint -------------------------------------------------------------------------------------------


def multiproc_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def metrics_text() -> bytes:
    registry = CollectorRegistry()
    if multiproc_dir():
        MultiProcessCollector(registry)
    else:
        from prometheus_client import REGISTRY

        registry = REGISTRY
    data = CollectorRegistry()
    data.register(DataCollector())
    return generate_latest(registry) + generate_latest(data)


def scrape_token_ok(request: HttpRequest) -> bool:
    expected = getattr(settings, "FLEET_METRICS_TOKEN", "")
    header = request.META.get("HTTP_AUTHORIZATION", "")
    return bool(expected) and header.startswith("Bearer ") and hmac.compare_digest(header[7:].strip(), expected)


def dead_process_files_remove(directory: str | Path) -> int:
    """Forget the files of processes that are gone (gunicorn calls this at start; old counters reset, as
    Prometheus expects of a restart). Returns the number of files removed."""
    removed = 0
    for path in Path(directory).glob("*.db"):
        pid = path.stem.rsplit("_", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            mark_process_dead(int(pid), str(directory))
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def metrics_response() -> HttpResponse:
    return HttpResponse(metrics_text(), content_type=CONTENT_TYPE_LATEST)
