"""What waits for an approver, across apps: each app registers a source (``approval_source_register`` in its
``AppConfig.ready``), the approvals page and the dashboard's panel list them, the navigation shows the count.

``fleet`` knows no app: a source is a function ``(user) -> list[Waiting]`` returning at most ``limit`` items.
Pages load the list and the count over htmx, so no page pays for it unless it shows it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SHOWN = 20


@dataclass(frozen=True)
class Waiting:
    kind: str  # "Rollout", "Baseline", "Order", "Decommission request"
    label: str
    url: str
    since: dt.datetime | dt.date | None = None
    by: str = ""  # who asked
    note: str = ""  # what the approver does ("approve", "validate the evidence")
    yours: bool = False  # the approver asked for it: a second person must approve


_SOURCES: dict[str, Callable[[Any, int], list[Waiting]]] = {}


def approval_source_register(kind: str, source: Callable[[Any, int], list[Waiting]]) -> None:
    _SOURCES[kind] = source


def approvals_for(user: Any, limit: int = SHOWN) -> dict[str, list[Waiting]]:
    """Per kind, what waits for an approver (``limit`` + 1 read, to tell "more")."""
    return {kind: source(user, limit + 1) for kind, source in sorted(_SOURCES.items())}


def approvals_count(user: Any) -> int:
    """Items an approver can act on (their own requests excluded: a second person approves those)."""
    return sum(1 for items in approvals_for(user, limit=99).values() for item in items if not item.yours)
