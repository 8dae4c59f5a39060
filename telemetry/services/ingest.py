"""Ingest: parse, map and write bodies in one transaction, and record each outcome on its source."""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import gc
import hashlib
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from fleet.audit import Actor
from fleet.metrics import telemetry_observe
from telemetry.models import IngestSource, XidEvent, XidSource, xid_is_hardware
from telemetry.sample import GpuSample, ParsedBatch, TelemetryParseError, XidLine
from telemetry.services.identities import identity_cache_clear, identity_text, map_identities
from telemetry.store import WriteResult, get_store

log = logging.getLogger(__name__)


FORMATS = ("prometheus", "nvidia-smi-xml", "nvidia-smi-csv", "kernel-log")
UNKNOWN_EXAMPLES = 20
TOO_OLD = "too_old"  # a sample older than the raw retention window: counted, not written
UNKNOWN_GPU = "unknown_gpu"


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
    notices: list[str] = field(default_factory=list)  # harmless things read past (new CSV columns)

    def summary(self) -> dict[str, Any]:
        """What the API, the command and the source page show."""
        return {"samples": self.samples, "unknown": self.unknown, "rejected": dict(sorted(self.rejected.items())),
                "xid_events": self.xid_events, "unknown_examples": self.unknown_examples, "notices": self.notices}


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
                examples[identity_text(sample)] = None
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
                result.unknown_examples.append(identity_text(line))
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
    from telemetry.parse import parse_telemetry

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
    result = IngestResult(lines=batch.lines, rejected=collections.Counter(batch.rejected), notices=list(batch.notices))
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


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """No automatic cyclic collection while a group is parsed, mapped and written. Parsing allocates
    thousands of small containers per body (label dicts, per-series lists, samples, row tuples), none of them
    in a cycle: reference counting frees them, yet every 700 allocations start a young collection, and now and
    then a full one over the whole heap (the identity maps, Django). Collection resumes afterwards; a cycle made
    meanwhile (an exception's traceback) waits for it."""
    if not gc.isenabled():  # paused by the caller (or by another thread's group): leave it as found
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


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
    with _cyclic_gc_paused():
        return _ingest_many(items, now=now or timezone.now(), fetch_ms=fetch_ms)


def _ingest_many(items: Sequence[IngestItem | tuple], *, now: dt.datetime,
                 fetch_ms: Sequence[int] | None) -> list[IngestResult | Exception]:
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
            telemetry_observe(samples=outcome.samples, unknown=outcome.unknown, rejected=outcome.rejected)
        else:
            telemetry_observe(rejected={f"body_{getattr(outcome, 'reason', 'error')}": 1})
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
    two groups) of the recorded fields and one UPDATE for all of them, in a small transaction of their own after
    the batch's. Each record's ``source`` object gets the values written."""
    if not records:
        return
    with transaction.atomic():
        # Plain values, not model instances: a group of 256 sources built 256 instances (and decoded three JSON
        # fields each) to change twelve fields.
        locked = {pk: dict(zip(_RECORD_FIELDS, values, strict=True)) for pk, *values in IngestSource.objects
                  .select_for_update().filter(pk__in={record.source.pk for record in records}).order_by("pk")
                  .values_list("pk", *_RECORD_FIELDS)}
        for record in records:
            state = locked.get(record.source.pk)
            if state is None:  # deleted meanwhile
                continue
            state["last_attempt_at"] = now
            state["scrape_in_flight_until"] = None
            result = record.outcome
            if not isinstance(result, IngestResult):
                state["last_error"] = result if isinstance(result, str) else _error_text(result)
                state["last_duration_ms"] = record.duration_ms
                continue
            state["last_ok_at"] = now
            state["last_error"] = ""
            state["last_duration_ms"] = result.duration_ms
            state["last_samples"] = result.samples
            state["last_unknown"] = result.unknown
            state["last_rejected"] = dict(sorted(result.rejected.items()))
            state["samples_total"] += result.samples  # the row is locked: plain arithmetic is safe
            state["unknown_total"] += result.unknown
            if result.rejected:
                state["rejected_total"] = _merge_counts(state["rejected_total"], result.rejected)
            if result.unknown_examples:
                examples = [e for e in state["unknown_examples"] if e not in result.unknown_examples]
                state["unknown_examples"] = (result.unknown_examples + examples)[:UNKNOWN_EXAMPLES]
        if locked:
            _sources_update(locked)
    for record in records:
        state = locked.get(record.source.pk)
        if state is not None:
            for name, value in state.items():
                setattr(record.source, name, value)


_RECORD_MODEL_FIELDS = [IngestSource._meta.get_field(name) for name in _RECORD_FIELDS]


def _sources_update(locked: dict[int, dict[str, Any]]) -> None:
    """Write the recorded fields of every locked source: on PostgreSQL one ``UPDATE ... FROM unnest(...)`` (one
    array per field: a group's 256 parameterised statements cost ~0.2 ms of Python each), elsewhere one
    parameterised UPDATE per source."""
    quote = connection.ops.quote_name
    table = quote(IngestSource._meta.db_table)
    fields = _RECORD_MODEL_FIELDS
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            arrays: list[list] = [list(locked)]
            for f in fields:
                values = [state[f.name] for state in locked.values()]
                arrays.append([json.dumps(value, cls=f.encoder) for value in values]
                              if f.get_internal_type() == "JSONField" else values)
            types = ["bigint"] + ["text" if f.get_internal_type() == "JSONField" else f.db_type(connection)
                                  for f in fields]
            cursor.execute(
                f"UPDATE {table} AS s SET "  # noqa: S608 - names from the model
                + ", ".join(f"{quote(f.column)} = v.{quote(f.column)}"
                            + ("::jsonb" if f.get_internal_type() == "JSONField" else "") for f in fields)
                + " FROM unnest(" + ", ".join(f"%s::{t}[]" for t in types) + ") AS v(id, "
                + ", ".join(quote(f.column) for f in fields) + ") WHERE s.id = v.id", arrays)
            return
        cursor.executemany(
            f"UPDATE {table} SET "  # noqa: S608 - names from the model
            + ", ".join(f"{quote(f.column)} = %s" for f in fields) + " WHERE id = %s",
            [[f.get_db_prep_save(state[f.name], connection) for f in fields] + [pk] for pk, state in locked.items()])


def source_record(*, source: IngestSource, now: dt.datetime, result: IngestResult | None = None,
                  error: str = "", duration_ms: int | None = None) -> None:
    """Record one ingest attempt on its source (see :func:`sources_record`)."""
    sources_record(records=[SourceRecord(source, result if result is not None else error, duration_ms)], now=now)
