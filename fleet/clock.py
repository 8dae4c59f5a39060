"""The database's clock, the one clock every decision across workers uses (leases, settle periods, deadlines, the
times a drain was requested and sent). Workers' own clocks may be off (a worker 30 s fast would reconcile early,
or pass a drain deadline at once); the database is one clock for all of them. The rollout engine keeps a cached
reading of it (``firmware.services.engine.clock``); decommission and the scheduler holds read it per decision."""

from __future__ import annotations

import datetime as dt

from django.db import connection
from django.utils import timezone


def db_now() -> dt.datetime:
    """The database's current time (PostgreSQL ``clock_timestamp()``: real time, not the transaction's start).
    SQLite runs in one process on one machine: its clock is the only one."""
    if connection.vendor != "postgresql":
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]
