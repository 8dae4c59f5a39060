"""The telemetry write path, behind one interface with two backends (:func:`get_store`).

**PostgreSQL: an append-only inbox, merged by a beat task.** :meth:`PostgresStore.write_samples` is ONE
binary COPY of the full rows (ts, gpu, gauges, counters, XID gauge, SRAM flag, source) into
``telemetry_inbox`` (a plain logged table: no index, no constraint), inside the caller's transaction: the
batch is durable when it commits, and a failed batch leaves nothing. :meth:`PostgresStore.merge`
(``services.telemetry_merge``; beat every 15 s, the rollup tick, the demo backfill) then, in one
transaction with the inbox locked (``ACCESS EXCLUSIVE``: an ingest COPY waits for the merge to end):

1. the daily partitions of the inbox's days exist (created on demand);
2. ``telemetry_merge`` (a temp table) gets every inbox row of a GPU that still exists, with, per counter,
   the value as of that row and the one before it (the last non-null value in the GPU's inbox rows ordered
   by time, else ``telemetry_gpulatest``: window functions for a GPU with several inbox rows, plain
   columns for one with a single row);
3. ``INSERT INTO telemetry_sample`` the eight gauge columns, ordered by (gpu, ts);
4. counter rows where a counter differs from its previous value (deltas, reset detection), XID events where
   the DCGM XID gauge changes to a non-zero value (the same gauge over many scrapes is one event);
5. ``telemetry_gpulatest`` from the LAST row of each GPU (UPDATE; INSERT for GPUs seen for the first time;
   a row older than the latest one does not move it);
6. ``TRUNCATE telemetry_inbox``.

**SQLite (embedded, small): the direct path.** :meth:`SqliteStore.write_samples` loads a staging table and
runs steps 3-5 at once, per round (the k-th sample of each GPU in the batch), so readers see a batch as soon
as it commits; :meth:`SqliteStore.merge` has nothing to do.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from django.db import connection, transaction

from telemetry.models import APPLICATION_XIDS
from telemetry.partitions import RAW_TABLES, partitions_ensure


class SampleRow(NamedTuple):
    """One mapped sample, in inbox column order (a plain tuple of the same shape will do)."""

    ts: dt.datetime
    gpu_id: int
    power_w: float | None
    throttle_mask: int | None
    gpu_temp_c: int | None
    mem_temp_c: int | None
    tlimit_c: int | None
    sm_clock_mhz: int | None
    ecc_sbe: int | None
    ecc_dbe: int | None
    remap_corr: int | None
    remap_unc: int | None
    remap_failure: bool | None
    pcie_replay: int | None
    sram_threshold: bool | None
    xid: int | None
    source_id: int | None = None  # the IngestSource (XID events name it)


INBOX_COLUMNS = SampleRow._fields
INBOX_TYPES = ("timestamptz", "int4", "float4", "int4", "int2", "int2", "int2", "int2", "int8", "int8", "int4",
               "int4", "bool", "int8", "bool", "int4", "int8")
STAGING_COLUMNS = (*INBOX_COLUMNS, "rnd")  # SQLite
GAUGES = ("power_w", "throttle_mask", "gpu_temp_c", "mem_temp_c", "tlimit_c", "sm_clock_mhz")
RAW_COLUMNS = ("ts", "gpu_id", *GAUGES)
RAW_TYPES = INBOX_TYPES[:8]
COUNTERS = ("ecc_sbe", "ecc_dbe", "remap_corr", "remap_unc", "pcie_replay")  # monotonic: deltas
FLAGS = ("remap_failure", "sram_threshold")  # booleans: a change writes a row, no delta
_HARDWARE_XID = f"{{t}}.xid NOT IN ({', '.join(str(x) for x in sorted(APPLICATION_XIDS))})"
_XID_INSERT = ("INSERT INTO telemetry_xidevent (gpu_id, at, xid, hardware, pid, process, message, source, "
               "ingest_source_id, line_key) ")
_LATEST_INSERT = ("INSERT INTO telemetry_gpulatest (gpu_id, ts, " + ", ".join(GAUGES + COUNTERS + FLAGS)
                  + ", last_xid, last_xid_at) ")
_DELTA = "CASE WHEN {new} IS NULL OR {old} IS NULL THEN 0 WHEN {new} < {old} THEN {new} ELSE {new} - {old} END"


@dataclass
class WriteResult:
    samples: int = 0
    counter_rows: int = 0
    xid_events: int = 0


@dataclass
class MergeResult:
    samples: int = 0  # inbox rows merged into the raw table
    counter_rows: int = 0
    xid_events: int = 0
    gpus: int = 0  # latest rows written
    deleted_gpus: int = 0  # inbox rows of GPUs deleted since they were ingested: dropped
    seconds: dict[str, float] = field(default_factory=dict)  # per step (the benchmark prints them)


class Store:
    def write_samples(self, rows: Sequence[Sequence], *, source_id: int | None = None) -> WriteResult:
        """Write one batch of :class:`SampleRow`-shaped rows. Call inside ``transaction.atomic()``; raises on
        any database error. ``source_id`` applies to rows that carry none."""
        raise NotImplementedError

    def merge(self) -> MergeResult:
        """Apply what :meth:`write_samples` left for later (its own transaction)."""
        return MergeResult()


# --- PostgreSQL: inbox + merge --------------------------------------------------------------------------------

_MERGE_DDL = (
    "CREATE TEMP TABLE IF NOT EXISTS telemetry_merge (ts timestamptz NOT NULL, gpu_id integer NOT NULL, "
    "power_w real, throttle_mask integer, gpu_temp_c smallint, mem_temp_c smallint, tlimit_c smallint, "
    "sm_clock_mhz smallint, source_id bigint, xid integer, known boolean NOT NULL, is_last boolean NOT NULL, "
    + ", ".join(f"{c} {t}, f_{c} {t}, p_{c} {t}" for c, t in (
        ("ecc_sbe", "bigint"), ("ecc_dbe", "bigint"), ("remap_corr", "integer"), ("remap_unc", "integer"),
        ("pcie_replay", "bigint"), ("remap_failure", "boolean"), ("sram_threshold", "boolean")))
    + ", f_xid integer, p_xid integer) ON COMMIT DELETE ROWS"
)
# "The last non-null value of c in the GPU's rows so far" in ONE pass (PostgreSQL 15 has no IGNORE NULLS):
# the running max of (time key * 2^63 + value), then the value back as the remainder. Every counter is
# < 2^62 (sample.COUNTER_MAX), flags are 0/1, and the key grows with ts within a GPU.
_K = "9223372036854775808::numeric"


def _last(column: str, cast: str, frame: str) -> str:
    value = f"i.{column}::int" if cast == "boolean" else f"i.{column}"
    last = f"(max(i.k + {value}) OVER {frame} % {_K})"
    latest = "l.last_xid" if column == "xid" else f"l.{column}"
    if cast == "boolean":
        return f"COALESCE({last}::int::boolean, {latest})"
    return f"COALESCE({last}::{cast}, {latest})"


_MERGE_TYPES = {"ecc_sbe": "bigint", "ecc_dbe": "bigint", "remap_corr": "integer", "remap_unc": "integer",
                "pcie_replay": "bigint", "remap_failure": "boolean", "sram_threshold": "boolean", "xid": "integer"}
_MERGE_COLUMNS = (*RAW_COLUMNS, "source_id", "xid", "known", "is_last",
                  *(f"{p}{c}" for c in COUNTERS + FLAGS for p in ("", "f_", "p_")), "f_xid", "p_xid")
_MERGE_FIRST = "SELECT " + ", ".join(f"i.{c}" for c in (*RAW_COLUMNS, "source_id", "xid")) + ", l.gpu_id IS NOT NULL, "
_MERGE_ALIVE = "EXISTS (SELECT 1 FROM inventory_gpu g WHERE g.id = i.gpu_id)"
# The window functions (their numeric arithmetic is most of the load's time) are needed only for a GPU with
# more than one inbox row; a GPU with one row (one scrape between merges: the usual case) gets the same values
# plainly: "as of this row" is the row's value else the latest, "before it" is the latest.
SQL_MERGE_LOAD = (
    f"INSERT INTO telemetry_merge ({', '.join(_MERGE_COLUMNS)}) "  # noqa: S608
    "WITH multi AS (SELECT gpu_id FROM telemetry_inbox GROUP BY gpu_id HAVING count(*) > 1) "
    "SELECT * FROM ("
    + _MERGE_FIRST + "true, "
    + ", ".join(f"i.{c}, COALESCE(i.{c}, l.{c}), l.{c}" for c in COUNTERS + FLAGS)
    + ", COALESCE(i.xid, l.last_xid), l.last_xid "
    "FROM telemetry_inbox i LEFT JOIN telemetry_gpulatest l ON l.gpu_id = i.gpu_id "
    f"WHERE {_MERGE_ALIVE} AND NOT EXISTS (SELECT 1 FROM multi WHERE multi.gpu_id = i.gpu_id) "
    "UNION ALL ("
    + _MERGE_FIRST + "lead(i.ts) OVER w IS NULL, "
    + ", ".join(f"i.{c}, {_last(c, _MERGE_TYPES[c], 'upto')}, {_last(c, _MERGE_TYPES[c], 'before')}"
                for c in COUNTERS + FLAGS)
    + f", {_last('xid', 'integer', 'upto')}, {_last('xid', 'integer', 'before')} "
    f"FROM (SELECT *, extract(epoch FROM ts) * 1000000 * {_K} AS k FROM telemetry_inbox "
    "WHERE gpu_id IN (SELECT gpu_id FROM multi)) i "
    f"LEFT JOIN telemetry_gpulatest l ON l.gpu_id = i.gpu_id WHERE {_MERGE_ALIVE} "
    "WINDOW w AS (PARTITION BY i.gpu_id ORDER BY i.ts), "
    "upto AS (w ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW), "
    "before AS (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING))"
    ") x ORDER BY gpu_id, ts"
)
# Rows keep the load's (gpu, ts) order: within one merge's pages a GPU's rows sit in a narrow gpu_id range,
# which the BRIN index on (ts, gpu_id) uses for per-GPU reads of raw data.
SQL_MERGE_RAW = (f"INSERT INTO telemetry_sample ({', '.join(RAW_COLUMNS)}) "  # noqa: S608
                 f"SELECT {', '.join(RAW_COLUMNS)} FROM telemetry_merge")
_MERGE_CHANGED = " OR ".join(f"({c} IS NOT NULL AND {c} IS DISTINCT FROM p_{c})" for c in COUNTERS + FLAGS)
# A counter lower than its previous value was reset (reboot, driver reload): the delta is the new value.
# The first value seen for a GPU is a baseline: delta 0. A counter missing from a sample is not a change.
SQL_MERGE_COUNTERS = (
    "INSERT INTO telemetry_counter (ts, gpu_id, " + ", ".join(COUNTERS + FLAGS) + ", "  # noqa: S608
    + ", ".join(f"d_{c}" for c in COUNTERS) + ") "
    "SELECT ts, gpu_id, " + ", ".join(f"f_{c}" for c in COUNTERS + FLAGS) + ", "
    + ", ".join(_DELTA.format(new=c, old=f"p_{c}") for c in COUNTERS)
    + f" FROM telemetry_merge WHERE {_MERGE_CHANGED}"
)
# The XID gauge holds the LAST xid: an event when it changes to a non-zero value, not on every scrape.
_MERGE_XID_NEW = "xid IS NOT NULL AND xid <> 0 AND xid IS DISTINCT FROM p_xid"
SQL_MERGE_XIDS = (
    _XID_INSERT
    + f"SELECT m.gpu_id, m.ts, m.xid, {_HARDWARE_XID.format(t='m')}, NULL, '', '', 'dcgm', s.id, NULL "
    "FROM telemetry_merge m LEFT JOIN telemetry_ingestsource s ON s.id = m.source_id "  # a source deleted since
    f"WHERE {_MERGE_XID_NEW}"
)
_LAST_XID_AT = f"(SELECT gpu_id, max(ts) AS at FROM telemetry_merge WHERE {_MERGE_XID_NEW} GROUP BY gpu_id)"
SQL_MERGE_LATEST_UPDATE = (
    "UPDATE telemetry_gpulatest AS l SET ts = m.ts, "  # noqa: S608
    + ", ".join(f"{c} = m.{c}" for c in GAUGES) + ", "
    + ", ".join(f"{c} = m.f_{c}" for c in COUNTERS + FLAGS) + ", "
    "last_xid = m.f_xid, last_xid_at = COALESCE(x.at, l.last_xid_at) "
    f"FROM telemetry_merge m LEFT JOIN {_LAST_XID_AT} x ON x.gpu_id = m.gpu_id "
    "WHERE m.gpu_id = l.gpu_id AND m.is_last AND m.known AND m.ts >= l.ts"
)
SQL_MERGE_LATEST_INSERT = (
    _LATEST_INSERT
    + "SELECT m.gpu_id, m.ts, " + ", ".join(f"m.{c}" for c in GAUGES) + ", "
    + ", ".join(f"m.f_{c}" for c in COUNTERS + FLAGS) + ", m.f_xid, x.at "
    f"FROM telemetry_merge m LEFT JOIN {_LAST_XID_AT} x ON x.gpu_id = m.gpu_id "
    "WHERE m.is_last AND NOT m.known ON CONFLICT (gpu_id) DO NOTHING"
)
MERGE_STEPS = (("load", SQL_MERGE_LOAD), ("raw", SQL_MERGE_RAW), ("counters", SQL_MERGE_COUNTERS),
               ("xids", SQL_MERGE_XIDS), ("latest_update", SQL_MERGE_LATEST_UPDATE),
               ("latest_insert", SQL_MERGE_LATEST_INSERT))
MERGE_LOCK_TIMEOUT = "30s"  # an ingest transaction holding the inbox longer than this: try again next tick


class PostgresStore(Store):
    def write_samples(self, rows: Sequence[Sequence], *, source_id: int | None = None) -> WriteResult:
        """ONE binary COPY into the inbox: the whole write stage of the ingest path."""
        if not rows:
            return WriteResult()
        with connection.cursor() as cursor, cursor.cursor.copy(
                f"COPY telemetry_inbox ({', '.join(INBOX_COLUMNS)}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(INBOX_TYPES)
            write_row = copy.write_row
            if source_id is None:
                for row in rows:
                    write_row(row)
            else:
                for row in rows:
                    write_row(row if len(row) > 16 and row[16] is not None else (*row[:16], source_id))
        return WriteResult(samples=len(rows))

    def merge(self) -> MergeResult:
        result = MergeResult()
        clock = time.perf_counter()

        def step(name: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            result.seconds[name] = now - clock
            clock = now

        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = '{MERGE_LOCK_TIMEOUT}'")
            cursor.execute("LOCK TABLE telemetry_inbox IN ACCESS EXCLUSIVE MODE")
            step("lock")
            cursor.execute("SELECT (ts AT TIME ZONE 'UTC')::date, count(*) FROM telemetry_inbox GROUP BY 1")
            days = dict(cursor.fetchall())
            rows = sum(days.values())
            if not rows:
                return result
            partitions_ensure(tables=RAW_TABLES, days=days)
            cursor.execute(_MERGE_DDL)
            cursor.execute("TRUNCATE telemetry_merge")  # rows of an earlier merge in this same transaction
            step("prepare")
            counts = {}
            for name, sql in MERGE_STEPS:
                cursor.execute(sql)
                counts[name] = max(cursor.rowcount, 0)
                step(name)
            cursor.execute("TRUNCATE telemetry_inbox")
            step("truncate")
        step("commit")
        result.samples, result.counter_rows, result.xid_events = counts["raw"], counts["counters"], counts["xids"]
        result.gpus = counts["latest_update"] + counts["latest_insert"]
        result.deleted_gpus = rows - counts["load"]
        return result


# --- SQLite: the direct path ----------------------------------------------------------------------------------

_STAGING_DDL = (
    "CREATE TEMP TABLE IF NOT EXISTS telemetry_staging (ts datetime NOT NULL, gpu_id integer NOT NULL, "
    "power_w real, throttle_mask integer, gpu_temp_c smallint, mem_temp_c smallint, tlimit_c smallint, "
    "sm_clock_mhz smallint, ecc_sbe bigint, ecc_dbe bigint, remap_corr integer, remap_unc integer, "
    "remap_failure boolean, pcie_replay bigint, sram_threshold boolean, xid integer, source_id bigint, "
    "rnd smallint NOT NULL)"
)
_CHANGED = " OR ".join(f"(s.{c} IS NOT NULL AND s.{c} IS DISTINCT FROM l.{c})" for c in COUNTERS + FLAGS)
SQL_COUNTERS = (
    "INSERT INTO telemetry_counter (ts, gpu_id, " + ", ".join(COUNTERS + FLAGS) + ", "  # noqa: S608
    + ", ".join(f"d_{c}" for c in COUNTERS) + ") "
    "SELECT s.ts, s.gpu_id, " + ", ".join(f"COALESCE(s.{c}, l.{c})" for c in COUNTERS + FLAGS) + ", "
    + ", ".join(_DELTA.format(new=f"s.{c}", old=f"l.{c}") for c in COUNTERS)
    + " FROM telemetry_staging s LEFT JOIN telemetry_gpulatest l ON l.gpu_id = s.gpu_id "
    f"WHERE s.rnd = %s AND ({_CHANGED})"
)
_XID_NEW = "s.xid IS NOT NULL AND s.xid <> 0 AND s.xid IS DISTINCT FROM l.last_xid"
SQL_XIDS = (
    _XID_INSERT
    + f"SELECT s.gpu_id, s.ts, s.xid, {_HARDWARE_XID.format(t='s')}, NULL, '', '', 'dcgm', s.source_id, NULL "
    "FROM telemetry_staging s LEFT JOIN telemetry_gpulatest l ON l.gpu_id = s.gpu_id "
    f"WHERE s.rnd = %s AND {_XID_NEW}"
)
SQL_LATEST_UPDATE = (
    "UPDATE telemetry_gpulatest AS l SET ts = s.ts, "  # noqa: S608
    + ", ".join(f"{c} = s.{c}" for c in GAUGES) + ", "
    + ", ".join(f"{c} = COALESCE(s.{c}, l.{c})" for c in COUNTERS + FLAGS) + ", "
    "last_xid = COALESCE(s.xid, l.last_xid), "
    f"last_xid_at = CASE WHEN {_XID_NEW} THEN s.ts ELSE l.last_xid_at END "
    "FROM telemetry_staging s WHERE s.gpu_id = l.gpu_id AND s.rnd = %s AND s.ts >= l.ts"
)
SQL_LATEST_INSERT = (
    _LATEST_INSERT
    + "SELECT s.gpu_id, s.ts, " + ", ".join(f"s.{c}" for c in GAUGES + COUNTERS + FLAGS)
    + ", s.xid, CASE WHEN s.xid IS NOT NULL AND s.xid <> 0 THEN s.ts END "
    "FROM telemetry_staging s WHERE s.rnd = %s "
    "AND NOT EXISTS (SELECT 1 FROM telemetry_gpulatest l WHERE l.gpu_id = s.gpu_id) "
    "ON CONFLICT (gpu_id) DO NOTHING"
)
SQL_RAW = (f"INSERT INTO telemetry_sample ({', '.join(RAW_COLUMNS)}) "  # noqa: S608
           f"SELECT {', '.join(RAW_COLUMNS)} FROM telemetry_staging")


def _ranked(rows: Sequence[Sequence], source_id: int | None) -> tuple[list[tuple], int]:
    """Rows sorted by (gpu, ts), 17 columns, with their rank within the GPU appended; and the number of rounds."""
    ordered = sorted(rows, key=lambda row: (row[1], row[0]))
    ranked, previous, rnd, rounds = [], None, 0, 1
    for row in ordered:
        rnd = rnd + 1 if row[1] == previous else 0
        previous = row[1]
        if rnd >= rounds:
            rounds = rnd + 1
        own = row[16] if len(row) > 16 else None
        ranked.append((*row[:16], own if own is not None else source_id, rnd))
    return ranked, rounds


class SqliteStore(Store):
    def write_samples(self, rows: Sequence[Sequence], *, source_id: int | None = None) -> WriteResult:
        result = WriteResult()
        if not rows:
            return result
        ranked, rounds = _ranked(rows, source_id)
        adapted: dict[dt.datetime, str] = {}  # a batch has few distinct timestamps: adapt each once

        def adapt(ts: dt.datetime) -> str:
            text = adapted.get(ts)
            if text is None:
                text = adapted[ts] = connection.ops.adapt_datetimefield_value(ts)
            return text
        with connection.cursor() as cursor:
            cursor.execute(_STAGING_DDL)
            cursor.execute("DELETE FROM telemetry_staging")
            cursor.executemany(
                f"INSERT INTO telemetry_staging ({', '.join(STAGING_COLUMNS)}) "  # noqa: S608
                f"VALUES ({', '.join(['%s'] * len(STAGING_COLUMNS))})",
                [(adapt(row[0]), *row[1:]) for row in ranked],
            )
            cursor.execute(SQL_RAW)
            result.samples = len(ranked)
            round_sizes = [0] * rounds
            for row in ranked:
                round_sizes[row[-1]] += 1
            for rnd in range(rounds):
                cursor.execute(SQL_COUNTERS, [rnd])
                result.counter_rows += max(cursor.rowcount, 0)
                cursor.execute(SQL_XIDS, [rnd])
                result.xid_events += max(cursor.rowcount, 0)
                cursor.execute(SQL_LATEST_UPDATE, [rnd])
                if cursor.rowcount != round_sizes[rnd]:  # GPUs seen for the first time (or late data)
                    cursor.execute(SQL_LATEST_INSERT, [rnd])
        return result


def get_store() -> Store:
    return PostgresStore() if connection.vendor == "postgresql" else SqliteStore()


def raw_copy(rows: Sequence[Sequence], *, table: str) -> None:
    """Binary COPY of 8-column raw rows into ``table`` (the benchmark's floor for the write stage)."""
    with connection.cursor() as cursor, cursor.cursor.copy(
            f"COPY {table} ({', '.join(RAW_COLUMNS)}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(RAW_TYPES)
        for row in rows:
            copy.write_row(row)
