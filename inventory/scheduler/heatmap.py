"""The heatmap's "scheduler" layer: per GPU in a server, its node's state as beat's refresh last saw it
(``SchedulerNode``): idle, mixed, allocated, draining, drained, reserved, down or unknown; "not in the scheduler"
for a server no node matched; every GPU "no scheduler" when none is configured. Registered in
``InventoryConfig.ready`` (``inventory.heatmap_layers``); one statement, no scheduler call."""

from __future__ import annotations

import datetime as dt

from django.db import connection

from inventory.heatmap_layers import Category
from inventory.models import Gpu, SchedulerNode
from inventory.scheduler import configured
from inventory.scheduler.base import ALLOCATED, DOWN, DRAINED, DRAINING, IDLE, MIXED, RESERVED, UNKNOWN

# (state, label, colour, always in the legend); a state's code is its index.
_STATES = (
    (IDLE, "idle", "#78be82", True),
    (MIXED, "mixed", "#9ecae1", True),
    (ALLOCATED, "allocated", "#3182bd", True),
    (DRAINING, "draining", "#f0b43c", False),
    (DRAINED, "drained", "#e6550d", True),
    (RESERVED, "reserved", "#756bb1", False),
    (DOWN, "down", "#cf222e", True),
    (UNKNOWN, "unknown state", "#5d6b7a", False),
    ("", "not in the scheduler", "#aab4be", False),
    ("", "no scheduler", "#c4ccd4", False),
)
CODES = {state: code for code, (state, *_rest) in enumerate(_STATES) if state}
NOT_IN_SCHEDULER, NO_SCHEDULER = len(_STATES) - 2, len(_STATES) - 1
CATEGORIES = tuple(Category(label, color, always) for _, label, color, always in _STATES)


def scheduler_heatmap_values(at: dt.datetime | None = None) -> tuple[list[int], list[int | None]]:
    """(gpu ids, state codes) of every GPU in a server (now, whatever ``at``: no history of node states)."""
    gpu, node = Gpu._meta.db_table, SchedulerNode._meta.db_table
    if configured() is None:
        sql, params = f"SELECT g.id, %s FROM {gpu} g WHERE g.server_id IS NOT NULL", [NO_SCHEDULER]  # noqa: S608
    else:
        cases = " ".join("WHEN %s THEN %s" for _ in CODES)
        sql = (f"SELECT g.id, CASE WHEN n.id IS NULL THEN %s ELSE (CASE n.state {cases} ELSE %s END) END "  # noqa: S608
               f"FROM {gpu} g LEFT JOIN {node} n ON n.server_id = g.server_id WHERE g.server_id IS NOT NULL")
        params = [NOT_IN_SCHEDULER, *[x for pair in CODES.items() for x in pair], CODES[UNKNOWN]]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [r[0] for r in rows], [r[1] for r in rows]
