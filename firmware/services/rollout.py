"""Every change of a rollout's state: create, plan, submit, approve, start, pause, resume, abort, rollback, and the
demotion of a release that fails too often. Each service is transactional, audited, and a compare-and-set on
``Rollout.version`` (a concurrent change makes it fail with :class:`RolloutConflict`, never apply twice).

State machine (docs/firmware.md)::

    draft -> planned -> awaiting_approval -> approved -> running <-> paused -> completed
    planned -> planned (re-plan)       awaiting_approval -> planned (sent back)
    any state before completed -> aborted          paused | completed | aborted -> rolled_back (+ a new rollout)

Illegal transitions raise :class:`RolloutStateError` (409 in the API).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from firmware.lifecycle import RETRYABLE_ERROR_CLASSES, rollout_can
from firmware.models import (
    Bundle,
    Channel,
    ErrorClass,
    Release,
    Rollout,
    RolloutState,
    RolloutTarget,
    RolloutWave,
    TargetState,
    TargetStep,
    WaveState,
)
from firmware.models.rollout import TARGET_CANCELLABLE
from firmware.services.plan import Plan, Strategy, plan_preview, selector_filter, strategy_parse
from fleet import bulk, dispatch
from fleet.audit import Actor, SystemActor, audit_write
from fleet.models import AuditAction
from fleet.roles import APPROVER, has_role

ENGINE = SystemActor("rollout-engine")

class RolloutStateError(ValidationError):
    """The transition is not allowed from the rollout's current state (HTTP 409)."""


class RolloutConflict(RolloutStateError):
    """The rollout changed since it was read (its version moved): reload and try again (HTTP 409)."""


def _check(rollout: Rollout, to_state: str, verb: str) -> None:
    if not rollout_can(rollout.state, to_state):
        raise RolloutStateError(f"Cannot {verb} a rollout that is {rollout.get_state_display().lower()}.",
                                code="illegal_transition")


def _transition(*, rollout: Rollout, to_state: str, actor: Actor | None, verb: str, message: str = "",
                **fields: Any) -> Rollout:
    """Compare-and-set ``rollout`` from its state and version to ``to_state``; audit it. Caller is atomic."""
    _check(rollout, to_state, verb)
    from_state = rollout.state
    updated = Rollout.objects.filter(pk=rollout.pk, state=from_state, version=rollout.version).update(
        state=to_state, version=F("version") + 1, **fields)
    if not updated:
        raise RolloutConflict("The rollout changed in the meantime; reload it and try again.", code="conflict")
    rollout.refresh_from_db()
    changes: dict[str, list[Any]] = {"state": [from_state, to_state]}
    for name, value in fields.items():
        if name not in {"version"} and not hasattr(value, "resolve_expression"):
            changes[name] = [None, value.isoformat() if isinstance(value, dt.datetime) else
                             getattr(value, "pk", value)]
    audit_write(actor=actor, action=AuditAction.TRANSITION, obj=rollout, changes=changes, message=message or verb)
    return rollout


def _user(actor: Actor | None) -> Any:
    return actor if getattr(actor, "is_authenticated", False) else None


def _previous_bundle(bundle: Bundle) -> Bundle | None:
    """What a rollback goes back to: the platform's current baseline bundle, if it is another bundle."""
    from firmware.models import Baseline

    now = timezone.now()
    baseline = (Baseline.objects.filter(platform_id=bundle.platform_id, pool__isnull=True, valid_from__lte=now)
                .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=now)).exclude(bundle=bundle)
                .order_by("-valid_from", "-id").first())
    return baseline.bundle if baseline else None


# --- create and plan ------------------------------------------------------------------------------------------

@transaction.atomic
def rollout_create(*, name: str, bundle: Bundle, selector: dict[str, Any], strategy: dict[str, Any] | Strategy,
                   actor: Actor, previous_bundle: Bundle | None = None, plan: bool = True,
                   rollback_of: Rollout | None = None) -> Rollout:
    """A draft rollout of ``bundle`` over the servers ``selector`` (the GPU list's filters) picks, planned at once
    unless ``plan=False``. ``strategy`` is validated (``firmware.services.plan.StrategySerializer``); bad input
    raises ValidationError keyed by field (``strategy.waves``, ``selector.site``)."""
    errors: dict[str, list[str]] = {}
    if not name.strip():
        errors["name"] = ["A name is required."]
    revoked = [str(r) for r in Release.objects.filter(bundle_items__bundle=bundle, channel=Channel.REVOKED)]
    if revoked:
        errors["bundle"] = [f"The bundle holds revoked releases: {', '.join(revoked)}."]
    if errors:
        raise ValidationError(errors)
    parsed = strategy if isinstance(strategy, Strategy) else strategy_parse(strategy)
    selector_filter(selector)  # field errors now, not at plan time
    rollout = Rollout.objects.create(
        name=name.strip(), bundle=bundle, previous_bundle=previous_bundle or _previous_bundle(bundle),
        selector=selector, strategy=parsed.as_json(), created_by=_user(actor) or _engine_user(),
        rollback_of=rollback_of)
    audit_write(actor=actor, action=AuditAction.CREATE, obj=rollout,
                changes={"bundle": [None, bundle.pk], "selector": [None, selector],
                         "strategy": [None, parsed.as_json()]})
    if plan:
        rollout = rollout_plan(rollout=rollout, actor=actor)
    return rollout


def _engine_user() -> Any:
    """A rollout needs a creator; system-created ones (the demo) use the first superuser."""
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.filter(is_superuser=True).order_by("id").first()
    if user is None:
        raise ValidationError("A rollout created by the system needs an admin user to own it.")
    return user


def plan_for(rollout: Rollout) -> Plan:
    """The plan the rollout's inputs give now (what ``rollout_plan`` persists)."""
    return plan_preview(bundle=rollout.bundle, selector=rollout.selector, strategy=rollout.strategy)


@transaction.atomic
def rollout_plan(*, rollout: Rollout, actor: Actor | None) -> Rollout:
    """Compute the plan and persist it as waves and targets (draft or planned; re-planning replaces them)."""
    rollout = Rollout.objects.select_for_update().get(pk=rollout.pk)
    _check(rollout, RolloutState.PLANNED, "plan")
    plan = plan_for(rollout)
    if not plan.waves:
        raise ValidationError({"selector": [f"Nothing to update: {len(plan.skipped)} servers selected, "
                                            "all already compliant." if plan.skipped else
                                            "The selector picks no server of the bundle's platform."]})
    RolloutTarget.objects.filter(rollout=rollout).delete()
    RolloutWave.objects.filter(rollout=rollout).delete()
    waves = RolloutWave.objects.bulk_create([
        RolloutWave(rollout=rollout, index=w.index, name=w.name, planned=len(w.server_ids), per_domain=w.per_domain)
        for w in plan.waves])
    targets = []
    for wave, planned in zip(waves, plan.waves, strict=True):
        for server_id in planned.server_ids:
            s = plan.servers[server_id]
            targets.append(RolloutTarget(rollout=rollout, wave=wave, server_id=server_id, unit_key=s.unit_key,
                                         site_id=s.site_id, bmc_class=s.bmc_class, domains=s.domains,
                                         upgrade_path=s.path, before=s.current))
    bulk.insert(RolloutTarget, targets)  # COPY: 12,500 targets in ~0.2 s
    return _transition(rollout=rollout, to_state=RolloutState.PLANNED, actor=actor, verb="plan",
                       message=f"planned {plan.target_count} targets in {len(plan.waves)} waves, "
                               f"{len(plan.skipped)} already compliant",
                       plan_hash=plan.plan_hash, plan_summary=plan.summary(), current_wave=0)


@transaction.atomic
def rollout_update(*, rollout: Rollout, actor: Actor, name: str | None = None,
                   selector: dict[str, Any] | None = None, strategy: dict[str, Any] | None = None) -> Rollout:
    """Change a draft or planned rollout's name, selector or strategy; a changed selector or strategy re-plans."""
    rollout = Rollout.objects.select_for_update().get(pk=rollout.pk)
    if rollout.state not in (RolloutState.DRAFT, RolloutState.PLANNED):
        raise RolloutStateError(f"A rollout that is {rollout.get_state_display().lower()} cannot be edited.",
                                code="illegal_transition")
    changes: dict[str, list[Any]] = {}
    if name is not None and name.strip() != rollout.name:
        changes["name"] = [rollout.name, name.strip()]
        rollout.name = name.strip()
    if selector is not None and selector != rollout.selector:
        selector_filter(selector)
        changes["selector"] = [rollout.selector, selector]
        rollout.selector = selector
    if strategy is not None:
        parsed = strategy_parse(strategy).as_json()
        if parsed != rollout.strategy:
            changes["strategy"] = [rollout.strategy, parsed]
            rollout.strategy = parsed
    if not changes:
        return rollout
    rollout.version += 1
    rollout.save(update_fields=["name", "selector", "strategy", "version"])
    audit_write(actor=actor, action=AuditAction.UPDATE, obj=rollout, changes=changes)
    if {"selector", "strategy"} & set(changes):
        rollout = rollout_plan(rollout=rollout, actor=actor)
    return rollout


# --- approval and the operator's actions ----------------------------------------------------------------------

@transaction.atomic
def rollout_submit(*, rollout: Rollout, actor: Actor) -> Rollout:
    """Ask for approval of the planned rollout."""
    return _transition(rollout=rollout, to_state=RolloutState.AWAITING_APPROVAL, actor=actor, verb="submit")


@transaction.atomic
def rollout_approve(*, rollout: Rollout, actor: Actor) -> Rollout:
    """Approve (two-person rule: an approver who did not create the rollout; the model has a constraint too)."""
    _check(rollout, RolloutState.APPROVED, "approve")
    if not has_role(actor, APPROVER):  # type: ignore[arg-type]
        raise ValidationError("Only an approver may approve a rollout.", code="not_approver")
    if getattr(actor, "pk", None) == rollout.created_by_id:
        raise ValidationError("The creator of a rollout cannot approve it: a second person must.",
                              code="two_person_rule")
    return _transition(rollout=rollout, to_state=RolloutState.APPROVED, actor=actor, verb="approve",
                       approved_by=actor, approved_at=timezone.now())


@transaction.atomic
def rollout_approve_and_start(*, rollout: Rollout, actor: Actor) -> Rollout:
    """Approve and start in one step (the approver's shortcut): both transitions audited, or neither."""
    rollout = rollout_approve(rollout=rollout, actor=actor)
    return rollout_start(rollout=rollout, actor=actor)


@transaction.atomic
def rollout_reject(*, rollout: Rollout, actor: Actor, reason: str) -> Rollout:
    """Send a rollout awaiting approval back to planned."""
    return _transition(rollout=rollout, to_state=RolloutState.PLANNED, actor=actor, verb="reject", message=reason)


@transaction.atomic
def rollout_start(*, rollout: Rollout, actor: Actor) -> Rollout:
    """Start an approved rollout: the canary wave (or the first) begins; the engine's tick does the rest."""
    _check(rollout, RolloutState.RUNNING, "start")
    _refuse_revoked(rollout)
    now = timezone.now()
    rollout = _transition(rollout=rollout, to_state=RolloutState.RUNNING, actor=actor, verb="start",
                          started_at=now, current_wave=0)
    RolloutWave.objects.filter(rollout=rollout, index=0).update(state=WaveState.RUNNING, started_at=now)
    _kick()
    return rollout


@transaction.atomic
def rollout_pause(*, rollout: Rollout, actor: Actor | None, reason: str) -> Rollout:
    """Stop admitting targets; targets past activation finish and hold. Pausing a paused rollout does nothing."""
    reason = reason.strip()
    if not reason:
        raise ValidationError({"reason": ["Say why the rollout is paused."]})
    if rollout.state == RolloutState.PAUSED:
        return rollout
    return _transition(rollout=rollout, to_state=RolloutState.PAUSED, actor=actor, verb="pause", message=reason,
                       pause_reason=reason, paused_at=timezone.now())


def _refuse_revoked(rollout: Rollout) -> None:
    revoked = [str(r) for r in Release.objects.filter(bundle_items__bundle_id=rollout.bundle_id,
                                                      channel=Channel.REVOKED)]
    if revoked:
        raise RolloutStateError(f"The bundle holds revoked releases ({', '.join(revoked)}): this rollout cannot "
                                "run. Roll back, or abort and plan a new bundle.", code="revoked")


@transaction.atomic
def rollout_resume(*, rollout: Rollout, actor: Actor, reason: str = "") -> Rollout:
    """Resume a paused rollout. The failures seen so far in the current wave are acknowledged (its gate counts
    only new ones); a wave whose gate failed runs again. ``reason`` is kept in the audit event."""
    from firmware.services.gates import wave_counts

    _check(rollout, RolloutState.RUNNING, "resume")
    _refuse_revoked(rollout)
    rollout = _transition(rollout=rollout, to_state=RolloutState.RUNNING, actor=actor, verb="resume",
                          message=reason.strip(), pause_reason="", paused_at=None)
    wave = RolloutWave.objects.filter(rollout=rollout, index=rollout.current_wave).first()
    if wave is not None:
        counts = wave_counts(wave)
        wave.gate_result = {**(wave.gate_result or {}), "ack": {"firmware_failed": counts.firmware_failed,
                                                                "inconclusive": counts.inconclusive}}
        if wave.state == WaveState.FAILED:
            wave.state, wave.finished_at = WaveState.RUNNING, None
        wave.save(update_fields=["gate_result", "state", "finished_at"])
    _kick()
    return rollout


@transaction.atomic
def rollout_abort(*, rollout: Rollout, actor: Actor | None, reason: str = "") -> Rollout:
    """Abort: targets that have not reached activation are cancelled (a staged image stays staged, never
    activated); targets already activating finish and hold."""
    now = timezone.now()
    rollout = _transition(rollout=rollout, to_state=RolloutState.ABORTED, actor=actor, verb="abort",
                          message=reason, stop_requested=True, finished_at=now)
    cancelled = RolloutTarget.objects.filter(rollout=rollout, state__in=TARGET_CANCELLABLE).update(
        state=TargetState.CANCELLED, version=F("version") + 1, finished_at=now, next_run_at=None,
        last_error=f"cancelled: {reason or 'rollout aborted'}")
    audit_write(actor=actor, action=AuditAction.UPDATE, obj=rollout, message=f"cancelled {cancelled} targets",
                changes={"cancelled_targets": [0, cancelled]})
    return rollout


def _activated_server_ids(rollout: Rollout) -> list[int]:
    """Servers whose new firmware was (or may have been) activated: an activation step was sent."""
    return sorted(set(TargetStep.objects.filter(target__rollout=rollout, kind__in=("activate", "reset"))
                      .values_list("target__server_id", flat=True)))


@transaction.atomic
def rollout_rollback(*, rollout: Rollout, actor: Actor) -> Rollout:
    """A NEW rollout back to ``previous_bundle`` for the servers this one activated (same strategy, planned, to be
    approved like any other); this one becomes rolled back. Returns the new rollout."""
    if rollout.previous_bundle_id is None:
        raise ValidationError({"previous_bundle": ["This rollout has no previous bundle to go back to."]})
    _check(rollout, RolloutState.ROLLED_BACK, "roll back")
    server_ids = _activated_server_ids(rollout)
    if not server_ids:
        raise ValidationError("No server of this rollout was activated: there is nothing to roll back.",
                              code="nothing_to_roll_back")
    if rollout.state == RolloutState.PAUSED:
        rollout_abort(rollout=rollout, actor=actor, reason="rolled back")
        rollout.refresh_from_db()
    previous = rollout.previous_bundle
    assert previous is not None
    _transition(rollout=rollout, to_state=RolloutState.ROLLED_BACK, actor=actor, verb="roll back",
                message=f"rolled back {len(server_ids)} servers to {previous}")
    return rollout_create(name=f"Rollback of {rollout.name}"[:120], bundle=previous,
                          selector={"_server_ids": server_ids}, strategy=rollout.strategy, actor=actor,
                          previous_bundle=rollout.bundle, rollback_of=rollout)


# --- engine-side transitions (called by firmware.services.engine) ----------------------------------------------

def rollout_engine_pause(*, rollout_id: int, reason: str) -> bool:
    """The engine pauses a running rollout (a gate failed or was inconclusive). False if it was not running."""
    rollout = Rollout.objects.select_for_update().get(pk=rollout_id)
    if rollout.state != RolloutState.RUNNING:
        return False
    rollout_pause(rollout=rollout, actor=ENGINE, reason=reason)
    return True


def rollout_engine_complete(*, rollout: Rollout) -> Rollout:
    """The last wave passed: completed, or completed with exceptions when targets failed on infrastructure or
    stayed inconclusive (listed on the page, in the API and the drift report; ``rollout_retry_exceptions``)."""
    exceptions = exception_targets(rollout).count()
    if exceptions:
        return _transition(rollout=rollout, to_state=RolloutState.COMPLETED_WITH_EXCEPTIONS, actor=ENGINE,
                           verb="complete with exceptions", finished_at=timezone.now(),
                           message=f"completed with {exceptions} target(s) failed on infrastructure or inconclusive")
    return _transition(rollout=rollout, to_state=RolloutState.COMPLETED, actor=ENGINE, verb="complete",
                       finished_at=timezone.now())


def exception_targets(rollout: Rollout) -> Any:
    """Targets a rollout left behind that were not the firmware's fault (infra) or not known (inconclusive)."""
    return RolloutTarget.objects.filter(rollout=rollout, state=TargetState.FAILED,
                                        error_class__in=RETRYABLE_ERROR_CLASSES)


@transaction.atomic
def rollout_retry_exceptions(*, rollout: Rollout, actor: Actor) -> Rollout:
    """Send a rollout's exception targets through the engine again, in a new wave (one click on the page or
    ``POST .../retry_exceptions/``): back to pending with fresh attempts; a side effect recorded earlier is
    reconciled with the BMC, never sent blindly."""
    _check(rollout, RolloutState.RUNNING, "retry the exceptions of")
    _refuse_revoked(rollout)
    ids = list(exception_targets(rollout).values_list("id", flat=True))
    if not ids:
        raise ValidationError("This rollout has no infra-failed or inconclusive targets to retry.",
                              code="nothing_to_retry")
    last = RolloutWave.objects.filter(rollout=rollout).order_by("-index").first()
    index = (last.index + 1) if last else 0
    now = timezone.now()
    wave = RolloutWave.objects.create(rollout=rollout, index=index, name=f"retry {index}", planned=len(ids),
                                      state=WaveState.RUNNING, started_at=now)
    RolloutTarget.objects.filter(id__in=ids).update(
        wave=wave, state=TargetState.PENDING, version=F("version") + 1, attempts=0, error_class="",
        last_error="retry requested", next_run_at=None, finished_at=None, deadline_at=None, item_index=0,
        bmc_task_uri="", lease_owner="", lease_until=None)
    rollout = _transition(rollout=rollout, to_state=RolloutState.RUNNING, actor=actor, verb="retry exceptions",
                          message=f"retrying {len(ids)} target(s) in {wave.name}", current_wave=index,
                          finished_at=None)
    _kick()
    return rollout


def infra_failures(rollout: Rollout) -> int:
    return RolloutTarget.objects.filter(rollout=rollout, error_class=ErrorClass.INFRA).count()


def _kick() -> None:
    """Run a tick as soon as the transaction commits (no wait for beat; no broker: beat's next tick does it)."""
    if not getattr(settings, "CELERY_TASK_ALWAYS_EAGER", False):
        dispatch.send_on_commit("firmware.tasks.rollout_tick_task")
