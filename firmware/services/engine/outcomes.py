"""What a step decides (Outcome) and how it is written: compare-and-set of one row or a whole chunk."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F

from firmware.models import ErrorClass, RolloutTarget, TargetState
from firmware.services.demotion import release_check_demotion, release_record_outcomes
from firmware.services.engine import clock
from firmware.services.rollout import rollout_engine_pause


@dataclass
class Outcome:
    """What one step decided: the new state and fields, and whether the next step is due at once."""

    state: str
    fields: dict[str, Any] = field(default_factory=dict)
    again_now: bool = False
    after: list[Any] = field(default_factory=list)  # callables run in the CAS's transaction if it applied
    succeeded: tuple[Any, list[int], list[dict[str, Any]]] | None = None  # (server, releases, members): counted
    # and observed once per chunk (``flush_successes``)


class AlreadyApplied(Outcome):
    """The step wrote its own compare-and-set (under a lock); ``apply_one`` must not write again. The target (at its
    new version) goes on at once if it was applied."""

    def __init__(self, applied: int) -> None:
        super().__init__(state="")
        self.applied = applied


def later(target: RolloutTarget, seconds: float, **fields: Any) -> Outcome:
    return Outcome(target.state, {"next_run_at": clock.now() + dt.timedelta(seconds=max(0.2, seconds)),
                                  **fields})


def fail(target: RolloutTarget, error_class: str, message: str, release_ids: list[int], **fields: Any) -> Outcome:
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


def current_releases(target: RolloutTarget) -> list[int]:
    work = target.work or []
    if target.state == TargetState.STAGING and target.item_index < len(work):
        return [work[target.item_index]["release"]]
    return [w["release"] for w in work]


def _fields(outcome: Outcome) -> dict[str, Any]:
    fields = dict(outcome.fields)
    if outcome.state in (TargetState.SUCCEEDED, TargetState.FAILED, TargetState.SKIPPED):
        fields.setdefault("finished_at", clock.now())
        fields.setdefault("next_run_at", None)
    if outcome.again_now:
        fields["next_run_at"] = clock.now() + dt.timedelta(seconds=settings.FLEET_ROLLOUT_LEASE_SECONDS)
    return fields


def apply_one(target: RolloutTarget, outcome: Outcome) -> bool:
    """Compare-and-set one step's result; run its after-work in the same transaction. False if the row moved."""
    fields = {"state": outcome.state, "version": F("version") + 1, "lease_owner": "", "lease_until": None,
              **_fields(outcome)}
    cas = RolloutTarget.objects.filter(pk=target.pk, state=target.state, version=target.version, fence=target.fence)
    if not outcome.after:
        return bool(cas.update(**fields))  # one statement (autocommit)
    with transaction.atomic():
        updated = cas.update(**fields)
        if updated:
            for after in outcome.after:
                after()
    return bool(updated)


# Columns a step may change, with their PostgreSQL array types (for ``apply_many``).
_CAS_COLUMNS = (("state", "varchar"), ("next_run_at", "timestamptz"), ("deadline_at", "timestamptz"),
                ("work", "jsonb"), ("before", "jsonb"), ("after", "jsonb"), ("item_index", "int"),
                ("attempts", "int"), ("bmc_task_uri", "varchar"), ("last_error", "text"),
                ("error_class", "varchar"), ("finished_at", "timestamptz"))


def apply_many(pending: list[tuple[RolloutTarget, Outcome]]) -> set[int]:
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
    sql = (f'UPDATE {table} t SET {sets}, version = t.version + 1, lease_owner = \'\', lease_until = NULL '
           f'FROM unnest(%s::bigint[], %s::int[], %s::varchar[], %s::bigint[], {arrays}) '
           f'AS v(id, old_version, old_state, fence, {names}) '
           f'WHERE t.id = v.id AND t.version = v.old_version AND t.state = v.old_state AND t.fence = v.fence '
           f'RETURNING t.id')
    params = [[t.pk for t, _ in pending], [t.version for t, _ in pending], [t.state for t, _ in pending],
              [t.fence for t, _ in pending],
              *(columns[name] for name, _ in _CAS_COLUMNS)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()}
