"""Targets held for a person: a request went unanswered and the BMC's standard evidence could not tell whether it
landed (two settle periods, asked twice: ``side_effects.settle_step``). The engine never sends such a request
again by itself. A person checks the BMC (its console, its event or audit log, the component itself) and records
what they found:

- **it landed**: the step is marked found; retried, the target goes on from there (verification decides);
- **it did not land**: the step is marked not sent; retried, the target sends it once more (a fresh record, a
  fresh settle if that answer is lost too).

Either way the target stays failed (inconclusive) until the rollout's exceptions are retried
(``rollout_retry_exceptions``): the determination is recorded and audited with the person's note, the retry is
the usual one. Only the step the engine held on can be resolved, and only once.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models.functions import Now

from firmware.models import ErrorClass, RolloutTarget, TargetState, TargetStep
from firmware.services.engine import clock
from firmware.services.engine.side_effects import AMBIGUOUS, FOUND, NOT_SENT, SENDING, UNKNOWN_NOTE
from fleet.audit import Actor, audit_write
from fleet.models import AuditAction

RESOLVED_NOTE = "resolved: "


@dataclass(frozen=True)
class HeldStep:
    target: RolloutTarget
    step: TargetStep
    evidence: list[str]  # the UNKNOWN findings, oldest first


def held_step(target: RolloutTarget) -> TargetStep | None:
    """The unanswered step a failed, inconclusive target was held on (None when it was not held on one)."""
    if target.state != TargetState.FAILED or target.error_class != ErrorClass.INCONCLUSIVE:
        return None
    steps = TargetStep.objects.filter(target=target, outcome__in=(SENDING, AMBIGUOUS)).order_by("-id")
    return next((s for s in steps if any(_unknown(m) for m in s.messages)), None)


def held_steps(targets: list[RolloutTarget]) -> dict[int, HeldStep]:
    """Target id -> its held step, for the failed inconclusive ones among ``targets`` (one query)."""
    ids = [t.pk for t in targets if t.state == TargetState.FAILED and t.error_class == ErrorClass.INCONCLUSIVE]
    by_id = {t.pk: t for t in targets}
    found: dict[int, HeldStep] = {}
    for step in TargetStep.objects.filter(target_id__in=ids, outcome__in=(SENDING, AMBIGUOUS)).order_by("-id"):
        evidence = [m[len(UNKNOWN_NOTE):] for m in step.messages if _unknown(m)]
        if evidence and step.target_id not in found:
            found[step.target_id] = HeldStep(by_id[step.target_id], step, evidence)
    return found


@transaction.atomic
def rollout_target_resolve(*, target: RolloutTarget, actor: Actor, landed: bool, note: str) -> TargetStep:
    """Record what a person found on the BMC for a held target's unanswered request (see the module docstring).
    ``note`` (what was checked) is required. Raises ValidationError when the target is not held on a request."""
    note = (note or "").strip()
    if not note:
        raise ValidationError({"note": "Say what you checked on the BMC (kept in the audit log)."}, code="required")
    target = RolloutTarget.objects.select_for_update().select_related("server").get(pk=target.pk)
    step = held_step(target)
    if step is None:
        raise ValidationError("This target is not held on an unanswered request: nothing to resolve.",
                              code="not_held")
    verdict = "it landed" if landed else "it did not land: send it again"
    who = getattr(actor, "username", "") or str(actor)
    messages = [RESOLVED_NOTE + m if _unknown(m) else m for m in step.messages]
    messages.append(f"{clock.now():%H:%M:%S} checked by {who}: {verdict} ({note})"[:300])
    fields = {"messages": messages[-20:]}
    if landed:
        fields |= {"outcome": FOUND, "response_status": 0, "finished_at": Now()}
    else:
        fields |= {"outcome": NOT_SENT}
    TargetStep.objects.filter(pk=step.pk).update(**fields)
    RolloutTarget.objects.filter(pk=target.pk).update(
        last_error=f"{target.last_error} Checked by {who}: {verdict}. Retry the exceptions to go on."[-2000:])
    audit_write(actor=actor, action=AuditAction.UPDATE, obj=target.rollout,
                changes={"target": target.pk, "step": step.idem_key, "landed": landed},
                message=f"{target.server.hostname}: {step.kind} {step.idem_key} checked on the BMC, {verdict}: "
                        f"{note}"[:500])
    step.refresh_from_db()
    return step


def _unknown(message: object) -> bool:
    return isinstance(message, str) and message.startswith(UNKNOWN_NOTE)


__all__ = ["HeldStep", "held_step", "held_steps", "rollout_target_resolve"]
