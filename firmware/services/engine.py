"""The rollout engine: PostgreSQL holds the state machine, Celery only runs short steps.

``rollout_tick()`` (beat, every FLEET_ROLLOUT_TICK_SECONDS, and once after start/resume), under a
transaction-scoped advisory lock so two ticks never overlap:
1. judges the current wave of every running rollout (``gates.wave_gate``): next wave, completed, paused or aborted;
2. admits pending targets of the current wave (whole units: an NVLink domain goes together) up to the per-BMC-class
   concurrency (FLEET_ROLLOUT_BMC_CONCURRENCY);
3. picks due targets ``SELECT ... FOR UPDATE SKIP LOCKED LIMIT n``, leases them (``next_run_at = now + lease``)
   and, once committed, sends them in chunks of FLEET_ROLLOUT_CHUNK (target id, version) pairs.

``target_steps(pairs)`` (the Celery task's body) advances each target by one step:
- a (target, version) whose version moved (stale, redelivered) is skipped;
- a session advisory lock on the server id means one BMC is never driven by two steps at once;
- a side effect (update, activate, reset) is recorded as a ``TargetStep`` with a unique idempotency key and
  committed BEFORE it is sent; a step that finds its key already recorded reconciles with the BMC (the task it
  created, the BMC's task list, the inventory) instead of sending it again;
- the result is written with a compare-and-set ``UPDATE ... WHERE id AND state AND version`` (version + 1);
- nothing sleeps: waiting is ``next_run_at`` (Retry-After honoured). A target that can go on at once is sent
  again straight away (one message per chunk), so a rollout does not wait for the tick between steps.
A worker killed anywhere leaves either the old row (the lease expires, the tick sends the step again, which
reconciles) or the new one (done). docs/firmware.md has the whole argument.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from firmware.inventory_map import components_from_inventory
from firmware.models import (
    BundleItem,
    ComponentSpec,
    ErrorClass,
    Rollout,
    RolloutState,
    RolloutTarget,
    RolloutWave,
    TargetState,
    TargetStep,
    UpdateMethod,
    WaveState,
    version_key,
)
from firmware.models.rollout import TARGET_IN_FLIGHT, TARGET_PAST_NO_RETURN
from firmware.redfish import BmcError, bmc_client, bmc_client_forget, resets_for
from firmware.services import gates
from firmware.services.plan import Strategy, strategy_parse
from firmware.services.rollout import (
    ENGINE,
    release_check_demotion,
    release_record_outcomes,
    rollout_abort,
    rollout_engine_complete,
    rollout_engine_pause,
)
from firmware.services.windows import activation_allowed

logger = logging.getLogger(__name__)

TICK_LOCK = zlib.crc32(b"fleet.rollout.tick")
SERVER_LOCK_NS = zlib.crc32(b"fleet.rollout.server") & 0x7FFFFFFF
SITE_LOCK_NS = zlib.crc32(b"fleet.rollout.site") & 0x7FFFFFFF


# --- the tick ---------------------------------------------------------------------------------------------------

@dataclass
class TickResult:
    ran: bool = True
    admitted: int = 0
    dispatched: int = 0
    messages: int = 0
    waves: list[str] = field(default_factory=list)


def rollout_tick(*, now: dt.datetime | None = None, limit: int | None = None) -> TickResult:
    """One tick (see the module docstring). Safe to run at any time and concurrently: a second tick that finds
    the first one running returns ``ran=False``."""
    result = TickResult()
    with transaction.atomic():
        if _pg():  # (SQLite, the embedded default, serialises writers anyway)
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [TICK_LOCK])
                if not cursor.fetchone()[0]:
                    return TickResult(ran=False)
        now = now or timezone.now()
        for rollout in Rollout.objects.filter(state=RolloutState.RUNNING).select_related("bundle").order_by("id"):
            verdict = _judge_wave(rollout, now)
            if verdict:
                result.waves.append(f"{rollout.pk}: {verdict}")
        result.admitted = _admit(now)
        pairs = _due(now, limit or settings.FLEET_ROLLOUT_TICK_LIMIT)
        result.dispatched = len(pairs)
        chunks = _chunks(pairs)
        result.messages = len(chunks)
        transaction.on_commit(lambda: send_steps(chunks))
    return result


def _chunks(pairs: Sequence[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    size = settings.FLEET_ROLLOUT_CHUNK
    return [list(pairs[i:i + size]) for i in range(0, len(pairs), size)]


def send_steps(chunks: Iterable[list[tuple[int, int]]]) -> None:
    """Publish step chunks. A broker that is down loses nothing: the targets are leased, and the tick sends
    them again when the lease runs out."""
    from firmware.tasks import rollout_steps_task

    for chunk in chunks:
        if chunk:
            try:
                rollout_steps_task.delay([[t, v] for t, v in chunk])
            except Exception:  # noqa: BLE001 - kombu raises many kinds when the broker is away
                logger.warning("rollout: could not publish %d steps; the lease brings them back", len(chunk),
                               exc_info=True)


def _judge_wave(rollout: Rollout, now: dt.datetime) -> str:
    """Gate the rollout's current wave; move on, complete, pause or abort. Returns what happened ("" if nothing)."""
    strategy = strategy_parse(rollout.strategy)
    wave = RolloutWave.objects.filter(rollout=rollout, index=rollout.current_wave).first()
    if wave is None:
        rollout_engine_complete(rollout=rollout)
        return "completed (no waves)"
    if wave.state == WaveState.PENDING:
        RolloutWave.objects.filter(pk=wave.pk).update(state=WaveState.RUNNING, started_at=now)
        return f"{wave.name} started"
    if wave.state not in (WaveState.RUNNING, WaveState.SOAKING):
        return ""
    is_canary = wave.index == 0 and strategy.canary
    verdict = gates.wave_gate(wave=wave, strategy=strategy, now=now, is_canary=is_canary)
    if verdict.outcome == gates.WAIT:
        return ""
    gate = {**(wave.gate_result or {}), "outcome": verdict.outcome, "reason": verdict.reason,
            "counts": verdict.counts, "at": now.isoformat()}
    if verdict.outcome == gates.PASS:
        if strategy.soak_seconds and wave.soak_until is None:
            RolloutWave.objects.filter(pk=wave.pk).update(
                state=WaveState.SOAKING, soak_until=now + dt.timedelta(seconds=strategy.soak_seconds))
            return f"{wave.name} soaking"
        RolloutWave.objects.filter(pk=wave.pk).update(state=WaveState.PASSED, finished_at=now, gate_result=gate)
        nxt = RolloutWave.objects.filter(rollout=rollout, index__gt=wave.index).order_by("index").first()
        if nxt is None:
            rollout_engine_complete(rollout=rollout)
            return f"{wave.name} passed; completed"
        Rollout.objects.filter(pk=rollout.pk, state=RolloutState.RUNNING).update(
            current_wave=nxt.index, version=F("version") + 1)
        RolloutWave.objects.filter(pk=nxt.pk).update(state=WaveState.RUNNING, started_at=now)
        return f"{wave.name} passed; {nxt.name} started"
    RolloutWave.objects.filter(pk=wave.pk).update(state=WaveState.FAILED, finished_at=now, gate_result=gate)
    reason = f"{wave.name} gate {verdict.outcome}: {verdict.reason}"
    if verdict.outcome == gates.FAIL and strategy.on_failure == "abort":
        rollout_abort(rollout=rollout, actor=ENGINE, reason=reason)
        return f"aborted: {reason}"
    rollout_engine_pause(rollout_id=rollout.pk, reason=reason)
    return f"paused: {reason}"


def _concurrency(bmc_class: str) -> int:
    return settings.FLEET_ROLLOUT_BMC_CONCURRENCY.get(bmc_class, settings.FLEET_ROLLOUT_DEFAULT_CONCURRENCY)


def _admit(now: dt.datetime) -> int:
    """pending -> precheck for the current wave of running rollouts, whole units, within per-class concurrency."""
    in_flight = Counter(dict(RolloutTarget.objects.filter(state__in=TARGET_IN_FLIGHT).values("bmc_class")
                             .annotate(n=Count("id")).values_list("bmc_class", "n")))
    admitted = 0
    for rollout_id, wave_index in Rollout.objects.filter(state=RolloutState.RUNNING).values_list("id",
                                                                                                "current_wave"):
        rows = list(RolloutTarget.objects.filter(rollout_id=rollout_id, wave__index=wave_index,
                                                 wave__state=WaveState.RUNNING, state=TargetState.PENDING)
                    .order_by("id").select_for_update(skip_locked=True, of=("self",))
                    .values_list("id", "unit_key", "bmc_class")[:settings.FLEET_ROLLOUT_TICK_LIMIT])
        units: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for target_id, unit, bmc_class in rows:
            units[unit].append((target_id, bmc_class))
        chosen: list[int] = []
        for members in units.values():
            need = Counter(c for _, c in members)
            if all(in_flight[c] + n <= _concurrency(c) or in_flight[c] == 0 for c, n in need.items()):
                chosen += [t for t, _ in members]
                in_flight.update(need)
        if chosen:
            admitted += RolloutTarget.objects.filter(id__in=chosen, state=TargetState.PENDING).update(
                state=TargetState.PRECHECK, version=F("version") + 1, next_run_at=now, started_at=now,
                deadline_at=None)
    return admitted


def _due(now: dt.datetime, limit: int) -> list[tuple[int, int]]:
    """Lease and return (id, version) of due targets: in flight, of a running rollout (or past activation,
    which always finishes), ``next_run_at <= now``. ``FOR UPDATE SKIP LOCKED``: a row a step is writing right
    now is left for the next tick."""
    lease = now + dt.timedelta(seconds=settings.FLEET_ROLLOUT_LEASE_SECONDS)
    rows = list(RolloutTarget.objects.select_for_update(skip_locked=True, of=("self",))
                .filter(Q(rollout__state=RolloutState.RUNNING) | Q(state__in=TARGET_PAST_NO_RETURN),
                        state__in=TARGET_IN_FLIGHT, next_run_at__lte=now)
                .order_by("next_run_at", "id").values_list("id", "version")[:limit])
    if rows:
        RolloutTarget.objects.filter(id__in=[r[0] for r in rows]).update(next_run_at=lease)
    return sorted(rows)


def _pg() -> bool:
    return connection.vendor == "postgresql"


# --- steps -------------------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    """What one step decided: the new state and fields, and whether the next step is due at once."""

    state: str
    fields: dict[str, Any] = field(default_factory=dict)
    again_now: bool = False
    after: list[Any] = field(default_factory=list)  # callables run in the CAS's transaction if it applied
    succeeded: tuple[Any, list[int], list[dict[str, Any]]] | None = None  # (server, releases, members): counted
    # and observed once per chunk (``_flush_successes``)


@dataclass
class StepsResult:
    done: int = 0
    stale: int = 0
    busy: int = 0
    continued: list[tuple[int, int]] = field(default_factory=list)


class _Context:
    """What a chunk of steps shares: bundle items, component specs, windows, the servers' pools (read once per
    chunk), and the successes to count and observe at its end."""

    def __init__(self, server_ids: list[int]) -> None:
        from firmware.models import MaintenanceWindow, Pool

        self.items: dict[int, list[BundleItem]] = {}
        self.specs = {s.component: s for s in ComponentSpec.objects.all()}
        self.strategies: dict[int, Strategy] = {}
        self.windows = list(MaintenanceWindow.objects.filter(enabled=True).order_by("kind", "id"))
        self.pools: dict[int, list[int]] = defaultdict(list)
        if server_ids:
            for server_id, pool_id in Pool.servers.through.objects.filter(server_id__in=server_ids).values_list(
                    "server_id", "pool_id"):
                self.pools[server_id].append(pool_id)
        self.succeeded: list[tuple[Any, list[int], list[dict[str, Any]]]] = []
        self.steps: dict[int, dict[str, TargetStep]] = defaultdict(dict)
        self.fresh: set[str] = set()  # keys recorded by this chunk: their side effect is still to send

    def load_steps(self, targets: list[RolloutTarget]) -> None:
        """The recorded steps of the chunk's targets, by their possible keys: an equality lookup on the unique
        ``idem_key`` index, whatever the table's statistics say (a target_id IN list seq-scanned a table that grew
        during the benchmark)."""
        keys = [key for t in targets for key in _step_keys(t)]
        for start in range(0, len(keys), 1000):
            for step in TargetStep.objects.filter(idem_key__in=keys[start:start + 1000]):
                self.steps[step.target_id][step.idem_key] = step

    def record_planned(self, targets: list[RolloutTarget]) -> None:
        """Record, in one flushed transaction, the side effect each target is about to send (an update of its
        current item, or its next activation action): ``_record`` for the whole chunk at once."""
        planned: list[TargetStep] = []
        now = timezone.now()
        token = f"recorded by chunk {uuid.uuid4().hex}"  # tells our inserts from a concurrent step's
        for t in targets:
            recorded = self.steps[t.pk]
            if t.state == TargetState.STAGING and t.item_index < len(t.work):
                item = t.work[t.item_index]
                key = f"{t.pk}:{item['release']}:update"
                if key not in recorded:
                    planned.append(TargetStep(target=t, release_id=item["release"], kind="update", idem_key=key,
                                              requested_at=now, messages=[token]))
            elif t.state == TargetState.ACTIVATING:
                for action in _activation_actions(t.work):
                    key = f"{t.pk}:{action}"
                    if key not in recorded:
                        planned.append(TargetStep(target=t, kind="activate" if action == "activate" else "reset",
                                                  idem_key=key, requested_at=now, messages=[token]))
                        break
                    if recorded[key].response_status is None:
                        break  # recorded, never confirmed: sent again below, no new record
        if not planned:
            return
        with transaction.atomic():
            if _pg():
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL synchronous_commit TO on")
            TargetStep.objects.bulk_create(planned, ignore_conflicts=True)
        keys = [p.idem_key for p in planned]
        for step in TargetStep.objects.filter(idem_key__in=keys):
            self.steps[step.target_id][step.idem_key] = step
            if step.messages == [token]:  # inserted by this chunk (ignore_conflicts hides which rows were)
                self.fresh.add(step.idem_key)

    def step(self, target: RolloutTarget, key: str) -> tuple[TargetStep | None, bool]:
        """(the recorded step for ``key``, whether it was recorded by this chunk and not sent yet)."""
        return self.steps[target.pk].get(key), key in self.fresh

    def windows_for(self, site_id: int | None, pool_ids: list[int]) -> list[Any]:
        return [w for w in self.windows if (w.site_id is None and w.pool_id is None)
                or (w.site_id is not None and w.site_id == site_id and w.pool_id is None)
                or (w.pool_id is not None and w.pool_id in pool_ids)]

    def bundle_items(self, bundle_id: int) -> list[BundleItem]:
        if bundle_id not in self.items:
            self.items[bundle_id] = list(BundleItem.objects.filter(bundle_id=bundle_id).select_related("release")
                                         .order_by("order", "id"))
        return self.items[bundle_id]

    def strategy(self, rollout: Rollout) -> Strategy:
        if rollout.pk not in self.strategies:
            self.strategies[rollout.pk] = strategy_parse(rollout.strategy)
        return self.strategies[rollout.pk]


def target_steps(pairs: Sequence[Sequence[int]]) -> StepsResult:
    """Advance each (target id, version) by one step; see the module docstring. Returns what it did.

    Per chunk, not per target: one read of the targets, one of their recorded steps, one flushed transaction
    recording every side effect the chunk is about to send, one compare-and-set statement for all the results
    (about 5 queries per chunk plus the BMC requests; measured in bench/README.md)."""
    result = StepsResult()
    want = {int(t): int(v) for t, v in pairs}
    targets = list(RolloutTarget.objects.filter(id__in=want).select_related("server", "rollout")
                   .order_by("id"))
    fresh = [t for t in targets if t.version == want[t.pk] and t.state in TARGET_IN_FLIGHT]
    result.stale = len(want) - len(fresh)
    ctx = _Context([t.server_id for t in fresh])
    locked = _lock_servers([t.server_id for t in fresh])
    _async_commit(True)
    pending: list[tuple[RolloutTarget, Outcome]] = []
    try:
        busy = [t for t in fresh if t.server_id not in locked]
        if busy:  # another step drives these BMCs now: look again in a second
            result.busy = len(busy)
            for t in busy:
                RolloutTarget.objects.filter(pk=t.pk, version=t.version).update(
                    next_run_at=timezone.now() + dt.timedelta(seconds=1))
        runnable = [t for t in fresh if t.server_id in locked and (
            t.rollout.state == RolloutState.RUNNING or t.state in TARGET_PAST_NO_RETURN)]  # else: hold
        ctx.load_steps(runnable)
        ctx.record_planned(runnable)
        for target in runnable:
            try:
                outcome = _step(target, ctx)
            except Exception as exc:  # a bug, not the BMC: keep the state, come back later
                logger.exception("rollout target %s: step failed", target.pk)
                outcome = Outcome(target.state, {"last_error": f"internal error: {exc}"[:2000],
                                                 "next_run_at": timezone.now() + dt.timedelta(seconds=30)})
            if isinstance(outcome, _AlreadyApplied):
                result.done += outcome.applied
                if outcome.applied:
                    result.continued.append((target.pk, target.version))
            elif outcome.after or not _pg():
                if _apply(target, outcome):
                    _applied(result, ctx, target, outcome)
            else:
                pending.append((target, outcome))
        applied = _apply_many(pending)
        for target, outcome in pending:
            if target.pk in applied:
                _applied(result, ctx, target, outcome)
    finally:
        _async_commit(False)
        _unlock_servers(locked)
    _flush_successes(ctx)
    if result.continued:
        send_steps(_chunks(result.continued))
    return result


def _applied(result: StepsResult, ctx: _Context, target: RolloutTarget, outcome: Outcome) -> None:
    result.done += 1
    if outcome.again_now:
        result.continued.append((target.pk, target.version + 1))
    if outcome.succeeded is not None:
        ctx.succeeded.append(outcome.succeeded)


def _lock_servers(server_ids: list[int]) -> set[int]:
    """Session advisory locks on the servers' ids (released by ``_unlock_servers`` or when the connection dies
    with a killed worker). Returns the ids locked."""
    if not server_ids:
        return set()
    if not _pg():  # SQLite (the embedded default): one worker process drives every BMC
        return set(server_ids)
    with connection.cursor() as cursor:
        cursor.execute("SELECT s, pg_try_advisory_lock(%s, s) FROM unnest(%s::int[]) AS s",
                       [SERVER_LOCK_NS, list(set(server_ids))])
        return {s for s, ok in cursor.fetchall() if ok}


def _unlock_servers(server_ids: set[int]) -> None:
    if server_ids and _pg():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, s) FROM unnest(%s::int[]) AS s",
                           [SERVER_LOCK_NS, list(server_ids)])


def _fields(outcome: Outcome) -> dict[str, Any]:
    fields = dict(outcome.fields)
    if outcome.state in (TargetState.SUCCEEDED, TargetState.FAILED, TargetState.SKIPPED):
        fields.setdefault("finished_at", timezone.now())
        fields.setdefault("next_run_at", None)
    if outcome.again_now:
        fields["next_run_at"] = timezone.now() + dt.timedelta(seconds=settings.FLEET_ROLLOUT_LEASE_SECONDS)
    return fields


def _apply(target: RolloutTarget, outcome: Outcome) -> bool:
    """Compare-and-set one step's result; run its after-work in the same transaction. False if the row moved."""
    fields = {"state": outcome.state, "version": F("version") + 1, **_fields(outcome)}
    cas = RolloutTarget.objects.filter(pk=target.pk, state=target.state, version=target.version)
    if not outcome.after:
        return bool(cas.update(**fields))  # one statement (autocommit)
    with transaction.atomic():
        updated = cas.update(**fields)
        if updated:
            for after in outcome.after:
                after()
    return bool(updated)


# Columns a step may change, with their PostgreSQL array types (for ``_apply_many``).
_CAS_COLUMNS = (("state", "varchar"), ("next_run_at", "timestamptz"), ("deadline_at", "timestamptz"),
                ("work", "jsonb"), ("before", "jsonb"), ("after", "jsonb"), ("item_index", "int"),
                ("attempts", "int"), ("bmc_task_uri", "varchar"), ("last_error", "text"),
                ("error_class", "varchar"), ("finished_at", "timestamptz"))


def _apply_many(pending: list[tuple[RolloutTarget, Outcome]]) -> set[int]:
    """Compare-and-set the results of a whole chunk in one ``UPDATE ... FROM unnest(...)``: each row only if
    its state and version are still those the step read. Returns the ids that applied."""
    if not pending:
        return set()
    from psycopg.types.json import Jsonb

    columns: dict[str, list[Any]] = {name: [] for name, _ in _CAS_COLUMNS}
    for target, outcome in pending:
        fields = {"state": outcome.state, **_fields(outcome)}
        for name, kind in _CAS_COLUMNS:
            value = fields.get(name, getattr(target, name))
            columns[name].append(Jsonb(value) if kind == "jsonb" else value)
    table = RolloutTarget._meta.db_table
    sets = ", ".join(f'"{name}" = v."{name}"' for name, _ in _CAS_COLUMNS)
    arrays = ", ".join(f"%s::{kind}[]" for _, kind in _CAS_COLUMNS)
    names = ", ".join(f'"{name}"' for name, _ in _CAS_COLUMNS)
    sql = (f'UPDATE {table} t SET {sets}, version = t.version + 1 '
           f'FROM unnest(%s::bigint[], %s::int[], %s::varchar[], {arrays}) AS v(id, old_version, old_state, {names}) '
           f'WHERE t.id = v.id AND t.version = v.old_version AND t.state = v.old_state RETURNING t.id')
    params = [[t.pk for t, _ in pending], [t.version for t, _ in pending], [t.state for t, _ in pending],
              *(columns[name] for name, _ in _CAS_COLUMNS)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()}


def _async_commit(on: bool) -> None:
    """Commits of this worker's steps do not wait for the WAL flush (``synchronous_commit = off``): a PostgreSQL
    crash may forget the last ~0.2 s of state changes, which the next step redoes after reconciling. The record
    of a side effect (``_record``) is the exception: it is flushed before the BMC is asked anything."""
    if _pg():
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit TO %s" % ("off" if on else "DEFAULT"))  # noqa: S608, UP031


# --- one step ---------------------------------------------------------------------------------------------------

def _later(target: RolloutTarget, seconds: float, **fields: Any) -> Outcome:
    return Outcome(target.state, {"next_run_at": timezone.now() + dt.timedelta(seconds=max(0.2, seconds)),
                                  **fields})


def _step(target: RolloutTarget, ctx: _Context) -> Outcome:
    if not target.server.bmc_address:
        return _fail(target, ErrorClass.INFRA, "the server has no BMC address", [])
    try:
        if target.state == TargetState.PRECHECK:
            return _precheck(target, ctx)
        if target.state == TargetState.STAGING:
            return _staging(target, ctx)
        if target.state == TargetState.DRAINING:
            return _draining(target, ctx)
        if target.state == TargetState.ACTIVATING:
            return _activating(target, ctx)
        if target.state == TargetState.VERIFYING:
            return _verifying(target, ctx)
    except BmcError as exc:
        if exc.error_class == ErrorClass.FIRMWARE:
            return _fail(target, ErrorClass.FIRMWARE, str(exc), _current_releases(target))
        return _infra(target, exc, ctx)
    return Outcome(target.state)


def _infra(target: RolloutTarget, exc: BmcError, ctx: _Context) -> Outcome:
    """An infrastructure error: try again with backoff until the retry policy's attempts are spent."""
    bmc_client_forget(target.server.bmc_address)
    strategy = ctx.strategy(target.rollout)
    attempts = target.attempts + 1
    if attempts >= strategy.retry_max_attempts:
        return _fail(target, ErrorClass.INFRA, f"{exc} (after {attempts} attempts)", [], attempts=attempts)
    wait = max(strategy.backoff(attempts), exc.retry_after or 0)
    return _later(target, wait, attempts=attempts, last_error=str(exc)[:2000], error_class=ErrorClass.INFRA)


def _fail(target: RolloutTarget, error_class: str, message: str, release_ids: list[int], **fields: Any) -> Outcome:
    after = []
    if error_class == ErrorClass.FIRMWARE and release_ids:
        def count_and_demote() -> None:
            release_record_outcomes(release_ids=release_ids, succeeded=False)
            from firmware.models import Release

            for release in Release.objects.filter(pk__in=release_ids):
                release_check_demotion(release=release)
        after.append(count_and_demote)
    if error_class == ErrorClass.INCONCLUSIVE:
        rollout_id = target.rollout_id
        after.append(lambda: rollout_engine_pause(
            rollout_id=rollout_id, reason=f"inconclusive on {target.server.hostname}: {message}"[:500]))
    return Outcome(TargetState.FAILED, {"error_class": error_class, "last_error": message[:2000],
                                        "deadline_at": None, **fields}, after=after)


def _current_releases(target: RolloutTarget) -> list[int]:
    work = target.work or []
    if target.state == TargetState.STAGING and target.item_index < len(work):
        return [work[target.item_index]["release"]]
    return [w["release"] for w in work]


def _client(target: RolloutTarget) -> Any:
    return bmc_client(target.server.bmc_address)


def _precheck(target: RolloutTarget, ctx: _Context) -> Outcome:
    """Read the BMC's FirmwareInventory; list the bundle items this server still needs (``work``). Nothing
    needed: skipped (already compliant). A version below the release's lowest upgradable one: failed."""
    client = _client(target)
    items = ctx.bundle_items(target.rollout.bundle_id)
    ids = client.inventory_ids()
    specs = [ctx.specs[c] for c in ctx.specs if ctx.specs[c].inventory_pattern]
    mapped = components_from_inventory([{"Id": i, "Version": "?"} for i in ids], specs or None)
    by_component: dict[str, list[str]] = defaultdict(list)
    for component, inventory_id, _ in mapped:
        by_component[component].append(inventory_id)
    wanted_ids = sorted({i for item in items for i in by_component.get(item.component, [])})
    docs = dict(zip(wanted_ids, client.inventory(wanted_ids), strict=True))
    versions = {i: str(doc.get("Version") or "") for i, doc in docs.items()}
    work, before, problems = [], {}, []
    for item in items:
        release = item.release
        inv = by_component.get(item.component, [])
        if not inv:
            problems.append(f"the BMC reports no {item.component} item")
            continue
        current = {i: versions.get(i, "") for i in inv}
        before[item.component] = sorted(set(current.values()))
        stale = [i for i, v in current.items() if version_key(v) != release.version_key]
        if not stale:
            continue
        if release.min_from_key and any(version_key(current[i]) < release.min_from_key for i in stale):
            problems.append(f"{item.component} {sorted(set(current[i] for i in stale))} is below the lowest "
                            f"version {release} upgrades from ({release.min_from_version})")
            continue
        spec = ctx.specs.get(item.component)
        method = spec.update_method if spec else UpdateMethod.SIMPLE_UPDATE
        if method == UpdateMethod.INBAND:
            problems.append(f"{item.component} is updated in-band; the Redfish driver cannot do it")
            continue
        if method == UpdateMethod.MULTIPART_PUSH and not release.image_file:
            method = UpdateMethod.SIMPLE_UPDATE  # only a URL: the BMC pulls the image (SimpleUpdate ImageURI)
        work.append({"release": release.pk, "component": item.component, "version": release.version,
                     "image": release.image_url or (release.image_file.url if release.image_file else ""),
                     "method": method,
                     "activation": spec.activation if spec else "none", "targets": stale, "verify": inv,
                     "related": sorted({r["@odata.id"] for i in stale for r in docs[i].get("RelatedItem") or []
                                        if isinstance(r, dict) and r.get("@odata.id")})})
    if problems:
        return _fail(target, ErrorClass.FIRMWARE, "precheck: " + "; ".join(problems), [], before=before)
    if not work:
        return Outcome(TargetState.SKIPPED, {"before": before, "after": before,
                                             "last_error": "already compliant"})
    return Outcome(TargetState.STAGING, {"work": work, "before": before, "item_index": 0, "attempts": 0,
                                         "last_error": "", "error_class": ""}, again_now=True)


def _record(target: RolloutTarget, key: str, kind: str, release_id: int | None) -> tuple[TargetStep, bool]:
    """Record a side effect BEFORE sending it: committed, and flushed to disk (``synchronous_commit`` on for
    this transaction), so no crash of the worker or of PostgreSQL forgets a request the BMC may have received."""
    with transaction.atomic():
        if _pg():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO on")
        try:
            with transaction.atomic():
                return TargetStep.objects.create(idem_key=key, target=target, release_id=release_id, kind=kind,
                                                 requested_at=timezone.now()), True
        except IntegrityError:
            pass
    return TargetStep.objects.get(idem_key=key), False


def _task_result(target: RolloutTarget, step: TargetStep, task: Any, work: list[dict[str, Any]],
                 **step_fields: Any) -> Outcome:
    """A finished or running update task -> the target's next step (``step_fields``: more to write on the step)."""
    now = timezone.now()
    item = work[target.item_index]
    if not task.done:
        deadline = target.deadline_at or (now + dt.timedelta(seconds=settings.FLEET_ROLLOUT_TASK_TIMEOUT_SECONDS))
        if step_fields:
            TargetStep.objects.filter(pk=step.pk).update(**step_fields)
        if now >= deadline:
            TargetStep.objects.filter(pk=step.pk).update(outcome="timeout", messages=task.messages[-5:])
            return _fail(target, ErrorClass.INCONCLUSIVE,
                         f"update task {task.uri} still {task.state} at {task.percent}% after "
                         f"{settings.FLEET_ROLLOUT_TASK_TIMEOUT_SECONDS}s", [])
        return _later(target, task.retry_after or 1, deadline_at=deadline, bmc_task_uri=task.uri)
    TargetStep.objects.filter(pk=step.pk).update(outcome=task.state.lower(), finished_at=now,
                                                 messages=task.messages[-10:], **step_fields)
    if not task.ok:
        aborted = any("TaskAborted" in m for m in task.message_ids) and not any(
            "Failed" in m for m in task.message_ids)
        if aborted:  # the BMC rebooted under the task: not the image's fault; send it again
            TargetStep.objects.filter(pk=step.pk).update(idem_key=f"{step.idem_key}:aborted:{step.pk}")
            return _later(target, 2, last_error=task.failure(), bmc_task_uri="", deadline_at=None)
        return _fail(target, ErrorClass.FIRMWARE, f"{item['component']} {item['version']}: {task.failure()}",
                     [item["release"]])
    nxt = target.item_index + 1
    if nxt < len(work):
        return Outcome(TargetState.STAGING, {"item_index": nxt, "bmc_task_uri": "", "deadline_at": None,
                                             "attempts": 0}, again_now=True)
    return Outcome(TargetState.DRAINING, {"item_index": 0, "bmc_task_uri": "", "deadline_at": None,
                                          "attempts": 0, "last_error": ""}, again_now=True)


def _image_bytes(item: dict[str, Any]) -> bytes | None:
    """The uploaded image of a multipart push (a release with only a URL is pulled by the BMC instead)."""
    if item["method"] != UpdateMethod.MULTIPART_PUSH:
        return None
    from firmware.models import Release

    release = Release.objects.get(pk=item["release"])
    with release.image_file.open("rb") as handle:
        return handle.read()


def _staging(target: RolloutTarget, ctx: _Context) -> Outcome:
    """Stage the current bundle item: one update request per (target, release), ever. A recorded request is
    reconciled (its task, the BMC's task list, the inventory) rather than sent again."""
    work = target.work
    item = work[target.item_index]
    client = _client(target)
    key = f"{target.pk}:{item['release']}:update"
    step, to_send = ctx.step(target, key)
    if step is not None and not to_send:
        task_uri = step.bmc_task_uri or target.bmc_task_uri
        if task_uri:
            try:
                return _task_result(target, step, client.task(task_uri), work)
            except BmcError as exc:
                if exc.status != 404:
                    raise
        found = client.find_update_task(image_uri=item["image"], targets=item["targets"])
        if found is not None:  # the request reached the BMC; its answer was lost: adopt its task
            TargetStep.objects.filter(pk=step.pk).update(bmc_task_uri=found.uri, messages=["adopted after a lost reply"])
            step.bmc_task_uri = found.uri
            return _task_result(target, step, found, work)
        versions = client.versions(item["targets"])
        if all(version_key(v) == version_key(item["version"]) for v in versions.values()):
            return _task_result(target, step, _DoneTask(), work)
        # No trace on the BMC: the request never arrived (refused before processing, or the worker died before
        # sending). Sending it now is the first request the BMC sees.
        TargetStep.objects.filter(pk=step.pk).update(
            messages=[*step.messages, f"{timezone.now():%H:%M:%S} no trace on the BMC: sent again"][-20:])
    elif step is None:
        step, created = _record(target, key, "update", item["release"])
        if not created:
            return _later(target, 1)  # raced with another step; reconcile next time
    accepted = client.update(image_uri=item["image"], targets=item["targets"], method=item["method"], stage=True,
                             image=_image_bytes(item))
    sent = {"bmc_task_uri": accepted.task_uri, "response_status": accepted.status}
    step.bmc_task_uri = accepted.task_uri
    if accepted.task is not None and accepted.task.done:
        return _task_result(target, step, accepted.task, work, **sent)
    if not accepted.task_uri:
        return _task_result(target, step, _DoneTask(), work, **sent)  # 204 without a task: accepted and done
    TargetStep.objects.filter(pk=step.pk).update(**sent)
    retry = accepted.task.retry_after if accepted.task and accepted.task.retry_after else 1
    return _later(target, retry, bmc_task_uri=accepted.task_uri, last_error="",
                  deadline_at=timezone.now() + dt.timedelta(seconds=settings.FLEET_ROLLOUT_TASK_TIMEOUT_SECONDS))


class _DoneTask:
    uri = ""
    state = "Completed"
    status = "OK"
    done = True
    ok = True
    percent = 100
    retry_after = None
    messages: list[dict[str, Any]] = []
    message_ids: list[str] = []


def _draining(target: RolloutTarget, ctx: _Context) -> Outcome:
    """Wait for an activation window (a freeze always wins) and for room under max-unavailable; then activate.
    (Staging needs neither: images are staged outside windows.)"""
    strategy = ctx.strategy(target.rollout)
    now = timezone.now()
    pools = ctx.pools.get(target.server_id, [])
    verdict = activation_allowed(at=now, windows=ctx.windows_for(target.site_id, pools),
                                 require_window=strategy.require_window, window_ids=strategy.window_ids)
    if not verdict.allowed:
        wait = (verdict.retry_at - now).total_seconds() if verdict.retry_at else 60
        return _later(target, min(wait, 60), last_error=f"waiting: {verdict.reason}")
    capped = strategy.max_unavailable_per_site or (strategy.max_unavailable_per_pool and pools)
    if not capped:
        return Outcome(TargetState.ACTIVATING, {"last_error": "", "deadline_at": None}, again_now=True)
    with transaction.atomic():
        busy = RolloutTarget.objects.filter(state__in=TARGET_PAST_NO_RETURN).exclude(pk=target.pk)
        if _pg():
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [SITE_LOCK_NS, target.site_id or 0])
        if strategy.max_unavailable_per_site and target.site_id is not None:
            n = busy.filter(site_id=target.site_id).count()
            if n >= strategy.max_unavailable_per_site:
                return _later(target, 3, last_error=f"waiting: {n} servers of the site unavailable")
        if strategy.max_unavailable_per_pool and pools:
            from firmware.models import Pool

            through = Pool.servers.through.objects.filter(pool_id__in=pools).values("server_id")
            n = busy.filter(server_id__in=through).count()
            if n >= strategy.max_unavailable_per_pool:
                return _later(target, 3, last_error=f"waiting: {n} servers of the pool unavailable")
        # Claim the slot inside the lock: the CAS below is what others count.
        updated = RolloutTarget.objects.filter(pk=target.pk, state=target.state, version=target.version).update(
            state=TargetState.ACTIVATING, version=F("version") + 1, last_error="", deadline_at=None,
            next_run_at=timezone.now() + dt.timedelta(seconds=settings.FLEET_ROLLOUT_LEASE_SECONDS))
    if updated:
        target.state, target.version = TargetState.ACTIVATING, target.version + 1
    return _AlreadyApplied(updated)


class _AlreadyApplied(Outcome):
    """The step wrote its own compare-and-set (under a lock); ``_apply`` must not write again. The target (at its
    new version) goes on at once if it was applied."""

    def __init__(self, applied: int) -> None:
        super().__init__(state="")
        self.applied = applied


def _step_keys(target: RolloutTarget) -> list[str]:
    """Every idempotency key a target's steps may have recorded (one update per bundle item, the activation
    actions)."""
    work = target.work or []
    return ([f"{target.pk}:{item['release']}:update" for item in work]
            + [f"{target.pk}:{action}" for action in _activation_actions(work)] if work else [])


def _activation_actions(work: list[dict[str, Any]]) -> list[str]:
    return ["activate", *(f"reset:{kind}" for kind in resets_for({w["activation"] for w in work}))]


def _activating(target: RolloutTarget, ctx: _Context) -> Outcome:
    """One side effect per step: Activate the staged images, then each reset their activation needs. Each is
    recorded before it is sent; a recorded one is not sent again (verifying re-sends a reset only when it was
    never confirmed and the versions show it did not happen)."""
    client = _client(target)
    work = target.work
    for action in _activation_actions(work):
        key = f"{target.pk}:{action}"
        step, to_send = ctx.step(target, key)
        if step is not None and step.response_status is not None:
            continue  # sent and confirmed
        if step is None:
            step, created = _record(target, key, "activate" if action == "activate" else "reset", None)
            if not created:
                return _later(target, 1)
        # else: recorded but never confirmed (an error, or the worker died around the request): send it again;
        # Activate is idempotent, a reset at worst happens twice (recorded in the step's messages)
        status = _send_action(client, action, work)
        TargetStep.objects.filter(pk=step.pk).update(response_status=status, outcome="sent",
                                                     finished_at=timezone.now())
        wait = 2 if action in ("reset:bmc_reset", "reset:ac_power_cycle") else 0
        if wait:
            return _later(target, wait)
        return Outcome(TargetState.ACTIVATING, {}, again_now=True)
    deadline = timezone.now() + dt.timedelta(seconds=settings.FLEET_ROLLOUT_VERIFY_SECONDS)
    return Outcome(TargetState.VERIFYING, {"deadline_at": deadline}, again_now=True)


def _send_action(client: Any, action: str, work: list[dict[str, Any]]) -> int:
    if action == "activate":
        return client.activate(sorted({t for w in work for t in w["targets"]}))
    kind = action.split(":", 1)[1]
    related = sorted({r for w in work if w["activation"] == kind for r in w.get("related", [])})
    return client.reset(kind, related=related)


def _verifying(target: RolloutTarget, ctx: _Context) -> Outcome:
    """Every targeted inventory item must report the new version. A BMC that is rebooting answers later; a
    version still old when the deadline passes is a firmware failure."""
    now = timezone.now()
    work = target.work
    deadline = target.deadline_at or now
    client = _client(target)
    try:
        ids = sorted({i for w in work for i in w["verify"]})
        versions = client.versions(ids)
    except BmcError as exc:
        if exc.error_class == ErrorClass.INFRA and now < deadline:
            bmc_client_forget(target.server.bmc_address)
            return _later(target, exc.retry_after or 2, last_error=f"waiting for the BMC: {exc}"[:2000])
        raise
    wrong = [f"{i} reports {versions.get(i) or 'nothing'}, expected {w['version']}"
             for w in work for i in w["verify"] if version_key(versions.get(i, "")) != version_key(w["version"])]
    after = {w["component"]: sorted({versions.get(i, "") for i in w["verify"]}) for w in work}
    if not wrong:
        members = [{"Id": i, "Version": v} for i, v in versions.items()]
        return Outcome(TargetState.SUCCEEDED, {"after": after, "last_error": "", "deadline_at": None},
                       succeeded=(target.server, [w["release"] for w in work], members))
    unconfirmed = next((st for st in ctx.steps[target.pk].values()
                        if st.kind == "reset" and st.response_status is None), None)
    if unconfirmed is not None:  # recorded, never confirmed (the worker died around the request): send it once more
        kind = unconfirmed.idem_key.rsplit(":", 1)[-1]
        status = _send_action(client, f"reset:{kind}", work)
        TargetStep.objects.filter(pk=unconfirmed.pk).update(response_status=status, outcome="sent again",
                                                            finished_at=now)
        return _later(target, 2)
    if now < deadline:
        return _later(target, 2, last_error="waiting: " + "; ".join(wrong[:3]))
    return _fail(target, ErrorClass.FIRMWARE, "verification: " + "; ".join(wrong[:5]),
                 [w["release"] for w in work if any(version_key(versions.get(i, "")) != version_key(w["version"])
                                                    for i in w["verify"])], after=after)


def _flush_successes(ctx: _Context) -> None:
    """Count the chunk's successes on their releases (one UPDATE per release, not one per target on a hot row)
    and record the verified versions as observed firmware (one COPY for server components). A worker killed
    before this loses a chunk's counts and observations, never a target's state: the next inventory sweep
    observes the versions again."""
    if not ctx.succeeded:
        return
    per_release: Counter[int] = Counter(r for _, releases, _ in ctx.succeeded for r in releases)
    from firmware.models import Release

    for release_id, n in per_release.items():
        Release.objects.filter(pk=release_id).update(success_count=F("success_count") + n)
    try:
        from firmware.services.catalog import PER_GPU
        from firmware.services.observations import SOURCE, firmware_inventory_record
    except ImportError:  # the catalog's observation services are not installed
        return
    from inventory import services as inventory_services

    specs = [s for s in ctx.specs.values() if s.inventory_pattern] or None
    now = timezone.now()
    server_rows, per_gpu = [], []
    for server, _releases, members in ctx.succeeded:
        found = components_from_inventory(members, specs)
        server_rows += [(server.pk, c, v) for c, _i, v in found if c not in PER_GPU]
        if any(c in PER_GPU for c, _i, _v in found):
            per_gpu.append((server, members))
    with transaction.atomic():
        if server_rows:
            inventory_services.firmware_observe_many(server_versions=server_rows, source=SOURCE, seen_at=now,
                                                     actor=ENGINE)
        for server, members in per_gpu:
            firmware_inventory_record(server=server, members=members, seen_at=now, actor=ENGINE)
