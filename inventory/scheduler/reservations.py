"""Maintenance reservations Fleet asks the scheduler for (docs/scheduler.md), recorded side effects like drains:

- ``reservation_request(name=..., owner=..., owner_id=..., nodes=..., start=..., end=...)`` records one (flushed)
  before anything is sent; idempotent by name.
- ``reservations_send(reservations)`` creates each requested one (Slurm: ``scontrol create reservation``
  ``Flags=MAINT,IGNORE_JOBS``); creating a name the scheduler already has (a worker died after sending) is a
  success, so nothing is created twice. One that fails stays requested with the error as its note.
- ``reservations_end(reservations)`` records ``ending`` (flushed), then deletes it; deleting a name the scheduler no
  longer has is a success. One that was never created ends without a request.
- ``fleet_reserved_nodes(nodes)``: which of the nodes are in one of Fleet's open reservations. A node in the
  scheduler's "reserved" state is someone else's (a drain hold on it is foreign, never resumed) unless it is
  Fleet's own reservation.
Times are the database's (``fleet.clock``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence

from django.db import transaction

from fleet.clock import db_now
from fleet.execution import flushed, record_once
from inventory.models import ReservationState, SchedulerReservation
from inventory.models.scheduler import RESERVATION_OPEN
from inventory.scheduler import SchedulerError, configured


def reservation_request(*, name: str, owner: str, owner_id: int, nodes: Sequence[str], start: dt.datetime,
                        end: dt.datetime) -> SchedulerReservation:
    """Record (committed, flushed) the reservation before it is created; idempotent by name."""
    return record_once(SchedulerReservation, key={"name": name}, make=lambda: SchedulerReservation(
        name=name, owner=owner, owner_id=owner_id, nodes=sorted(set(nodes)), starts_at=start, ends_at=end,
        requested_at=db_now()))


def reservations_send(reservations: Iterable[SchedulerReservation]) -> int:
    """Create the requested reservations in the scheduler. Returns how many are created now."""
    sched = configured()
    if sched is None:
        return 0
    created = 0
    for reservation in reservations:
        if reservation.state != ReservationState.REQUESTED:
            continue
        now = db_now()
        start = max(reservation.starts_at, now)
        seconds = int((reservation.ends_at - start).total_seconds())
        if seconds <= 0:  # its window passed before it could be sent
            _set(reservation, ReservationState.ENDED, "its window passed before it was created", ended_at=now)
            continue
        try:
            sched.reserve(reservation.name, reservation.nodes, start, seconds)
        except SchedulerError as exc:
            _set(reservation, ReservationState.REQUESTED, f"not created yet: {exc}")
            continue
        _set(reservation, ReservationState.CREATED, "", created_at=now)
        created += 1
    return created


def reservations_end(reservations: Iterable[SchedulerReservation]) -> int:
    """Delete the reservations (their owner ended). Returns how many are ended now."""
    sched = configured()
    ending = [r for r in reservations if r.state in RESERVATION_OPEN]
    if sched is None or not ending:
        return 0
    with transaction.atomic():
        flushed()
        SchedulerReservation.objects.filter(pk__in=[r.pk for r in ending], state=ReservationState.CREATED).update(
            state=ReservationState.ENDING)
    ended = 0
    for reservation in SchedulerReservation.objects.filter(pk__in=[r.pk for r in ending]).order_by("id"):
        now = db_now()
        if reservation.state == ReservationState.REQUESTED:  # never created: nothing to delete
            _set(reservation, ReservationState.ENDED, "ended before it was created", ended_at=now)
            ended += 1
            continue
        try:
            sched.unreserve(reservation.name)
        except SchedulerError as exc:
            _set(reservation, ReservationState.ENDING, f"not deleted yet: {exc}")
            continue
        _set(reservation, ReservationState.ENDED, "deleted", ended_at=now)
        ended += 1
    return ended


def _set(reservation: SchedulerReservation, state: str, note: str, **times: dt.datetime) -> None:
    reservation.state, reservation.note = state, note[:500]
    for name, value in times.items():
        setattr(reservation, name, value)
    reservation.save(update_fields=["state", "note", *times])


def fleet_reserved_nodes(nodes: Iterable[str] | None = None) -> set[str]:
    """Nodes (of ``nodes``, or all) in one of Fleet's open reservations."""
    wanted = None if nodes is None else set(nodes)
    found: set[str] = set()
    for listed in SchedulerReservation.objects.filter(state__in=RESERVATION_OPEN).values_list("nodes", flat=True):
        found.update(n for n in listed if wanted is None or n in wanted)
    return found
