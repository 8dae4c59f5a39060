"""The engine's one clock: the database's.

Leases, settle periods, deadlines and ``next_run_at`` are compared by several worker processes, whose own clocks
may be off (a worker 30 s fast would reconcile early and lease targets before they are due). So every time the
engine writes or compares is the database's: ``now()`` reads ``clock_timestamp()`` at most every
``REREAD_SECONDS`` per process and runs on the process's monotonic clock in between (a difference of monotonic
readings is exact within one process, whatever its wall clock says). SQLite (one process) uses the process's
clock. BMC times are never compared with this clock: only with earlier readings of the same BMC (reconcile.py).
"""

from __future__ import annotations

import datetime as dt
import threading
import time

from fleet.clock import db_now

REREAD_SECONDS = 10.0
_lock = threading.Lock()
_base: tuple[dt.datetime, float] | None = None  # (database clock, monotonic clock) read together


def now() -> dt.datetime:
    """The database's clock, read at most every REREAD_SECONDS, advanced by this process's monotonic clock."""
    global _base
    mono = time.monotonic()
    with _lock:
        base = _base
    if base is None or mono - base[1] >= REREAD_SECONDS:
        reading = db_now()
        base = (reading, time.monotonic())
        with _lock:
            _base = base
        return reading
    return base[0] + dt.timedelta(seconds=mono - base[1])


def since(moment: dt.datetime | None) -> float:
    """Seconds from ``moment`` (a time the engine wrote on the database's clock) to now; inf for None."""
    if moment is None:
        return float("inf")
    return (now() - moment).total_seconds()


def forget() -> None:
    """Drop the cached reading (tests that move the database's clock)."""
    global _base
    with _lock:
        _base = None


__all__ = ["REREAD_SECONDS", "db_now", "forget", "now", "since"]
