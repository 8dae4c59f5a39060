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
from collections.abc import Callable, Iterable, Sequence

from django.db import transaction

from fleet.clock import db_now
from fleet.execution import flushed, record_once
from inventory.models import ReservationState, SchedulerReservation
from inventory.models.scheduler import RESERVATION_OPEN
from inventory.scheduler import Scheduler, SchedulerError, configured


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
    return sum(_create(sched, r) for r in reservations if r.state == ReservationState.REQUESTED)


def _create(sched: Scheduler, reservation: SchedulerReservation) -> bool:
    now = db_now()
    start = max(reservation.starts_at, now)
    seconds = int((reservation.ends_at - start).total_seconds())
    if seconds <= 0:  # its window passed before it could be sent
        _set(reservation, ReservationState.ENDED, "its window passed before it was created", ended_at=now)
        return False
    return _sent(reservation, lambda: sched.reserve(reservation.name, reservation.nodes, start, seconds),
                 failed=(ReservationState.REQUESTED, "not created yet"), done=(ReservationState.CREATED, ""),
                 created_at=now)


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
    return sum(_delete(sched, r) for r in SchedulerReservation.objects.filter(pk__in=[r.pk for r in ending])
               .order_by("id"))


def _delete(sched: Scheduler, reservation: SchedulerReservation) -> bool:
    now = db_now()
    if reservation.state == ReservationState.REQUESTED:  # never created: nothing to delete
        _set(reservation, ReservationState.ENDED, "ended before it was created", ended_at=now)
        return True
    return _sent(reservation, lambda: sched.unreserve(reservation.name),
                 failed=(ReservationState.ENDING, "not deleted yet"), done=(ReservationState.ENDED, "deleted"),
                 ended_at=now)


def _sent(reservation: SchedulerReservation, send: Callable[[], None], *, failed: tuple[str, str],
          done: tuple[str, str], **times: dt.datetime) -> bool:
    """Send one reservation's request: one the scheduler refuses (or cannot be asked) leaves the reservation in
    ``failed``'s state with the error as its note (the next call sends it again); one that succeeds records
    ``done``'s state and note and ``times``. Returns whether it was sent."""
    try:
        send()
    except SchedulerError as exc:
        _set(reservation, failed[0], f"{failed[1]}: {exc}")
        return False
    _set(reservation, *done, **times)
    return True


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
