"""Writing seed rows given as tuples: PostgreSQL COPY, or ``bulk_create`` on other databases."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from django.db import connection, models

from fleet.models import AuditEvent
from inventory.models import FirmwareObservation, Gpu, GpuMove, GpuStateChange, Rack, Server


class Writer:
    """Inserts rows given as tuples: PostgreSQL COPY, or bulk_create elsewhere. Ids are reserved first,
    so parents and children are written without reading anything back."""

    def __init__(self) -> None:
        self.pg = connection.vendor == "postgresql"
        self.timings: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def lock(self) -> None:
        if self.pg:  # two seeders at once would both see an empty inventory
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(hashtext('fleet.seed_demo'))")

    def ids(self, model: type[models.Model], n: int) -> list[int]:
        table = model._meta.db_table
        with connection.cursor() as cur:
            if self.pg:
                cur.execute("SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
                            [table, n])
                return [r[0] for r in cur.fetchall()]
            cur.execute(f"SELECT COALESCE(MAX(id), 0) FROM {connection.ops.quote_name(table)}")  # noqa: S608
            start = cur.fetchone()[0] + 1
            return list(range(start, start + n))

    def write(self, model: type[models.Model], columns: Sequence[str], rows: Iterable[tuple]) -> None:
        """Insert ``rows`` (tuples in ``columns`` order, attnames). ``rows`` may be a generator, but one that
        never queries: on PostgreSQL the COPY holds the connection, and a query inside it waits forever."""
        started = time.perf_counter()
        table = model._meta.db_table
        fields = [model._meta.get_field(c) for c in columns]
        json_cols = [i for i, f in enumerate(fields) if isinstance(f, models.JSONField)]
        count = 0
        if self.pg:
            from psycopg.types.json import Jsonb

            names = ", ".join(connection.ops.quote_name(f.column) for f in fields)
            with connection.cursor() as cur, cur.cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                for row in rows:
                    if json_cols:
                        row = list(row)
                        for i in json_cols:
                            row[i] = Jsonb(row[i])
                    copy.write_row(row)
                    count += 1
        else:
            batch: list[models.Model] = []
            for row in rows:
                batch.append(model(**dict(zip(columns, row, strict=True))))
                if len(batch) >= 2000:
                    model.objects.bulk_create(batch)
                    count, batch = count + len(batch), []
            model.objects.bulk_create(batch)
            count += len(batch)
        self.counts[table] = self.counts.get(table, 0) + count
        self.timings[f"write {table}"] = self.timings.get(f"write {table}", 0) + time.perf_counter() - started

    def analyze(self) -> None:
        """Fresh planner statistics, so the first list page after a seed uses the right indexes."""
        started = time.perf_counter()
        tables = [m._meta.db_table for m in (Gpu, Server, Rack, FirmwareObservation, GpuStateChange, GpuMove,
                                             AuditEvent)]
        with connection.cursor() as cur:
            if self.pg:
                cur.execute(f"ANALYZE {', '.join(tables)}")
            else:
                cur.execute("ANALYZE")
        self.timings["analyze"] = time.perf_counter() - started
