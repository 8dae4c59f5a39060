"""Compact history in the embedded store: one row per GPU and UTC day (``telemetry_sampleday``).

Raw samples older than ``FLEET_TELEMETRY_COMPACT_AFTER_DAYS`` are read per day, a range of GPUs at a time,
encoded per GPU into one blob and the day's raw rows dropped (PostgreSQL: ``TRUNCATE`` of the day's partition,
in the same transaction as the writes: a crash leaves the raw day whole). Charts (:func:`raw_history`), rollups
(:func:`expand`, read by ``rollup.rollup_5m``) and through the rollups health read compacted and raw history alike.

**Codec, version 1** (the blob's first byte; a reader refuses a version it does not know):
``<B version><I n>`` then length-prefixed (``<I``) parts, each a ``pcodec`` chunk:

- timestamps in milliseconds (Prometheus's precision), delta-of-delta (``DeltaSpec.try_consecutive(2)``): a
  steady 30 s scrape costs almost nothing;
- per gauge column, the values quantised as the sources report them: whole degrees C and MHz, the throttle
  bitmask as an integer, power in deci-watts (NVML reads milliwatts, its accuracy is +-5 W: 0.1 W loses nothing
  real); pcodec picks delta order (0 for noise around a level, 1 for a drift); a null is its own bitmap part
  (``numpy.packbits``), empty when the column has none.

PostgreSQL's TOAST has no numeric model (pglz or lz4, see the design notes); a pcodec chunk of 2,880 values is
near the values' entropy. ``data`` is ``STORAGE EXTERNAL``: TOAST does not try to compress it again.
"""

from __future__ import annotations

import datetime as dt
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from pcodec import ChunkConfig, DeltaSpec, standalone

from telemetry.partitions import partition_name

VERSION = 1
COLUMNS = ("power_w", "throttle_mask", "gpu_temp_c", "mem_temp_c", "tlimit_c", "sm_clock_mhz")  # the raw gauges
SCALE = {"power_w": 10}  # stored as integers: power in deci-watts
NULL = -(2**31)  # a null in the SQL the compactor reads (never a real value: every gauge is range-checked)
GPU_RANGE = 2_000  # GPUs read per statement while compacting a day
_TS_CONFIG = ChunkConfig(delta_spec=DeltaSpec.try_consecutive(2))
_VALUE_CONFIG = ChunkConfig()  # pcodec chooses the delta order per column


class CodecError(ValueError):
    pass


def encode(ts_ms: np.ndarray, columns: dict[str, np.ndarray]) -> bytes:
    """One GPU-day: ``ts_ms`` (int64 milliseconds, ascending) and per :data:`COLUMNS` an int64 array of the
    quantised values with :data:`NULL` for a missing one."""
    n = len(ts_ms)
    parts = [standalone.simple_compress(np.ascontiguousarray(ts_ms, dtype=np.int64), _TS_CONFIG)]
    for name in COLUMNS:
        values = np.asarray(columns[name], dtype=np.int64)
        nulls = values == NULL
        if nulls.any():
            mask = np.packbits(nulls).tobytes()
            values = np.where(nulls, 0, values)
        else:
            mask = b""
        parts.append(mask)
        parts.append(standalone.simple_compress(np.ascontiguousarray(values, dtype=np.int32), _VALUE_CONFIG))
    return struct.pack("<BI", VERSION, n) + b"".join(struct.pack("<I", len(p)) + p for p in parts)


def decode(blob: bytes) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(timestamps in ms, {column: float64 values, NaN where null, power in W}) of one blob."""
    blob = bytes(blob)
    version, n = struct.unpack_from("<BI", blob)
    if version != VERSION:
        raise CodecError(f"telemetry_sampleday codec version {version} is not known to this Fleet (knows {VERSION})")
    offset, parts = 5, []
    while offset < len(blob):
        (size,) = struct.unpack_from("<I", blob, offset)
        parts.append(blob[offset + 4:offset + 4 + size])
        offset += 4 + size
    ts = standalone.simple_decompress(parts[0]) if n else np.zeros(0, dtype=np.int64)
    columns = {}
    for k, name in enumerate(COLUMNS):
        mask, packed = parts[1 + 2 * k], parts[2 + 2 * k]
        values = (standalone.simple_decompress(packed) if n else np.zeros(0, dtype=np.int32)).astype(np.float64)
        if mask:
            values[np.unpackbits(np.frombuffer(mask, dtype=np.uint8), count=n).astype(bool)] = np.nan
        if name in SCALE:
            values /= SCALE[name]
        columns[name] = values
    return ts, columns


def _utc_day_bounds(day: dt.date) -> tuple[dt.datetime, dt.datetime]:
    start = dt.datetime.combine(day, dt.time.min, tzinfo=dt.UTC)
    return start, start + dt.timedelta(days=1)


def _quantised() -> list[str]:
    """Per column, the SQL of its quantised integer value (NULL as :data:`NULL`)."""
    out = []
    for name in COLUMNS:
        scaled = f"round({name} * {SCALE[name]})" if name in SCALE else name
        out.append(f"COALESCE(CAST({scaled} AS integer), {NULL})")
    return out


@dataclass
class CompactResult:
    days: list[dt.date] = field(default_factory=list)
    gpu_days: int = 0
    samples: int = 0
    seconds: float = 0.0


def _read_postgres(cursor: Any, day: dt.date, low: int, high: int) -> Iterable[tuple[int, Any, list]]:
    """Per GPU of the range, its day as one big-endian byte string per column (``string_agg`` of ``int8send`` /
    ``int4send`` over the rows sorted by (gpu, ts); nulls made :data:`NULL` in SQL): no Python object per value.
    An ``ORDER BY`` inside each aggregate sorted every GPU's rows seven times (3x slower); the sorted input is
    what GroupAggregate reads in order, and the order is checked here anyway (a stable argsort if it is not)."""
    start, end = _utc_day_bounds(day)
    columns = ", ".join(f"string_agg(int4send({q}), ''::bytea)" for q in _quantised())
    cursor.execute(
        "SELECT gpu_id, string_agg(int8send(round(date_part('epoch', ts) * 1000)::int8), ''::bytea), "  # noqa: S608
        f"{columns} FROM (SELECT * FROM telemetry_sample WHERE ts >= %s AND ts < %s AND gpu_id >= %s "
        "AND gpu_id < %s ORDER BY gpu_id, ts) s GROUP BY gpu_id", [start, end, low, high])
    for row in cursor.fetchall():
        ts = np.frombuffer(row[1], dtype=">i8").astype(np.int64)
        cols = [np.frombuffer(c, dtype=">i4").astype(np.int64) for c in row[2:]]
        if len(ts) > 1 and (np.diff(ts) < 0).any():
            order = np.argsort(ts, kind="stable")
            ts, cols = ts[order], [c[order] for c in cols]
        yield row[0], ts, cols


def _read_sqlite(cursor: Any, day: dt.date, low: int, high: int) -> Iterable[tuple[int, list, list[list]]]:
    start, end = (connection.ops.adapt_datetimefield_value(v) for v in _utc_day_bounds(day))
    cursor.execute(f"SELECT gpu_id, CAST(round((julianday(ts) - 2440587.5) * 86400000) AS integer), "  # noqa: S608
                   f"{', '.join(_quantised())} FROM telemetry_sample WHERE ts >= %s AND ts < %s AND gpu_id >= %s "
                   "AND gpu_id < %s ORDER BY gpu_id, ts", [start, end, low, high])
    current, ts, cols = None, [], []
    for row in cursor.fetchall():
        if row[0] != current:
            if current is not None:
                yield current, ts, cols
            current, ts, cols = row[0], [], [[] for _ in COLUMNS]
        ts.append(row[1])
        for k in range(len(COLUMNS)):
            cols[k].append(row[2 + k])
    if current is not None:
        yield current, ts, cols


def _combine(old: bytes, ts: np.ndarray, cols: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """A day compacted before and late raw rows of it: one sorted series again."""
    old_ts, old_cols = decode(old)
    merged_ts = np.concatenate([old_ts, ts])
    order = np.argsort(merged_ts, kind="stable")
    out = []
    for k, name in enumerate(COLUMNS):
        back = old_cols[name] * SCALE.get(name, 1)
        back = np.where(np.isnan(back), NULL, np.round(back)).astype(np.int64)
        out.append(np.concatenate([back, cols[k]])[order])
    return merged_ts[order], out


def compact_day(day: dt.date) -> CompactResult:
    """Compact every GPU's raw samples of ``day`` (UTC) into ``telemetry_sampleday`` and drop the raw rows; one
    transaction. Idempotent: a day with no raw rows left writes nothing; late rows of a compacted day are merged
    into its blob."""
    result = CompactResult(days=[day])
    clock = time.perf_counter()
    postgres = connection.vendor == "postgresql"
    read = _read_postgres if postgres else _read_sqlite
    with transaction.atomic(), connection.cursor() as cursor:
        start, end = _utc_day_bounds(day)
        bounds = [connection.ops.adapt_datetimefield_value(v) for v in (start, end)]
        cursor.execute("SELECT 1 FROM telemetry_sample WHERE ts >= %s AND ts < %s LIMIT 1", bounds)
        if cursor.fetchone() is None:
            return result
        # GPU ids only grow and the merge writes rows of existing GPUs only: ids 0..max(id) of the inventory
        # cover every row of the day (a min/max over the raw day would read all of it once more).
        cursor.execute("SELECT COALESCE(max(id), 0) FROM inventory_gpu")
        low, high = 0, cursor.fetchone()[0]
        if postgres:
            # Fresh statistics and memory for the per-GPU sorts: with a day just loaded (estimates of a few rows)
            # the planner sorted a range on disk and took 15x longer.
            cursor.execute("SET LOCAL work_mem = '256MB'")
            cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [partition_name("telemetry_sample", day)])
            if cursor.fetchone()[0]:
                cursor.execute(f"ANALYZE {partition_name('telemetry_sample', day)}")
        for first in range(low, high + 1, GPU_RANGE):
            rows = []
            for gpu_id, ts, cols in read(cursor, day, first, first + GPU_RANGE):
                rows.append((gpu_id, np.asarray(ts, dtype=np.int64), [np.asarray(c, dtype=np.int64) for c in cols]))
            if not rows:
                continue
            cursor.execute("SELECT gpu_id, data FROM telemetry_sampleday WHERE day = %s AND gpu_id >= %s "
                           "AND gpu_id < %s", [day, first, first + GPU_RANGE])
            before = {gpu_id: bytes(data) for gpu_id, data in cursor.fetchall()}
            out = []
            for gpu_id, ts, cols in rows:
                if gpu_id in before:
                    ts, cols = _combine(before[gpu_id], ts, cols)
                out.append((gpu_id, day, len(ts), encode(ts, dict(zip(COLUMNS, cols, strict=True)))))
                result.samples += len(ts)
            merged = [(day, gpu_id) for gpu_id, _, _ in rows if gpu_id in before]
            if merged:
                cursor.executemany("DELETE FROM telemetry_sampleday WHERE day = %s AND gpu_id = %s", merged)
            _write(cursor, out, postgres)
            result.gpu_days += len(rows)
        if postgres:
            cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [partition_name("telemetry_sample", day)])
            if cursor.fetchone()[0]:
                cursor.execute(f"TRUNCATE {partition_name('telemetry_sample', day)}")
            else:
                cursor.execute("DELETE FROM telemetry_sample WHERE ts >= %s AND ts < %s", bounds)
        else:
            cursor.execute("DELETE FROM telemetry_sample WHERE ts >= %s AND ts < %s", bounds)
    result.seconds = time.perf_counter() - clock
    return result


def _write(cursor: Any, rows: list[tuple[int, dt.date, int, bytes]], postgres: bool) -> None:
    if postgres:
        with cursor.cursor.copy("COPY telemetry_sampleday (gpu_id, day, n, data) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "date", "int4", "bytea"])  # gpu_id: the GPU's bigint key
            for row in rows:
                copy.write_row(row)
    else:
        cursor.executemany("INSERT INTO telemetry_sampleday (gpu_id, day, n, data) VALUES (%s, %s, %s, %s)", rows)


def compact_due(*, now: dt.datetime | None = None, after_days: int | None = None) -> CompactResult:
    """Compact every day older than ``after_days`` (``FLEET_TELEMETRY_COMPACT_AFTER_DAYS``) that still has raw
    rows (the beat task). A day ``d`` is due once ``d < today - after_days``."""
    now = now or dt.datetime.now(tz=dt.UTC)
    after_days = settings.FLEET_TELEMETRY_COMPACT_AFTER_DAYS if after_days is None else after_days
    cutoff = dt.datetime.combine(now.astimezone(dt.UTC).date() - dt.timedelta(days=after_days), dt.time.min,
                                 tzinfo=dt.UTC)
    total = CompactResult()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT DISTINCT (ts AT TIME ZONE 'UTC')::date FROM telemetry_sample WHERE ts < %s",
                           [cutoff])
        else:
            cursor.execute("SELECT DISTINCT date(ts) FROM telemetry_sample WHERE ts < %s",
                           [connection.ops.adapt_datetimefield_value(cutoff)])
        days = sorted(d if isinstance(d, dt.date) else dt.date.fromisoformat(d) for (d,) in cursor.fetchall())
    for day in days:
        done = compact_day(day)
        total.days.append(day)
        total.gpu_days += done.gpu_days
        total.samples += done.samples
        total.seconds += done.seconds
    return total


# --- reads -------------------------------------------------------------------------------------------------------


def _days(start: dt.datetime, end: dt.datetime) -> tuple[dt.date, dt.date]:
    return start.astimezone(dt.UTC).date(), (end - dt.timedelta(microseconds=1)).astimezone(dt.UTC).date()


def compacted(*, gpu_id: int | None, start: dt.datetime, end: dt.datetime) -> list[tuple[int, np.ndarray, dict]]:
    """(gpu id, timestamps in ms, columns) of the compacted days overlapping [start, end), cut to the range."""
    first, last = _days(start, end)
    sql = "SELECT gpu_id, data FROM telemetry_sampleday WHERE day >= %s AND day <= %s"
    params: list[Any] = [first, last]
    if gpu_id is not None:
        sql += " AND gpu_id = %s"
        params.append(gpu_id)
    with connection.cursor() as cursor:
        cursor.execute(sql + " ORDER BY gpu_id, day", params)
        rows = cursor.fetchall()
    lo, hi = start.timestamp() * 1000, end.timestamp() * 1000
    out = []
    for gid, data in rows:
        ts, cols = decode(data)
        keep = (ts >= lo) & (ts < hi)
        if keep.any():
            out.append((gid, ts[keep], {name: values[keep] for name, values in cols.items()}))
    return out


def has_compacted(start: dt.datetime, end: dt.datetime) -> bool:
    first, last = _days(start, end)
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM telemetry_sampleday WHERE day >= %s AND day <= %s LIMIT 1", [first, last])
        return cursor.fetchone() is not None


def raw_history(*, gpu_id: int, column: str, start: dt.datetime, end: dt.datetime
                ) -> list[tuple[dt.datetime, float | None, float | None, float | None]]:
    """Single samples (min = avg = max) of one raw column expression for one GPU: raw rows and compacted days."""
    params = [connection.ops.adapt_datetimefield_value(value) for value in (start, end)]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT ts, {column} FROM telemetry_sample WHERE gpu_id = %s AND ts >= %s AND ts < %s",  # noqa: S608
                       [gpu_id, *params])
        rows = cursor.fetchall()
    points = []
    for ts, v in rows:
        if isinstance(ts, str):
            ts = dt.datetime.fromisoformat(ts)
        ts = ts if ts.tzinfo else ts.replace(tzinfo=dt.UTC)
        points.append((ts, None if v is None else float(v)))
    for _, ts_ms, cols in compacted(gpu_id=gpu_id, start=start, end=end):
        values = _column_values(column, cols)
        points += [(dt.datetime.fromtimestamp(t / 1000, tz=dt.UTC), None if np.isnan(v) else float(v))
                   for t, v in zip(ts_ms.tolist(), values.tolist(), strict=True)]
    points.sort(key=lambda p: p[0])
    return [(t, v, v, v) for t, v in points]


def _column_values(column: str, cols: dict[str, np.ndarray]) -> np.ndarray:
    if column in cols:
        return cols[column]
    from telemetry.dcgm import THROTTLE_HW_MASK  # the throttle expression of selectors: a hardware reason

    mask = cols["throttle_mask"]
    hw = np.where(np.isnan(mask), 0, mask).astype(np.int64) & THROTTLE_HW_MASK
    return np.where(np.isnan(mask), np.nan, (hw != 0).astype(np.float64))


EXPANDED = "telemetry_sample_expanded"


def expand(start: dt.datetime, end: dt.datetime) -> bool:
    """Fill a temporary table shaped like ``telemetry_sample`` with the compacted samples in [start, end), for the
    rollups to read beside the raw table. False (and no table) when no compacted day overlaps."""
    if not has_compacted(start, end):
        return False
    rows = []
    for gpu_id, ts_ms, cols in compacted(gpu_id=None, start=start, end=end):
        stamps = [dt.datetime.fromtimestamp(t / 1000, tz=dt.UTC) for t in ts_ms.tolist()]
        lists = [[None if np.isnan(v) else (float(v) if name == "power_w" else int(v)) for v in cols[name].tolist()]
                 for name in COLUMNS]
        rows += [(stamp, gpu_id, *values) for stamp, *values in zip(stamps, *lists, strict=True)]
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {EXPANDED}")
        cursor.execute(f"CREATE TEMP TABLE {EXPANDED} AS SELECT ts, gpu_id, {', '.join(COLUMNS)} "  # noqa: S608
                       "FROM telemetry_sample WHERE false")
        if connection.vendor == "postgresql":
            with cursor.cursor.copy(f"COPY {EXPANDED} (ts, gpu_id, {', '.join(COLUMNS)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            cursor.executemany(f"INSERT INTO {EXPANDED} VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",  # noqa: S608
                               [(connection.ops.adapt_datetimefield_value(r[0]), *r[1:]) for r in rows])
    return True


def storage(*, table: str = "telemetry_sampleday") -> dict[str, int]:
    """All-in bytes (heap + TOAST + indexes) and values stored (samples x gauge columns): PostgreSQL only."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT pg_total_relation_size(%s), COALESCE((SELECT sum(n) FROM {table}), 0)",  # noqa: S608
                       [table])
        size, samples = cursor.fetchone()
    return {"bytes": int(size), "samples": int(samples), "values": int(samples) * len(COLUMNS)}
