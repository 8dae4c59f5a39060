"""Maintenance windows and change freezes: may a server's firmware be activated at a given moment?

Rules (docs/firmware.md): an enabled FREEZE window that covers the moment and the server's scope (everywhere,
its site, or one of its pools) always forbids activation, whatever allow window overlaps it: a freeze wins.
When the rollout's strategy requires a window, activation also needs an enabled ALLOW window covering the moment
and the scope (restricted to the strategy's ``window_ids`` when it names some). Staging needs no window.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from django.db.models import Q

from firmware.models import MaintenanceWindow, WindowKind


@dataclass(frozen=True)
class WindowVerdict:
    allowed: bool
    reason: str = ""
    retry_at: dt.datetime | None = None  # when it is worth asking again


def window_covers(window: MaintenanceWindow, at: dt.datetime) -> bool:
    """Whether ``window`` is open at ``at`` (aware). One-off: [starts_at, ends_at); weekly: ISO weekdays +
    start_time + duration in the window's time zone (a window may run past midnight)."""
    opening = window_next_opening(window, at)
    return opening is not None and opening[0] <= at


def window_next_opening(window: MaintenanceWindow, after: dt.datetime) -> tuple[dt.datetime, dt.datetime] | None:
    """(start, end) of ``window``'s first opening that ends after ``after`` (open now: its current one), None if
    none (a past one-off window; a weekly one looks 8 days ahead)."""
    if not window.enabled:
        return None
    if window.starts_at is not None and window.ends_at is not None:
        return (window.starts_at, window.ends_at) if window.ends_at > after else None
    if window.start_time is None or not window.duration_minutes:
        return None
    tz = ZoneInfo(window.timezone or "UTC")
    local = after.astimezone(tz)
    days = {int(d) for d in window.weekdays.split(",") if d.strip().isdigit()}
    length = dt.timedelta(minutes=window.duration_minutes)
    for offset in range(-(length.days + 1), 9):
        day = local.date() + dt.timedelta(days=offset)
        if day.isoweekday() not in days:
            continue
        start = dt.datetime.combine(day, window.start_time, tzinfo=tz)
        if start + length > after:
            return start, start + length
    return None


def windows_in_scope(*, site_id: int | None, pool_ids: Sequence[int]) -> list[MaintenanceWindow]:
    """Enabled windows that apply to a server of ``site_id`` in ``pool_ids`` (global ones included)."""
    scope = Q(site__isnull=True, pool__isnull=True)
    if site_id is not None:
        scope |= Q(site_id=site_id, pool__isnull=True)
    if pool_ids:
        scope |= Q(pool_id__in=list(pool_ids))
    return list(MaintenanceWindow.objects.filter(scope, enabled=True).order_by("kind", "id"))


def activation_allowed(*, at: dt.datetime, windows: Iterable[MaintenanceWindow], require_window: bool,
                       window_ids: Sequence[int] = ()) -> WindowVerdict:
    """The verdict for one moment given the windows in scope (``windows_in_scope``). Pure: tests call it."""
    windows = list(windows)
    for window in windows:
        if window.kind == WindowKind.FREEZE and window_covers(window, at):
            return WindowVerdict(False, f"change freeze '{window.name}'", at + dt.timedelta(minutes=5))
    if not require_window:
        return WindowVerdict(True)
    allow = [w for w in windows if w.kind == WindowKind.ALLOW and (not window_ids or w.pk in window_ids)]
    for window in allow:
        if window_covers(window, at):
            return WindowVerdict(True, f"in maintenance window '{window.name}'")
    return WindowVerdict(False, "outside every maintenance window", at + dt.timedelta(minutes=1))


def activation_allowed_for(*, at: dt.datetime, site_id: int | None, pool_ids: Sequence[int], require_window: bool,
                           window_ids: Sequence[int] = ()) -> WindowVerdict:
    """``activation_allowed`` with the windows read from the database for one server's scope."""
    return activation_allowed(at=at, windows=windows_in_scope(site_id=site_id, pool_ids=pool_ids),
                              require_window=require_window, window_ids=window_ids)
