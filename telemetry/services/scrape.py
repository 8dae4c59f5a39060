"""Scraping: claim due scrape sources, fetch them concurrently, ingest what arrived."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Sequence

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from telemetry.models import IngestKind, IngestSource
from telemetry.sample import TelemetryParseError
from telemetry.services.ingest import (
    IngestItem,
    IngestResult,
    SourceRecord,
    sources_record,
    telemetry_ingest_many,
)

log = logging.getLogger(__name__)


def scrape_claim(*, now: dt.datetime, limit: int) -> list[int]:
    """Claim up to ``limit`` minus the in-flight count of due scrape sources; return their ids.

    A claim sets ``scrape_in_flight_until`` (now + timeout + a margin); the scrape clears it. A crashed scrape's
    claim simply expires. ``SKIP LOCKED``: two beat ticks never claim the same source.
    """
    with transaction.atomic():
        in_flight = IngestSource.objects.filter(kind=IngestKind.SCRAPE, scrape_in_flight_until__gt=now).count()
        free = max(limit - in_flight, 0)
        if not free:
            return []
        candidates = (IngestSource.objects.select_for_update(skip_locked=True)
                      .filter(kind=IngestKind.SCRAPE, enabled=True)
                      .exclude(scrape_in_flight_until__gt=now)
                      .order_by(F("last_attempt_at").asc(nulls_first=True), "id"))
        claimed = []
        for source in candidates[: free * 4]:
            due = source.last_attempt_at is None or source.last_attempt_at + dt.timedelta(
                seconds=source.interval_s) <= now + dt.timedelta(seconds=1)
            if not due:
                continue
            source.scrape_in_flight_until = now + dt.timedelta(seconds=source.timeout_s + 30)
            claimed.append(source)
            if len(claimed) >= free:
                break
        IngestSource.objects.bulk_update(claimed, ["scrape_in_flight_until"], batch_size=1000)
    return [source.pk for source in claimed]


def _fetch(url: str, timeout: float) -> bytes:
    import urllib.request

    if not url.startswith(("http://", "https://")):
        raise ValueError(f"not an http(s) URL: {url!r}")
    request = urllib.request.Request(url, headers={"Accept": "text/plain", "User-Agent": "fleet-telemetry"})  # noqa: S310
    limit = settings.FLEET_TELEMETRY_MAX_BYTES
    deadline = time.monotonic() + timeout
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        chunks, size = [], 0
        while chunk := response.read(1 << 16):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise TelemetryParseError(f"the body is over {limit} bytes", reason="body_too_large")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no complete response within {timeout:g} s")
    return b"".join(chunks)


SCRAPE_GROUP = 256  # sources per scrape message: 256 nodes x 8 GPUs = ~2,000 samples, one inbox COPY


def sources_scrape(*, sources: Sequence[IngestSource], now: dt.datetime | None = None,
                   threads: int | None = None) -> list[IngestResult | Exception]:
    """Fetch a group of scrape sources concurrently (a small thread pool; each fetch with its source's timeout,
    capped by FLEET_TELEMETRY_SCRAPE_TIMEOUT) and ingest every body that arrived with ONE write
    (:func:`telemetry_ingest_many`). A failing or hanging endpoint holds up no other fetch; its error is
    recorded on its own source. Never raises for one source's failure."""
    from concurrent.futures import ThreadPoolExecutor

    now = now or timezone.now()
    cap = settings.FLEET_TELEMETRY_SCRAPE_TIMEOUT

    def fetch(source: IngestSource) -> tuple[bytes | Exception, int]:
        started = time.perf_counter()
        try:
            body: bytes | Exception = _fetch(source.url, min(source.timeout_s, cap))
        except Exception as exc:  # noqa: BLE001 - any failure of one endpoint is its own, recorded
            body = exc
        return body, int((time.perf_counter() - started) * 1000)

    workers = max(1, min(threads or settings.FLEET_TELEMETRY_SCRAPE_CONCURRENCY, len(sources)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="scrape") as pool:
        fetched = list(pool.map(fetch, sources))
    failed = [SourceRecord(source, body, ms) for source, (body, ms) in zip(sources, fetched, strict=True)
              if isinstance(body, Exception)]
    sources_record(records=failed, now=now)
    good = [(source, body, ms) for source, (body, ms) in zip(sources, fetched, strict=True)
            if not isinstance(body, Exception)]
    outcomes: dict[int, IngestResult | Exception] = {record.source.pk: record.outcome for record in failed}  # type: ignore[misc]
    if good:
        try:
            results = telemetry_ingest_many(items=[IngestItem(source, body, "prometheus") for source, body, _ in good],
                                            now=now, fetch_ms=[ms for _, _, ms in good])
        except Exception as exc:  # noqa: BLE001 - recorded on every source by telemetry_ingest_many
            log.warning("telemetry scrape write of %d sources failed", len(good), exc_info=True)
            results = [exc] * len(good)
        outcomes.update({source.pk: result for (source, _, _), result in zip(good, results, strict=True)})
    return [outcomes[source.pk] for source in sources]


def source_scrape(*, source: IngestSource, now: dt.datetime | None = None) -> IngestResult | None:
    """Fetch and ingest one scrape source. Errors are recorded on it, not raised (None)."""
    outcome = sources_scrape(sources=[source], now=now)[0]
    return outcome if isinstance(outcome, IngestResult) else None
