"""Every telemetry write: ingest (scrape, push, file), ingest sources, the demo backfill.

``telemetry_ingest`` is the one entry point of the three ingest paths (beat scrape, ``POST
/api/v1/telemetry/...``, ``manage.py ingest_telemetry``): parse, map identities, write in one transaction
(:mod:`inventory.telemetry.store`), then record the outcome on the source. Telemetry batches are data, not
changes of record, so they are not audited; changes to ingest sources are.
"""

from __future__ import annotations

import collections
import datetime as dt
import hashlib
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from fleet.audit import Actor, audited_create, audited_delete, audited_update
from inventory.models import Gpu
from inventory.telemetry.models import IngestKind, IngestSource, XidEvent, XidSource, xid_is_hardware
from inventory.telemetry.sample import GpuSample, ParsedBatch, TelemetryParseError, XidLine
from inventory.telemetry.store import MergeResult, SampleRow, WriteResult, get_store

log = logging.getLogger(__name__)

FORMATS = ("prometheus", "nvidia-smi-xml", "nvidia-smi-csv", "kernel-log")
UNKNOWN_EXAMPLES = 20
TOO_OLD = "too_old"  # a sample older than the raw retention window: counted, not written
UNKNOWN_GPU = "unknown_gpu"


# --- identities ----------------------------------------------------------------------------------------

class _Identities:
    """UUID -> gpu id and (hostname, PCI bus id) -> gpu id, per process.

    Loaded whole (100,000 GPUs: one query, ~0.2 s) and reloaded every ``MAX_AGE`` seconds (placements
    change: the host + bus map may be that stale); a UUID or host + bus that misses is looked up on its own
    at once, so a new GPU is known from its first batch.
    """

    MAX_AGE = 300.0

    def __init__(self) -> None:
        self.by_uuid: dict[str, int] = {}
        self.by_slot: dict[tuple[str, str], int] = {}
        self.loaded_at = 0.0
        self.lock = threading.Lock()

    def clear(self) -> None:
        with self.lock:
            self.by_uuid, self.by_slot, self.loaded_at = {}, {}, 0.0

    def _load(self, queryset) -> None:  # type: ignore[no-untyped-def]
        for gpu_id, uuid, hostname, bus in queryset.values_list("id", "uuid", "server__hostname", "pci_bus_id"):
            if uuid:
                self.by_uuid[uuid] = gpu_id
            if hostname and bus:
                self.by_slot[(hostname, bus)] = gpu_id

    def refresh_if_old(self) -> None:
        if time.monotonic() - self.loaded_at > self.MAX_AGE:
            with self.lock:
                self.by_uuid, self.by_slot = {}, {}
                self._load(Gpu.objects.all())
                self.loaded_at = time.monotonic()

    def look_up(self, uuids: set[str], slots: set[tuple[str, str]]) -> None:
        """Ask the database for identities that missed (new GPUs since the last load)."""
        with self.lock:
            if uuids:
                self._load(Gpu.objects.filter(uuid__in=uuids))
            hosts = {host for host, _ in slots}
            if hosts:
                self._load(Gpu.objects.filter(server__hostname__in=hosts))


_identities = _Identities()


def identity_cache_clear() -> None:
    """Forget every cached identity (tests; after a bulk re-numbering)."""
    _identities.clear()


def _identity_text(sample: GpuSample | XidLine) -> str:
    return sample.uuid or f"{sample.host or '?'}:{sample.pci_bus_id or '?'}"


def _gpu_id(item: GpuSample | XidLine) -> int | None:
    gpu_id = _identities.by_uuid.get(item.uuid) if item.uuid else None
    if gpu_id is None and item.host and item.pci_bus_id:
        gpu_id = _identities.by_slot.get((item.host, item.pci_bus_id))
    return gpu_id


def map_identities(items: Sequence[GpuSample | XidLine]) -> list[int | None]:
    """Gpu ids for ``items`` (None where unknown); identities that miss the cache are looked up once."""
    _identities.refresh_if_old()
    ids = [_gpu_id(item) for item in items]
    missing = [item for item, gpu_id in zip(items, ids, strict=True) if gpu_id is None]
    if missing:
        _identities.look_up({item.uuid for item in missing if item.uuid},
                            {(item.host, item.pci_bus_id) for item in missing if item.host and item.pci_bus_id})
        ids = [gpu_id if gpu_id is not None else _gpu_id(item) for item, gpu_id in zip(items, ids, strict=True)]
    return ids


# --- ingest -------------------------------------------------------------------------------------------------

@dataclass
class IngestResult:
    samples: int = 0  # samples written
    unknown: int = 0  # samples and XID lines for GPUs Fleet does not know
    rejected: collections.Counter[str] = field(default_factory=collections.Counter)
    xid_events: int = 0  # new XID events (DCGM gauge changes + kernel-log lines)
    counter_rows: int = 0
    lines: int = 0
    unknown_examples: list[str] = field(default_factory=list)
    duration_ms: int = 0

    def summary(self) -> dict[str, Any]:
        """What the API, the command and the source page show."""
        return {"samples": self.samples, "unknown": self.unknown, "rejected": dict(sorted(self.rejected.items())),
                "xid_events": self.xid_events, "unknown_examples": self.unknown_examples}


INT4_MAX = 2**31 - 1


def sample_rows(samples: Sequence[GpuSample], gpu_ids: Sequence[int | None], *, now: dt.datetime,
                oldest: dt.datetime, result: IngestResult, source_id: int | None = None) -> list[tuple]:
    """The rows to store for the known GPUs (:class:`SampleRow`-shaped plain tuples, the COPY's input);
    unknown GPUs and too-old samples are counted in ``result``."""
    rows: list[tuple] = []
    append = rows.append
    examples: dict[str, None] = {}
    for sample, gpu_id in zip(samples, gpu_ids, strict=True):
        if gpu_id is None:
            result.unknown += 1
            if len(examples) < UNKNOWN_EXAMPLES:
                examples[_identity_text(sample)] = None
            continue
        ts = sample.ts or now
        if ts < oldest:
            result.rejected[TOO_OLD] += 1
            continue
        mask, temp, mem, tlimit, clock = (sample.throttle_mask, sample.gpu_temp_c, sample.mem_temp_c,
                                          sample.tlimit_c, sample.sm_clock_mhz)
        corr, unc = sample.remap_corr, sample.remap_unc
        append((
            ts, gpu_id, sample.power_w, None if mask is None else mask & 0x7FFFFFFF,
            None if temp is None else round(temp), None if mem is None else round(mem),
            None if tlimit is None else round(tlimit), None if clock is None else round(clock),
            sample.ecc_sbe, sample.ecc_dbe, None if corr is None else min(corr, INT4_MAX),
            None if unc is None else min(unc, INT4_MAX), sample.remap_failure, sample.pcie_replay,
            sample.sram_threshold_exceeded, sample.xid, source_id,
        ))  # binary COPY wraps an integer too large for its column silently: remap counters clamped to int4
    result.unknown_examples.extend(examples)
    return rows


_KERNEL_TIME = "%a %b %d %H:%M:%S %Y"


def _kernel_time(text: str, now: dt.datetime) -> dt.datetime:
    """``Sun Feb 23 16:24:18 2025`` (the kernel's ``dmesg -T`` form, taken as UTC), else ingest time."""
    text = " ".join(text.strip("[] ").split())
    try:
        return dt.datetime.strptime(text, _KERNEL_TIME).replace(tzinfo=dt.UTC)
    except ValueError:
        return now


def _xid_line_key(gpu_id: int, line: XidLine) -> str:
    """The same log line ingested twice is one event (the timestamp text is part of the line)."""
    raw = f"{gpu_id}|{line.xid}|{line.pid}|{line.ts_text}|{line.process}|{line.message}"
    return hashlib.sha256(raw.encode()).hexdigest()


def xid_lines_write(lines: Sequence[XidLine], gpu_ids: Sequence[int | None], *, source: IngestSource | None,
                    now: dt.datetime, result: IngestResult) -> None:
    """Kernel-log XIDs as events, idempotent (unique line key); unknown GPUs are counted."""
    events: dict[str, XidEvent] = {}
    for line, gpu_id in zip(lines, gpu_ids, strict=True):
        if gpu_id is None:
            result.unknown += 1
            if len(result.unknown_examples) < UNKNOWN_EXAMPLES:
                result.unknown_examples.append(_identity_text(line))
            continue
        key = _xid_line_key(gpu_id, line)
        events[key] = XidEvent(gpu_id=gpu_id, at=_kernel_time(line.ts_text, now), xid=line.xid,
                               hardware=xid_is_hardware(line.xid), pid=line.pid, process=line.process[:200],
                               message=line.message[:1000], source=XidSource.KERNEL, ingest_source=source,
                               line_key=key)
    if not events:
        return
    seen = set(XidEvent.objects.filter(line_key__in=list(events)).values_list("line_key", flat=True))
    new = [event for key, event in events.items() if key not in seen]
    XidEvent.objects.bulk_create(new, batch_size=1000)
    result.xid_events += len(new)


def _parse(content: bytes | str, *, fmt: str, host: str | None, now: dt.datetime, filename: str) -> ParsedBatch:
    from inventory.telemetry.parse import parse_telemetry

    if fmt not in FORMATS:
        raise TelemetryParseError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}", reason="format")
    max_bytes = settings.FLEET_TELEMETRY_MAX_BYTES
    if len(content) > max_bytes:
        raise TelemetryParseError(f"the body is {len(content)} bytes; at most {max_bytes}", reason="body_too_large")
    return parse_telemetry(content, fmt=fmt, host=host, now=now, filename=filename)


class IngestItem(NamedTuple):
    """One body to ingest: from a scrape, a push or a file."""

    source: IngestSource | None
    content: bytes | str
    fmt: str = "prometheus"
    host: str | None = None
    filename: str = ""


def _map(batch: ParsedBatch, *, source: IngestSource | None, now: dt.datetime,
         oldest: dt.datetime) -> tuple[IngestResult, list[tuple], list[int | None]]:
    """A parsed body's rows for the store (and its XID lines' gpu ids), its counts in an IngestResult."""
    result = IngestResult(lines=batch.lines, rejected=collections.Counter(batch.rejected))
    rows = sample_rows(batch.samples, map_identities(batch.samples), now=now, oldest=oldest, result=result,
                       source_id=source.pk if source is not None else None)
    return result, rows, map_identities(batch.xids) if batch.xids else []


def telemetry_write(*, batch: ParsedBatch, source: IngestSource | None, now: dt.datetime) -> IngestResult:
    """Map and write one parsed batch in ONE transaction: all of it or (on an error) nothing."""
    return _write([(batch, source)], now=now)[0]


def _write(batches: Sequence[tuple[ParsedBatch, IngestSource | None]], *, now: dt.datetime) -> list[IngestResult]:
    """Map every batch and write them all in ONE transaction: one store write (on PostgreSQL one COPY into the
    inbox) and the kernel-log XID lines. All of them or (on an error) none."""
    oldest = now - dt.timedelta(days=settings.FLEET_TELEMETRY_RAW_DAYS) + dt.timedelta(minutes=5)
    for attempt in (1, 2):
        try:
            with transaction.atomic():
                mapped = [(_map(batch, source=source, now=now, oldest=oldest), batch, source)
                          for batch, source in batches]
                rows = [row for (_, body_rows, _), _, _ in mapped for row in body_rows]
                written: WriteResult = get_store().write_samples(rows)
                for (result, _, xid_ids), batch, source in mapped:
                    if batch.xids:
                        xid_lines_write(batch.xids, xid_ids, source=source, now=now, result=result)
            break
        except IntegrityError:
            # A cached id of a GPU deleted since (a foreign key refused it): reload, once.
            if attempt == 2:
                raise
            identity_cache_clear()
    results = []
    for (result, body_rows, _), _, _ in mapped:
        result.samples = len(body_rows)
        results.append(result)
    if len(results) == 1:  # the direct (SQLite) store reports what it derived at once
        results[0].counter_rows = written.counter_rows
        results[0].xid_events += written.xid_events
    return results


def telemetry_ingest_many(*, items: Sequence[IngestItem | tuple], actor: Actor | None = None,
                          now: dt.datetime | None = None,
                          fetch_ms: Sequence[int] | None = None) -> list[IngestResult | Exception]:
    """Parse every body, map identities, write ALL the accepted bodies in ONE transaction (one inbox COPY),
    then record each body's outcome on its source (one small transaction for all of them).

    A body that does not parse is refused whole and counted on its own source (its exception is returned in
    its place); the other bodies are written. A database error during the write refuses every body: it is
    recorded on each source and re-raised. Returns one IngestResult or exception per item, in order.
    ``fetch_ms`` (the scraper's fetch times) is added to each body's recorded duration.
    """
    now = now or timezone.now()
    outcomes: list[IngestResult | Exception] = []
    accepted: list[tuple[int, ParsedBatch, IngestSource | None]] = []
    spent = [0.0] * len(items)
    for index, item in enumerate(items):
        source, content, fmt, host, filename = IngestItem(*item)
        started = time.perf_counter()
        host = (host or (source.host if source else "") or "").strip().lower() or None
        try:
            accepted.append((index, _parse(content, fmt=fmt, host=host, now=now, filename=filename), source))
            outcomes.append(IngestResult())
        except Exception as exc:  # noqa: BLE001 - one body's failure is its own; recorded on its source
            if not isinstance(exc, TelemetryParseError):
                log.warning("telemetry parse of %s failed", filename or source, exc_info=True)
            outcomes.append(exc)
        spent[index] = time.perf_counter() - started
    write_started = time.perf_counter()
    try:
        written = _write([(batch, source) for _, batch, source in accepted], now=now) if accepted else []
    except Exception as exc:
        for index, _, _ in accepted:
            outcomes[index] = exc
        _record_all(items, outcomes, spent, 0.0, fetch_ms, now)
        raise
    write_s = (time.perf_counter() - write_started) / max(len(accepted), 1)
    for (index, _, _), result in zip(accepted, written, strict=True):
        outcomes[index] = result
    _record_all(items, outcomes, spent, write_s, fetch_ms, now)
    return outcomes


def _record_all(items: Sequence[IngestItem | tuple], outcomes: list[IngestResult | Exception], spent: list[float],
                write_s: float, fetch_ms: Sequence[int] | None, now: dt.datetime) -> None:
    records = []
    for index, (item, outcome) in enumerate(zip(items, outcomes, strict=True)):
        duration_ms = int((spent[index] + write_s) * 1000) + (fetch_ms[index] if fetch_ms else 0)
        if isinstance(outcome, IngestResult):
            outcome.duration_ms = duration_ms
        if item[0] is not None:
            records.append(SourceRecord(item[0], outcome, duration_ms))
    sources_record(records=records, now=now)


def telemetry_ingest(*, source: IngestSource | None, content: bytes | str, fmt: str, host: str | None = None,
                     filename: str = "", actor: Actor | None = None, now: dt.datetime | None = None) -> IngestResult:
    """Parse ``content`` (``fmt`` one of :data:`FORMATS`), write it, and record the outcome on ``source``.

    Raises :class:`TelemetryParseError` (nothing written; the error is recorded on the source). Any other
    error is recorded and re-raised. ``actor`` is who pushed the data (kept for symmetry with every service;
    telemetry batches are not audited). On PostgreSQL the samples land in the inbox: the raw table, the
    counters, DCGM XID events and the latest values follow with the next :func:`telemetry_merge`, so
    ``xid_events`` counts kernel-log lines there.
    """
    outcome = telemetry_ingest_many(items=[IngestItem(source, content, fmt, host, filename)], actor=actor, now=now)[0]
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def telemetry_merge() -> MergeResult:
    """Merge the inbox into the raw, counter, XID and latest-value tables (PostgreSQL; nothing to do on SQLite).

    Its own transaction, with the inbox locked: safe to run concurrently with ingest and with itself (a second
    merge waits, then finds the inbox empty). The beat runs it every 15 s; the rollup tick and the demo backfill
    run it before they read raw data.
    """
    return get_store().merge()


def _error_text(exc: Exception) -> str:
    if isinstance(exc, TelemetryParseError):
        return f"{exc.reason}: {exc}"[:1000]
    return f"{type(exc).__name__}: {exc}"[:1000]


def _merge_counts(total: dict[str, int], more: collections.Counter[str]) -> dict[str, int]:
    merged = collections.Counter(total)
    merged.update(more)
    return dict(sorted(merged.items()))


class SourceRecord(NamedTuple):
    source: IngestSource
    outcome: IngestResult | Exception | str  # a result, or the error (an exception or its text)
    duration_ms: int | None = None


_RECORD_FIELDS = ["last_attempt_at", "scrape_in_flight_until", "last_error", "last_duration_ms", "last_ok_at",
                  "last_samples", "last_unknown", "last_rejected", "samples_total", "unknown_total",
                  "rejected_total", "unknown_examples"]


def sources_record(*, records: Sequence[SourceRecord], now: dt.datetime) -> None:
    """Record ingest attempts on their sources: one ``SELECT ... FOR UPDATE`` (in id order: no deadlock between
    two groups) and one UPDATE for all of them, in a small transaction of their own after the batch's."""
    if not records:
        return
    with transaction.atomic():
        locked = {source.pk: source for source in IngestSource.objects.select_for_update()
                  .filter(pk__in={record.source.pk for record in records}).order_by("pk")}
        for record in records:
            source = locked.get(record.source.pk)
            if source is None:  # deleted meanwhile
                continue
            source.last_attempt_at = now
            source.scrape_in_flight_until = None
            result = record.outcome
            if not isinstance(result, IngestResult):
                source.last_error = result if isinstance(result, str) else _error_text(result)
                source.last_duration_ms = record.duration_ms
                continue
            source.last_ok_at = now
            source.last_error = ""
            source.last_duration_ms = result.duration_ms
            source.last_samples = result.samples
            source.last_unknown = result.unknown
            source.last_rejected = dict(sorted(result.rejected.items()))
            source.samples_total += result.samples  # the row is locked: plain arithmetic is safe
            source.unknown_total += result.unknown
            if result.rejected:
                source.rejected_total = _merge_counts(source.rejected_total, result.rejected)
            if result.unknown_examples:
                examples = [e for e in source.unknown_examples if e not in result.unknown_examples]
                source.unknown_examples = (result.unknown_examples + examples)[:UNKNOWN_EXAMPLES]
        # One parameterised UPDATE sent for every source (psycopg pipelines executemany): bulk_update's CASE
        # expressions cost ~6 ms of Python per source (measured: 1.5 s for 256 sources, 12 fields).
        fields = [IngestSource._meta.get_field(name) for name in _RECORD_FIELDS]
        # psycopg takes the plain values as they are; JSON (and, on SQLite, datetimes) need the field's preparation.
        plain = connection.vendor == "postgresql"
        prepared = [(f.attname, None if plain and f.get_internal_type() != "JSONField" else f) for f in fields]
        quote = connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {quote(IngestSource._meta.db_table)} SET "  # noqa: S608 - names from the model
                + ", ".join(f"{quote(f.column)} = %s" for f in fields) + " WHERE id = %s",
                [[getattr(source, name) if field is None else field.get_db_prep_save(getattr(source, name), connection)
                  for name, field in prepared] + [source.pk] for source in locked.values()])
    for record in records:
        if record.source.pk in locked and record.source is not locked[record.source.pk]:
            for name in _RECORD_FIELDS:
                setattr(record.source, name, getattr(locked[record.source.pk], name))


def source_record(*, source: IngestSource, now: dt.datetime, result: IngestResult | None = None,
                  error: str = "", duration_ms: int | None = None) -> None:
    """Record one ingest attempt on its source (see :func:`sources_record`)."""
    sources_record(records=[SourceRecord(source, result if result is not None else error, duration_ms)], now=now)


# --- sources --------------------------------------------------------------------------------------------------

SOURCE_FIELDS = ("name", "kind", "url", "host", "enabled", "interval_s", "timeout_s")


@transaction.atomic
def ingest_source_create(*, actor: Actor | None, **fields: Any) -> IngestSource:
    return audited_create(model_class=IngestSource, actor=actor, **fields)  # type: ignore[return-value]


@transaction.atomic
def ingest_source_update(*, source: IngestSource, actor: Actor | None, before: dict[str, Any] | None = None,
                         **fields: Any) -> dict[str, list[Any]]:
    return audited_update(obj=source, actor=actor, before=before, **fields)


@transaction.atomic
def ingest_source_delete(*, source: IngestSource, actor: Actor | None) -> None:
    """Delete a source; its XID events keep their data (``ingest_source`` becomes null)."""
    audited_delete(obj=source, actor=actor)


def ingest_source_for(*, name: str, kind: str, actor: Actor | None) -> IngestSource:
    """The source named ``name`` (a push or file source is created on first use)."""
    source = IngestSource.objects.filter(name=name).first()
    if source is None:
        try:
            source = ingest_source_create(actor=actor, name=name, kind=kind)
        except IntegrityError:  # created by a concurrent request
            source = IngestSource.objects.get(name=name)
    return source


# --- scraping ---------------------------------------------------------------------------------------------------

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


# --- demo --------------------------------------------------------------------------------------------------------

DEMO_SOURCE = "demo-exporter"
DEMO_URL = "http://127.0.0.1:9400/metrics"


def telemetry_demo_backfill(*, hours: int = 24, actor: Actor | None = None, now: dt.datetime | None = None,
                            step_s: int = 300) -> dict[str, int]:
    """Write ``hours`` of SYNTHETIC history for the demo fleet (every placed GPU with a UUID), one sample per GPU
    every ``step_s`` seconds, through the normal write path (an hour of steps per batch and transaction), then
    roll it up; and register the ``demo-exporter`` scrape source (``manage.py dcgm_exporter_sim``).

    Each GPU's level and problems come from ``synth.demo_fleet`` (shared with the demo exporter, so the live
    scrapes continue this history): about 0.5 % of the GPUs get a row-remap failure, a hardware XID (79, 48 +
    171, 74, 95), an application XID (13, 43: recorded, never flagged), a double-bit ECC error every 100
    minutes, or run 10-20 C hotter than their rack peers at the same power. A heat wave crosses the racks
    during the period (gone at both ends), so the heatmap playback shows heat moving.
    """
    import math
    import random

    from inventory.telemetry.rollup import rollup_range
    from inventory.telemetry.synth import DEMO_XID_GAP, DEMO_XIDS, demo_fleet, demo_reading

    now = now or timezone.now()
    end = now.replace(second=0, microsecond=0) - dt.timedelta(minutes=now.minute % 5)
    start = end - dt.timedelta(hours=hours)
    gpus = list(Gpu.objects.filter(server__isnull=False, uuid__isnull=False)
                .order_by("rack_id", "server_id", "module_id", "id").values_list("id", "rack_id", "uuid"))
    demo = demo_fleet([uuid for _, _, uuid in gpus])
    racks = sorted({rack for _, rack, _ in gpus if rack is not None})
    rack_pos = {rack: i / max(len(racks), 1) for i, rack in enumerate(racks)}
    rng = random.Random(1)
    steps = int(hours * 3600 // step_s)
    onsets = {uuid: int(gpu.onset * steps) for uuid, gpu in demo.items() if gpu.role}
    per_batch = max(1, 3600 // step_s)  # an hour of steps per write: one transaction, and on SQLite few commits
    store = get_store()
    samples, rows, rolled = 0, [], start
    for step in range(steps):
        ts = start + dt.timedelta(seconds=step * step_s)
        wave_at = -0.15 + 1.3 * step / max(steps - 1, 1)  # the wave's position along the racks, off them at both ends
        heats = {rack: 22 * math.exp(-((abs(pos - wave_at) * 12) ** 2)) for rack, pos in rack_pos.items()}
        for gpu_id, rack, uuid in gpus:
            heat = heats.get(rack, 0.0)
            r = demo_reading(demo[uuid], at=ts, heat=heat, started=step >= onsets.get(uuid, steps), rng=rng)
            row = SampleRow(ts, gpu_id, r.power_w, r.throttle_mask, r.gpu_temp_c, r.mem_temp_c, r.tlimit_c,
                            r.sm_clock_mhz, r.ecc_sbe, r.ecc_dbe, r.remap_corr, r.remap_unc, r.remap_failure, 0,
                            False, r.xid)
            if step == onsets.get(uuid) and demo[uuid].role in DEMO_XIDS:  # the XIDs before the gauge's last one
                earlier = DEMO_XIDS[demo[uuid].role][:-1]
                rows.extend(row._replace(ts=ts - DEMO_XID_GAP * (len(earlier) - i), xid=xid)
                            for i, xid in enumerate(earlier))
            rows.append(row)
        # The first step alone: it holds every GPU's first counter values (baseline counter rows), which SQLite's
        # 5-minute rollup joins with each sample group of its window (an hour: 5 s; one step: 0.3 s).
        if rows and (step == 0 or step % per_batch == per_batch - 1 or step == steps - 1):
            with transaction.atomic():
                samples += store.write_samples(rows).samples
            rows = []
            telemetry_merge()  # PostgreSQL: the inbox, an hour at a time (the latest values move with each)
            # Rolled up as it goes, an hour at a time like beat's tick: one 24-hour rollup took 34 s on SQLite.
            done = ts + dt.timedelta(seconds=step_s)
            rollup_range(start=rolled, end=done)
            rolled = done
    ingest_source_for(name=DEMO_SOURCE, kind=IngestKind.SCRAPE, actor=actor)
    source = IngestSource.objects.get(name=DEMO_SOURCE)
    if not source.url:
        ingest_source_update(source=source, actor=actor, url=DEMO_URL, kind=IngestKind.SCRAPE)
    return {"gpus": len(gpus), "samples": samples, "steps": steps}

