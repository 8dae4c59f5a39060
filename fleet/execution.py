"""Executing side effects on devices from Celery workers, at most once: leases with fencing tokens, bounded
retries, time budgets and the ambiguous-send rule. Used by firmware rollouts and decommission's erasures.

The mechanism (docs/firmware.md has the whole argument):

1. **Lease with a fence.** ``lease_due`` takes due rows ``FOR UPDATE SKIP LOCKED``, sets ``lease_owner`` and
   ``lease_until`` and bumps ``fence`` in one statement. Whoever took a row last has the highest fence.
2. **Fenced record before every side effect.** ``fenced(lease, record)`` locks the row, checks that its fence and
   owner are still ours (else ``LostLease``), runs ``record`` ("about to send X") and commits with
   ``synchronous_commit = on``. Only then is the request sent. A worker whose lease was taken over (its lease
   ran out, its database session died, another worker took the row) can therefore never send: its fenced check
   fails first.
3. **Ambiguous is not failed.** A request whose answer was lost (``Sent.AMBIGUOUS``) is never sent again until
   the device proves it did not land: ``settle`` waits ``settle_seconds`` (longer than the device's worst
   processing time), then asks ``reconcile``: FOUND (adopt it), ABSENT (proven not landed: may be sent), UNKNOWN
   (inconclusive: stop and show a person).
4. **Bounded.** ``RetryPolicy`` bounds attempts with exponential backoff; ``TimeBudget`` makes a chunk stop taking
   work well before the Celery soft time limit.
"""

from __future__ import annotations

import datetime as dt
import enum
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, models, transaction
from django.db.models import F, Q
from django.utils import timezone


class LostLease(Exception):
    """The caller no longer owns the row: its fence moved or its lease was taken over. Send nothing."""


Fenced = LostLease


class Leasable(models.Model):
    """Abstract base of a row a worker leases to work on (a rollout target, an erasure)."""

    lease_owner = models.CharField(max_length=64, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    fence = models.BigIntegerField(default=0, help_text="Fencing token: bumped whenever a worker takes the row")
    attempts = models.PositiveIntegerField(default=0)
    next_run_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        abstract = True


@dataclass(frozen=True)
class Lease:
    model: type[models.Model]
    pk: int
    fence: int
    owner: str


_WORKER = f"{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
_WORKER_PID = os.getpid()


def worker_id() -> str:
    """This process's owner name for leases (a forked child gets its own)."""
    global _WORKER, _WORKER_PID  # noqa: PLW0603 - recomputed once after a fork
    if os.getpid() != _WORKER_PID:
        _WORKER, _WORKER_PID = f"{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:8]}", os.getpid()
    return _WORKER


def flushed() -> None:
    """This transaction's commit waits for the WAL flush (``synchronous_commit`` on): a record made before a side
    effect is sent survives a crash of the database too."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO on")


def record_once[M: models.Model](model: type[M], *, key: dict[str, Any], make: Callable[[], M],
                                  then: Callable[[M], None] = lambda row: None) -> M:
    """The row ``key`` names, or the one ``make()`` builds, saved in a flushed transaction with ``then(row)``: the
    record made before a side effect is sent. Idempotent: a concurrent creator's row wins (``key`` is unique)."""
    existing = model.objects.filter(**key).first()
    if existing is not None:
        return existing
    with transaction.atomic():
        flushed()
        try:
            with transaction.atomic():
                row = make()
                row.save(force_insert=True)
        except IntegrityError:
            return model.objects.get(**key)
        then(row)
    return row


def lease_due(queryset: models.QuerySet, *, limit: int, seconds: float, owner: str | None = None,
              now: dt.datetime | None = None) -> list[Lease]:
    """Lease up to ``limit`` due rows of ``queryset`` (``next_run_at`` passed or unset, no live lease): one
    ``SELECT ... FOR UPDATE SKIP LOCKED`` and one UPDATE that sets the owner, the lease and bumps the fence."""
    now = now or timezone.now()
    owner = owner or worker_id()
    model = queryset.model
    with transaction.atomic():
        rows = list(queryset.select_for_update(skip_locked=True, of=("self",))
                    .filter(Q(next_run_at__isnull=True) | Q(next_run_at__lte=now))
                    .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
                    .order_by("next_run_at", "pk").values_list("pk", "fence")[:limit])
        if not rows:
            return []
        model.objects.filter(pk__in=[r[0] for r in rows]).update(
            lease_owner=owner, lease_until=now + dt.timedelta(seconds=seconds), fence=F("fence") + 1)
    return [Lease(model, pk, fence + 1, owner) for pk, fence in rows]


def lease_take(model: type[models.Model], pk: int, *, seconds: float, owner: str | None = None) -> Lease:
    """Take one row's lease now, whoever held it (its fence moves, so the old holder can no longer send)."""
    owner = owner or worker_id()
    with transaction.atomic():
        fence = model.objects.select_for_update().filter(pk=pk).values_list("fence", flat=True).first()
        if fence is None:
            raise LostLease(f"{model.__name__} {pk} does not exist")
        model.objects.filter(pk=pk).update(lease_owner=owner, fence=fence + 1,
                                           lease_until=timezone.now() + dt.timedelta(seconds=seconds))
    return Lease(model, pk, fence + 1, owner)


def _mine(lease: Lease) -> models.QuerySet:
    return lease.model.objects.filter(pk=lease.pk, fence=lease.fence, lease_owner=lease.owner)


def lease_renew(lease: Lease, *, seconds: float) -> None:
    """Extend the lease; ``LostLease`` if it is no longer ours."""
    if not _mine(lease).update(lease_until=timezone.now() + dt.timedelta(seconds=seconds)):
        raise LostLease(f"{lease.model.__name__} {lease.pk}: fence {lease.fence} is no longer current")


def fenced[T](lease: Lease, record: Callable[[], T] | None = None, *, renew_seconds: float | None = None) -> T | None:
    """Prove ownership and record "about to send" in one flushed transaction; raise ``LostLease`` if the row is
    no longer ours (then nothing was recorded). Call it immediately before every side effect."""
    with transaction.atomic():
        flushed()
        if not _mine(lease).select_for_update().exists():
            raise LostLease(f"{lease.model.__name__} {lease.pk}: fence {lease.fence} is no longer current")
        result = record() if record is not None else None
        if renew_seconds:
            _mine(lease).update(lease_until=timezone.now() + dt.timedelta(seconds=renew_seconds))
    return result


def lease_release(lease: Lease, **fields: Any) -> bool:
    """Write ``fields`` and give the lease up, only if the fence is still ours (False: write nothing)."""
    return bool(lease.model.objects.filter(pk=lease.pk, fence=lease.fence).update(
        lease_owner="", lease_until=None, **fields))


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    base_seconds: float = 2.0
    factor: float = 2.0
    max_seconds: float = 300.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait after the ``attempt``-th failure (1-based): base * factor^(attempt-1), capped."""
        return min(self.max_seconds, self.base_seconds * self.factor ** max(0, attempt - 1))

    def exhausted(self, attempts: int) -> bool:
        return attempts >= self.attempts

    def next_run_at(self, attempt: int, *, now: dt.datetime | None = None,
                    retry_after: float | None = None) -> dt.datetime:
        wait = max(self.delay(attempt), float(retry_after or 0))
        return (now or timezone.now()) + dt.timedelta(seconds=wait)


class TimeBudget:
    """How long a chunk may keep taking work: ``expired()`` well before the Celery soft time limit."""

    def __init__(self, seconds: float) -> None:
        self.seconds = float(seconds)
        self.started = time.monotonic()

    @classmethod
    def for_task(cls, soft_limit: float | None = None, *, fraction: float = 0.5) -> TimeBudget:
        limit = soft_limit if soft_limit is not None else getattr(settings, "CELERY_TASK_SOFT_TIME_LIMIT", 240)
        return cls(float(limit) * fraction)

    def remaining(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def expired(self) -> bool:
        return self.remaining() <= 0


class Sent(enum.StrEnum):
    SENT = "sent"
    NOT_SENT = "not_sent"
    AMBIGUOUS = "ambiguous"


class Trace(enum.StrEnum):
    FOUND = "found"
    ABSENT = "absent"
    UNKNOWN = "unknown"


class Verdict(enum.StrEnum):
    WAIT = "wait"
    FOUND = "found"
    ABSENT = "absent"
    INCONCLUSIVE = "inconclusive"


def settle_until(sent_at: dt.datetime, settle_seconds: float) -> dt.datetime:
    return sent_at + dt.timedelta(seconds=settle_seconds)


def settle(*, sent_at: dt.datetime, settle_seconds: float, reconcile: Callable[[], Trace],
           now: dt.datetime | None = None) -> Verdict:
    """An ambiguous send: WAIT until the settle period is over, then what ``reconcile`` finds on the device.
    An exception from ``reconcile`` (the device is unreachable) propagates: the caller tries later."""
    now = now or timezone.now()
    if now < settle_until(sent_at, settle_seconds):
        return Verdict.WAIT
    trace = Trace(reconcile())
    return {Trace.FOUND: Verdict.FOUND, Trace.ABSENT: Verdict.ABSENT}.get(trace, Verdict.INCONCLUSIVE)
