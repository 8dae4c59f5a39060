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
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from fleet.audit import Actor, audited_create, audited_delete, audited_update
from inventory.models import Gpu
from inventory.telemetry.models import IngestKind, IngestSource, XidEvent, XidSource, xid_is_hardware
from inventory.telemetry.sample import GpuSample, ParsedBatch, TelemetryParseError, XidLine
from inventory.telemetry.store import SampleRow, WriteResult, get_store

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


def _round(value: float | None) -> int | None:
    return None if value is None else round(value)


def _int4(value: int | None) -> int | None:
    """Binary COPY wraps an integer too large for its column silently: clamp (remapped rows never get there)."""
    return None if value is None else min(value, INT4_MAX)


def sample_rows(samples: Sequence[GpuSample], gpu_ids: Sequence[int | None], *, now: dt.datetime,
                oldest: dt.datetime, result: IngestResult) -> list[SampleRow]:
    """The rows to store for the known GPUs; unknown GPUs and too-old samples are counted in ``result``."""
    rows = []
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
        mask = sample.throttle_mask
        rows.append(SampleRow(
            ts, gpu_id, sample.power_w, None if mask is None else mask & 0x7FFFFFFF,
            _round(sample.gpu_temp_c), _round(sample.mem_temp_c), _round(sample.tlimit_c), _round(sample.sm_clock_mhz),
            sample.ecc_sbe, sample.ecc_dbe, _int4(sample.remap_corr), _int4(sample.remap_unc), sample.remap_failure,
            sample.pcie_replay, sample.sram_threshold_exceeded, sample.xid,
        ))
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

    return parse_telemetry(content, fmt=fmt, host=host, now=now, filename=filename)


def telemetry_write(*, batch: ParsedBatch, source: IngestSource | None, now: dt.datetime) -> IngestResult:
    """Map and write a parsed batch in ONE transaction: all of it or (on an error) nothing."""
    result = IngestResult(lines=batch.lines, rejected=collections.Counter(batch.rejected))
    oldest = now - dt.timedelta(days=settings.FLEET_TELEMETRY_RAW_DAYS) + dt.timedelta(minutes=5)
    for attempt in (1, 2):
        try:
            with transaction.atomic():
                sample_ids = map_identities(batch.samples)
                xid_ids = map_identities(batch.xids)
                rows = sample_rows(batch.samples, sample_ids, now=now, oldest=oldest, result=result)
                written: WriteResult = get_store().write_samples(rows, source_id=source.pk if source else None)
                xid_lines_write(batch.xids, xid_ids, source=source, now=now, result=result)
            break
        except IntegrityError:
            # A cached id of a GPU deleted since (the latest row's foreign key refused it): reload, once.
            if attempt == 2:
                raise
            identity_cache_clear()
            result = IngestResult(lines=batch.lines, rejected=collections.Counter(batch.rejected))
    result.samples = written.samples
    result.counter_rows = written.counter_rows
    result.xid_events += written.xid_events
    return result


def telemetry_ingest(*, source: IngestSource | None, content: bytes | str, fmt: str, host: str | None = None,
                     filename: str = "", actor: Actor | None = None, now: dt.datetime | None = None) -> IngestResult:
    """Parse ``content`` (``fmt`` one of :data:`FORMATS`), write it, and record the outcome on ``source``.

    Raises :class:`TelemetryParseError` (nothing written; the error is recorded on the source). Any other
    error is recorded and re-raised. ``actor`` is who pushed the data (kept for symmetry with every service;
    telemetry batches are not audited).
    """
    if fmt not in FORMATS:
        raise TelemetryParseError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}", reason="format")
    started = time.perf_counter()
    now = now or timezone.now()
    max_bytes = settings.FLEET_TELEMETRY_MAX_BYTES
    try:
        if len(content) > max_bytes:
            raise TelemetryParseError(f"the body is {len(content)} bytes; at most {max_bytes}",
                                      reason="body_too_large")
        host = (host or (source.host if source else "") or "").strip().lower() or None
        batch = _parse(content, fmt=fmt, host=host, now=now, filename=filename)
        result = telemetry_write(batch=batch, source=source, now=now)
    except Exception as exc:
        if source is not None:
            source_record(source=source, now=now, error=_error_text(exc),
                          duration_ms=int((time.perf_counter() - started) * 1000))
        raise
    result.duration_ms = int((time.perf_counter() - started) * 1000)
    if source is not None:
        source_record(source=source, now=now, result=result)
    return result


def _error_text(exc: Exception) -> str:
    if isinstance(exc, TelemetryParseError):
        return f"{exc.reason}: {exc}"[:1000]
    return f"{type(exc).__name__}: {exc}"[:1000]


def _merge_counts(total: dict[str, int], more: collections.Counter[str]) -> dict[str, int]:
    merged = collections.Counter(total)
    merged.update(more)
    return dict(sorted(merged.items()))


def source_record(*, source: IngestSource, now: dt.datetime, result: IngestResult | None = None,
                  error: str = "", duration_ms: int | None = None) -> None:
    """Record one ingest attempt on its source (its own small transaction, after the batch's)."""
    with transaction.atomic():
        locked = IngestSource.objects.select_for_update().get(pk=source.pk)
        locked.last_attempt_at = now
        locked.scrape_in_flight_until = None
        if result is None:
            locked.last_error = error
            locked.last_duration_ms = duration_ms
        else:
            locked.last_ok_at = now
            locked.last_error = ""
            locked.last_duration_ms = result.duration_ms
            locked.last_samples = result.samples
            locked.last_unknown = result.unknown
            locked.last_rejected = dict(sorted(result.rejected.items()))
            locked.samples_total = F("samples_total") + result.samples
            locked.unknown_total = F("unknown_total") + result.unknown
            locked.rejected_total = _merge_counts(locked.rejected_total, result.rejected)
            if result.unknown_examples:
                examples = [e for e in locked.unknown_examples if e not in result.unknown_examples]
                locked.unknown_examples = (result.unknown_examples + examples)[:UNKNOWN_EXAMPLES]
        locked.save()
    source.refresh_from_db()


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
        IngestSource.objects.bulk_update(claimed, ["scrape_in_flight_until"])
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


def source_scrape(*, source: IngestSource, now: dt.datetime | None = None) -> IngestResult | None:
    """Fetch one scrape source's URL (with its timeout) and ingest the text. Errors are recorded, not raised."""
    now = now or timezone.now()
    started = time.perf_counter()
    try:
        content = _fetch(source.url, min(source.timeout_s, settings.FLEET_TELEMETRY_SCRAPE_TIMEOUT))
    except Exception as exc:  # noqa: BLE001 - any failure of one endpoint is its own, recorded
        source_record(source=source, now=now, error=_error_text(exc),
                      duration_ms=int((time.perf_counter() - started) * 1000))
        return None
    try:
        return telemetry_ingest(source=source, content=content, fmt="prometheus", now=now)
    except Exception:  # noqa: BLE001 - recorded on the source by telemetry_ingest
        log.warning("telemetry scrape of %s failed", source.name, exc_info=True)
        return None


# --- demo --------------------------------------------------------------------------------------------------------

DEMO_SOURCE = "demo-exporter"
DEMO_URL = "http://127.0.0.1:9400/metrics"


def telemetry_demo_backfill(*, hours: int = 24, actor: Actor | None = None, now: dt.datetime | None = None,
                            step_s: int = 300) -> dict[str, int]:
    """Write ``hours`` of history for the demo fleet (every placed GPU with a UUID), one sample per GPU every
    ``step_s`` seconds, through the normal write path, then roll it up; and register the ``demo-exporter``
    scrape source (``manage.py dcgm_exporter_sim``). A heat wave moves along the racks during the period, so
    the heatmap playback shows heat moving.
    """
    import math
    import random

    from inventory.telemetry.rollup import rollup_range

    now = now or timezone.now()
    end = now.replace(second=0, microsecond=0) - dt.timedelta(minutes=now.minute % 5)
    start = end - dt.timedelta(hours=hours)
    gpus = list(Gpu.objects.filter(server__isnull=False, uuid__isnull=False)
                .order_by("rack_id", "server_id", "module_id", "id").values_list("id", "rack_id"))
    racks = sorted({rack for _, rack in gpus if rack is not None})
    rack_pos = {rack: i / max(len(racks), 1) for i, rack in enumerate(racks)}
    rng = random.Random(1)
    base = {gpu_id: 52 + rng.random() * 10 for gpu_id, _ in gpus}
    steps = int(hours * 3600 // step_s)
    store = get_store()
    samples = 0
    for step in range(steps):
        ts = start + dt.timedelta(seconds=step * step_s)
        wave_at = step / max(steps, 1)  # the wave's position along the racks, 0 -> 1 over the period
        rows = []
        for gpu_id, rack in gpus:
            heat = 0.0
            if rack is not None:
                distance = abs(rack_pos[rack] - wave_at)
                heat = 22 * math.exp(-((distance * 12) ** 2))
            temp = base[gpu_id] + heat + rng.uniform(-1.5, 1.5)
            power = 380 + heat * 9 + rng.uniform(-25, 25)
            rows.append(SampleRow(ts, gpu_id, round(power, 1), 0x40 if temp > 82 else 0, round(temp),
                                  round(temp + 6), round(88 - temp), 1980 - (150 if temp > 82 else 0),
                                  0, 0, 0, 0, False, 0, False, 0))
        with transaction.atomic():
            samples += store.write_samples(rows).samples
    rollup_range(start=start, end=end)
    ingest_source_for(name=DEMO_SOURCE, kind=IngestKind.SCRAPE, actor=actor)
    source = IngestSource.objects.get(name=DEMO_SOURCE)
    if not source.url:
        ingest_source_update(source=source, actor=actor, url=DEMO_URL, kind=IngestKind.SCRAPE)
    return {"gpus": len(gpus), "samples": samples, "steps": steps}

