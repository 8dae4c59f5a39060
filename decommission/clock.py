"""One clock for decisions: leases, settle periods, boot graces and deadlines are computed on the database's clock,
never on a worker's ``timezone.now()`` (a worker whose clock is off would reconcile early and send again). BMC
times are only compared with earlier readings of the same BMC (``decommission.evidence``)."""

from __future__ import annotations

import datetime as dt

from django.db import connection
from django.db.models import DateTimeField, ExpressionWrapper
from django.db.models.functions import Now
from django.utils import timezone


def db_now() -> dt.datetime:
    """The database's current time (PostgreSQL ``clock_timestamp()``: real time, not the transaction's start)."""
    if connection.vendor != "postgresql":
        return timezone.now()  # SQLite runs in one process on one machine: its clock is the only one
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def db_in(seconds: float) -> ExpressionWrapper:
    """``now + seconds`` evaluated by the database inside the statement that writes it."""
    return ExpressionWrapper(Now() + dt.timedelta(seconds=seconds), output_field=DateTimeField())
