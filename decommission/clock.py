"""One clock for decisions: leases, settle periods, boot graces and deadlines are computed on the database's clock,
never on a worker's ``timezone.now()`` (a worker whose clock is off would reconcile early and send again). BMC
times are only compared with earlier readings of the same BMC (``decommission.evidence``)."""

from __future__ import annotations

import datetime as dt

from django.db.models import DateTimeField, ExpressionWrapper
from django.db.models.functions import Now

from fleet.clock import db_now


def db_in(seconds: float) -> ExpressionWrapper:
    """``now + seconds`` evaluated by the database inside the statement that writes it."""
    return ExpressionWrapper(Now() + dt.timedelta(seconds=seconds), output_field=DateTimeField())


__all__ = ["db_in", "db_now"]
