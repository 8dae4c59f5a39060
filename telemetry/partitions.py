"""Daily partitions of the telemetry tables (PostgreSQL), and retention on both backends.

Raw tables (``telemetry_sample``, ``telemetry_counter``) keep FLEET_TELEMETRY_RAW_DAYS days, the 5-minute
rollups (``telemetry_rollup5m``, ``telemetry_rollupgroup5m``) FLEET_TELEMETRY_5M_DAYS. A partition is one UTC
day, ``<table>_pYYYYMMDD``. The beat task creates them ahead; a write for a day without one creates it on
demand. Expired days are DETACHed and DROPped: no bulk DELETE, no VACUUM debt. On SQLite (small, embedded)
retention is a DELETE.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from django.db import connection, transaction

RAW_TABLES = ("telemetry_sample", "telemetry_counter")
ROLLUP_TABLES = ("telemetry_rollup5m", "telemetry_rollupgroup5m")
TIME_COLUMN = {"telemetry_sample": "ts", "telemetry_counter": "ts", "telemetry_rollup5m": "bucket",
               "telemetry_rollupgroup5m": "bucket"}

# Partitions known to exist in this process (names); a miss asks the database (CREATE ... IF NOT EXISTS).
_known: set[str] = set()


def partition_name(table: str, day: dt.date) -> str:
    return f"{table}_p{day:%Y%m%d}"


def _postgres() -> bool:
    return connection.vendor == "postgresql"


def partitions_ensure(*, tables: Iterable[str], days: Iterable[dt.date]) -> list[str]:
    """Create the missing daily partitions of ``tables`` for ``days``; return the names created."""
    if not _postgres():
        return []
    created = []
    wanted = [(table, day, partition_name(table, day)) for table in tables for day in sorted(set(days))]
    with connection.cursor() as cursor:
        for table, day, name in wanted:
            if name in _known:
                continue
            cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
            if not cursor.fetchone()[0]:
                start = dt.datetime.combine(day, dt.time.min, tzinfo=dt.UTC)
                end = start + dt.timedelta(days=1)
                cursor.execute(f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF {table} "
                               f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')")
                created.append(name)
            # Remembered once committed: a rolled-back transaction takes its new partitions with it.
            transaction.on_commit(lambda name=name: _known.add(name))
    return created


def partitions_list(table: str) -> list[tuple[str, dt.date]]:
    """(name, day) of every daily partition of ``table``, oldest first."""
    if not _postgres():
        return []
    with connection.cursor() as cursor:
        cursor.execute("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                       "WHERE i.inhparent = %s::regclass", [table])
        names = [row[0] for row in cursor.fetchall()]
    days = []
    for name in names:
        suffix = name.rsplit("_p", 1)[-1]
        if len(suffix) == 8 and suffix.isdigit():
            days.append((name, dt.date(int(suffix[:4]), int(suffix[4:6]), int(suffix[6:]))))
    return sorted(days, key=lambda item: item[1])


def partitions_drop_expired(*, today: dt.date, raw_days: int, rollup_days: int) -> list[str]:
    """Drop (PostgreSQL: DETACH + DROP; SQLite: DELETE) the days that left the retention window.

    A day ``d`` is kept while ``d > today - keep_days``: with 14 raw days, today and the 13 days before.
    Returns the partitions dropped (on SQLite, the tables pruned).
    """
    dropped = []
    for tables, keep in ((RAW_TABLES, raw_days), (ROLLUP_TABLES, rollup_days)):
        if keep <= 0:
            continue
        first_kept = today - dt.timedelta(days=keep - 1)
        for table in tables:
            if not _postgres():
                cutoff = dt.datetime.combine(first_kept, dt.time.min, tzinfo=dt.UTC)
                with connection.cursor() as cursor:
                    cursor.execute(f"DELETE FROM {table} WHERE {TIME_COLUMN[table]} < %s",  # noqa: S608
                                   [connection.ops.adapt_datetimefield_value(cutoff)])
                    if cursor.rowcount:
                        dropped.append(table)
                continue
            for name, day in partitions_list(table):
                if day < first_kept:
                    with connection.cursor() as cursor:
                        cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {name}")
                        cursor.execute(f"DROP TABLE {name}")
                    _known.discard(name)
                    dropped.append(name)
    return dropped


def partitions_maintain(*, today: dt.date, ahead_days: int, raw_days: int, rollup_days: int) -> dict[str, list[str]]:
    """The beat task's work: partitions for today and ``ahead_days`` days ahead, expired ones dropped."""
    days = [today + dt.timedelta(days=n) for n in range(ahead_days + 1)]
    created = partitions_ensure(tables=RAW_TABLES + ROLLUP_TABLES, days=days)
    dropped = partitions_drop_expired(today=today, raw_days=raw_days, rollup_days=rollup_days)
    return {"created": created, "dropped": dropped}


def partitions_forget() -> None:
    """Forget the partitions this process knows (tests: a rolled-back transaction took them away)."""
    _known.clear()
