"""The telemetry write path: one batch of mapped samples into the raw tables, counter changes, XID gauge
events and the latest-value table, set-based, inside the caller's transaction.

One interface, two backends (:func:`get_store`): PostgreSQL (binary COPY into a temp staging table, then
set-based SQL) and SQLite (``executemany`` into the same staging table, then the same SQL). Both run
exactly the same statements after the staging load; only the load and the partitions differ.

Steps for a batch (the caller holds ``transaction.atomic``: a failure anywhere writes nothing):

1. the daily partitions of the batch's days exist (created on demand);
2. the rows, sorted by (gpu, ts), go into ``telemetry_staging`` with ``rnd`` = the sample's rank within
   its GPU (0 for the first sample of each GPU in the batch: a scrape has one sample per GPU, so one round);
3. ``INSERT INTO telemetry_sample SELECT`` the eight gauge columns;
4. per round: counter rows for the GPUs whose counters differ from ``telemetry_gpulatest`` (with deltas and
   reset detection), XID events where the DCGM XID gauge changed to a non-zero value, then the latest row
   (UPDATE; INSERT for GPUs seen for the first time).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from django.db import connection

from inventory.telemetry.models import APPLICATION_XIDS
from inventory.telemetry.partitions import RAW_TABLES, partitions_ensure


class SampleRow(NamedTuple):
    """One mapped sample, in staging column order (``rnd`` is added by the store)."""

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


STAGING_COLUMNS = (*SampleRow._fields, "rnd")
STAGING_TYPES = ("timestamptz", "int4", "float4", "int4", "int2", "int2", "int2", "int2", "int8", "int8", "int4",
                 "int4", "bool", "int8", "bool", "int4", "int2")
GAUGES = ("power_w", "throttle_mask", "gpu_temp_c", "mem_temp_c", "tlimit_c", "sm_clock_mhz")
RAW_COLUMNS = ("ts", "gpu_id", *GAUGES)
COUNTERS = ("ecc_sbe", "ecc_dbe", "remap_corr", "remap_unc", "pcie_replay")  # monotonic: deltas
FLAGS = ("remap_failure", "sram_threshold")  # booleans: a change writes a row, no delta

_STAGING_DDL = (
    "CREATE TEMP TABLE IF NOT EXISTS telemetry_staging (ts {ts} NOT NULL, gpu_id integer NOT NULL, power_w real, "
    "throttle_mask integer, gpu_temp_c smallint, mem_temp_c smallint, tlimit_c smallint, sm_clock_mhz smallint, "
    "ecc_sbe bigint, ecc_dbe bigint, remap_corr integer, remap_unc integer, remap_failure boolean, "
    "pcie_replay bigint, sram_threshold boolean, xid integer, rnd smallint NOT NULL){on_commit}"
)

_HARDWARE = f"s.xid NOT IN ({', '.join(str(x) for x in sorted(APPLICATION_XIDS))})"
_CHANGED = " OR ".join(f"(s.{c} IS NOT NULL AND s.{c} IS DISTINCT FROM l.{c})" for c in COUNTERS + FLAGS)
# A counter lower than its previous value was reset (reboot, driver reload): the delta is the new value.
# The first value seen for a GPU is a baseline: delta 0.
_DELTA = ("CASE WHEN s.{c} IS NULL OR l.{c} IS NULL THEN 0 WHEN s.{c} < l.{c} THEN s.{c} "
          "ELSE s.{c} - l.{c} END")
SQL_COUNTERS = (
    "INSERT INTO telemetry_counter (ts, gpu_id, " + ", ".join(COUNTERS + FLAGS) + ", "
    + ", ".join(f"d_{c}" for c in COUNTERS) + ") "
    "SELECT s.ts, s.gpu_id, " + ", ".join(f"COALESCE(s.{c}, l.{c})" for c in COUNTERS + FLAGS) + ", "
    + ", ".join(_DELTA.format(c=c) for c in COUNTERS)
    + " FROM telemetry_staging s LEFT JOIN telemetry_gpulatest l ON l.gpu_id = s.gpu_id "
    f"WHERE s.rnd = %s AND ({_CHANGED})"
)
# The XID gauge holds the LAST xid: an event when it changes to a non-zero value, not on every scrape.
_XID_NEW = "s.xid IS NOT NULL AND s.xid <> 0 AND s.xid IS DISTINCT FROM l.last_xid"
SQL_XIDS = (
    "INSERT INTO telemetry_xidevent (gpu_id, at, xid, hardware, pid, process, message, source, "
    "ingest_source_id, line_key) "
    f"SELECT s.gpu_id, s.ts, s.xid, {_HARDWARE}, NULL, '', '', 'dcgm', %s, NULL "
    "FROM telemetry_staging s LEFT JOIN telemetry_gpulatest l ON l.gpu_id = s.gpu_id "
    f"WHERE s.rnd = %s AND {_XID_NEW}"
)
SQL_LATEST_UPDATE = (
    "UPDATE telemetry_gpulatest AS l SET ts = s.ts, "
    + ", ".join(f"{c} = s.{c}" for c in GAUGES) + ", "
    + ", ".join(f"{c} = COALESCE(s.{c}, l.{c})" for c in COUNTERS + FLAGS) + ", "
    "last_xid = COALESCE(s.xid, l.last_xid), "
    f"last_xid_at = CASE WHEN {_XID_NEW} THEN s.ts ELSE l.last_xid_at END "
    "FROM telemetry_staging s WHERE s.gpu_id = l.gpu_id AND s.rnd = %s AND s.ts >= l.ts"
)
SQL_LATEST_INSERT = (
    "INSERT INTO telemetry_gpulatest (gpu_id, ts, " + ", ".join(GAUGES + COUNTERS + FLAGS) + ", last_xid, last_xid_at) "
    "SELECT s.gpu_id, s.ts, " + ", ".join(f"s.{c}" for c in GAUGES + COUNTERS + FLAGS)
    + ", s.xid, CASE WHEN s.xid IS NOT NULL AND s.xid <> 0 THEN s.ts END "
    "FROM telemetry_staging s WHERE s.rnd = %s "
    "AND NOT EXISTS (SELECT 1 FROM telemetry_gpulatest l WHERE l.gpu_id = s.gpu_id) "
    "ON CONFLICT (gpu_id) DO NOTHING"
)
SQL_RAW = (f"INSERT INTO telemetry_sample ({', '.join(RAW_COLUMNS)}) "  # noqa: S608
           f"SELECT {', '.join(RAW_COLUMNS)} FROM telemetry_staging")


@dataclass
class WriteResult:
    samples: int = 0
    counter_rows: int = 0
    xid_events: int = 0


def _ranked(rows: Sequence[SampleRow]) -> tuple[list[tuple], int]:
    """Rows sorted by (gpu, ts) with their rank within the GPU appended; and the number of rounds.

    Sorting by GPU also clusters each batch's rows by gpu_id on disk, which the BRIN index on
    (ts, gpu_id) uses for per-GPU reads of raw data.
    """
    ordered = sorted(rows, key=lambda row: (row[1], row[0]))
    ranked, previous, rnd, rounds = [], None, 0, 1
    for row in ordered:
        rnd = rnd + 1 if row[1] == previous else 0
        previous = row[1]
        if rnd >= rounds:
            rounds = rnd + 1
        ranked.append((*row, rnd))
    return ranked, rounds


class Store:
    """Backend-neutral part: everything after the staging table is loaded."""

    on_commit = ""
    ts_type = "timestamptz"

    def _load_staging(self, cursor, ranked: list[tuple]) -> None:  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def write_samples(self, rows: Sequence[SampleRow], *, source_id: int | None = None) -> WriteResult:
        """Write one batch. Call inside ``transaction.atomic()``; raises on any database error."""
        result = WriteResult()
        if not rows:
            return result
        partitions_ensure(tables=RAW_TABLES, days={row[0].astimezone(dt.UTC).date() for row in rows})
        ranked, rounds = _ranked(rows)
        with connection.cursor() as cursor:
            cursor.execute(_STAGING_DDL.format(ts=self.ts_type, on_commit=self.on_commit))
            cursor.execute("DELETE FROM telemetry_staging" if connection.vendor != "postgresql"
                           else "TRUNCATE telemetry_staging")
            self._load_staging(cursor, ranked)
            cursor.execute(SQL_RAW)
            result.samples = len(ranked)
            round_sizes = [0] * rounds
            for row in ranked:
                round_sizes[row[-1]] += 1
            for rnd in range(rounds):
                cursor.execute(SQL_COUNTERS, [rnd])
                result.counter_rows += max(cursor.rowcount, 0)
                cursor.execute(SQL_XIDS, [source_id, rnd])
                result.xid_events += max(cursor.rowcount, 0)
                cursor.execute(SQL_LATEST_UPDATE, [rnd])
                if cursor.rowcount != round_sizes[rnd]:  # GPUs seen for the first time (or late data)
                    cursor.execute(SQL_LATEST_INSERT, [rnd])
        return result


class PostgresStore(Store):
    # Rows vanish at commit; the table stays for the connection's next batch (no catalog churn per batch).
    # PostgreSQL skips the truncation for transactions that never touched a temp table.
    on_commit = " ON COMMIT DELETE ROWS"

    def _load_staging(self, cursor, ranked: list[tuple]) -> None:  # type: ignore[no-untyped-def]
        with cursor.cursor.copy(f"COPY telemetry_staging ({', '.join(STAGING_COLUMNS)}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(STAGING_TYPES)
            write_row = copy.write_row
            for row in ranked:
                write_row(row)


class SqliteStore(Store):
    ts_type = "datetime"

    def _load_staging(self, cursor, ranked: list[tuple]) -> None:  # type: ignore[no-untyped-def]
        adapt = connection.ops.adapt_datetimefield_value
        cursor.executemany(
            f"INSERT INTO telemetry_staging ({', '.join(STAGING_COLUMNS)}) "
            f"VALUES ({', '.join(['%s'] * len(STAGING_COLUMNS))})",
            [(adapt(row[0]), *row[1:]) for row in ranked],
        )


def get_store() -> Store:
    return PostgresStore() if connection.vendor == "postgresql" else SqliteStore()


def raw_copy(rows: Sequence[Sequence], *, table: str) -> None:
    """Binary COPY of 8-column raw rows into ``table`` (the benchmark's floor for :meth:`Store.write_samples`)."""
    with connection.cursor() as cursor, cursor.cursor.copy(
            f"COPY {table} ({', '.join(RAW_COLUMNS)}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(STAGING_TYPES[:8])
        for row in rows:
            copy.write_row(row)
