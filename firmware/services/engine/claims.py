"""A chunk's claim on its targets: a fencing token per target, a lease renewed while the chunk works, and the
local deadline after which the chunk sends nothing (fleet/execution.py's mechanism, per chunk).

- ``claim`` bumps each target's ``fence`` and sets ``lease_owner`` / ``lease_until`` in one statement, only for
  rows at the version the message named and with no live lease of another worker;
- ``record_fenced`` (context.py) records "about to send" in one flushed transaction that first re-checks every
  fence ``FOR UPDATE``: a target whose fence moved is dropped, nothing is recorded for it;
- ``Claims.check(target)`` is called just before every request leaves: past the local deadline (taken before
  the claim, a margin before ``lease_until``) it raises ``LostLease``; past half the lease it renews the lease of
  every remaining target first (a renewal that fails, e.g. because the worker's database session was
  terminated, raises too). So a worker that lost its session or its lease cannot send: nobody else can take a
  row before ``lease_until``, and this worker stops sending before it.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import DatabaseError, connection

from firmware.models import RolloutTarget
from firmware.services.engine import clock
from fleet.execution import LostLease, worker_id


class Claims:
    def __init__(self) -> None:
        self.owner = worker_id()
        self.seconds = float(settings.FLEET_ROLLOUT_LEASE_SECONDS)
        self.margin = min(2.0, self.seconds / 4)
        self.fences: dict[int, int] = {}
        self.deadline = 0.0
        self.renew_at = 0.0
        self.lock = threading.RLock()  # the chunk's threads share one Claims

    def claim(self, targets: list[RolloutTarget]) -> list[RolloutTarget]:
        """Claim the targets (at their versions); returns those claimed, each with its new fence."""
        if not targets:
            return []
        started = time.monotonic()
        table = RolloutTarget._meta.db_table
        if connection.vendor != "postgresql":  # SQLite (the embedded default): one writer, row by row
            self.fences = self._claim_rows(targets)
        else:
            with connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE {table} t SET fence = t.fence + 1, lease_owner = %s, "
                    f"lease_until = clock_timestamp() + make_interval(secs => %s) "
                    f"FROM unnest(%s::bigint[], %s::int[]) AS v(id, version) "
                    f"WHERE t.id = v.id AND t.version = v.version "
                    f"AND (t.lease_until IS NULL OR t.lease_until < clock_timestamp() OR t.lease_owner = %s) "
                    f"RETURNING t.id, t.fence",
                    [self.owner, self.seconds, [t.pk for t in targets], [t.version for t in targets], self.owner])
                self.fences = dict(cursor.fetchall())
        self.deadline = started + self.seconds - self.margin
        self.renew_at = started + self.seconds / 2
        claimed = [t for t in targets if t.pk in self.fences]
        for t in claimed:
            t.fence, t.lease_owner = self.fences[t.pk], self.owner
        return claimed

    def _claim_rows(self, targets: list[RolloutTarget]) -> dict[int, int]:
        from django.db.models import F, Q

        now = clock.now()
        fences = {}
        for t in targets:
            free = Q(lease_until__isnull=True) | Q(lease_until__lt=now) | Q(lease_owner=self.owner)
            if RolloutTarget.objects.filter(free, pk=t.pk, version=t.version).update(
                    fence=F("fence") + 1, lease_owner=self.owner,
                    lease_until=now + dt.timedelta(seconds=self.seconds)):
                fences[t.pk] = RolloutTarget.objects.filter(pk=t.pk).values_list("fence", flat=True).get()
        return fences

    def drop(self, target_id: int) -> None:
        self.fences.pop(target_id, None)

    @contextmanager
    def renewing(self, target: RolloutTarget, *, enabled: bool = True) -> Iterator[None]:
        """Around a long request (a multipart upload): the leases are renewed every third of the lease while it
        runs, so no other worker can take the target and send again meanwhile. A worker killed mid-upload stops
        renewing; its lease runs out and the next owner settles and reconciles."""
        if not enabled or connection.vendor != "postgresql":
            yield
            return
        done = threading.Event()

        def renew_loop() -> None:
            from django.db import connection as thread_connection

            try:
                while not done.wait(self.seconds / 3):
                    try:
                        with self.lock:
                            self.renew()
                    except DatabaseError:
                        return
            finally:
                thread_connection.close()

        thread = threading.Thread(target=renew_loop, name=f"lease-renew-{target.pk}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=self.seconds)

    def renew(self) -> None:
        """Extend the lease of every target still held; those whose fence moved are dropped."""
        if not self.fences:
            return
        started = time.monotonic()
        table = RolloutTarget._meta.db_table
        ids, fences = list(self.fences), [self.fences[i] for i in self.fences]
        if connection.vendor != "postgresql":
            self.deadline = started + self.seconds - self.margin
            self.renew_at = started + self.seconds / 2
            return
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} t SET lease_until = clock_timestamp() + make_interval(secs => %s) "
                f"FROM unnest(%s::bigint[], %s::bigint[]) AS v(id, fence) "
                f"WHERE t.id = v.id AND t.fence = v.fence AND t.lease_owner = %s RETURNING t.id",
                [self.seconds, ids, fences, self.owner])
            kept = {row[0] for row in cursor.fetchall()}
        self.fences = {i: f for i, f in self.fences.items() if i in kept}
        self.deadline = started + self.seconds - self.margin
        self.renew_at = started + self.seconds / 2

    def check(self, target: RolloutTarget) -> None:
        """Just before a request to ``target``'s BMC leaves: renew when due; ``LostLease`` when not ours."""
        with self.lock:
            self._check(target)

    def _check(self, target: RolloutTarget) -> None:
        now = time.monotonic()
        if now >= self.renew_at:
            try:
                self.renew()
            except DatabaseError as exc:  # the session is gone (terminated, failed over): so is every claim
                self.fences = {}
                raise LostLease(f"target {target.pk}: the lease could not be renewed ({exc})") from exc
            now = time.monotonic()
        if target.pk not in self.fences:
            raise LostLease(f"target {target.pk}: fence moved")
        if now >= self.deadline:
            raise LostLease(f"target {target.pk}: lease deadline passed")

    def holds(self, target: RolloutTarget) -> bool:
        return target.pk in self.fences
