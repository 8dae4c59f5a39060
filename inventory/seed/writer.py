"""Writing seed rows given as tuples: PostgreSQL COPY, or ``bulk_create`` on other databases."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from django.db import connection, models

from fleet import bulk
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
        return bulk.reserve_ids(model, n)

    def write(self, model: type[models.Model], columns: Sequence[str], rows: Iterable[tuple]) -> None:
        """Insert ``rows`` (tuples in ``columns`` order, attnames), timed and counted per table."""
        started = time.perf_counter()
        table = model._meta.db_table
        self.counts[table] = self.counts.get(table, 0) + bulk.insert_values(model, columns, rows)
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
