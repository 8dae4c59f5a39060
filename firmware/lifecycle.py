"""The rollout and target state machines: which transitions each state allows, which actions a person may take
in which states and with which role. The services check transitions here; the views and the API show and
guard their buttons and endpoints from ``ROLLOUT_ACTIONS``; nothing else restates the rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from firmware.models import RolloutState, TargetState
from fleet.roles import APPROVER, OPERATOR, has_role

S = RolloutState

ROLLOUT_TRANSITIONS: dict[str, frozenset[str]] = {
    S.DRAFT: frozenset({S.PLANNED, S.ABORTED}),
    S.PLANNED: frozenset({S.PLANNED, S.AWAITING_APPROVAL, S.ABORTED}),
    S.AWAITING_APPROVAL: frozenset({S.APPROVED, S.PLANNED, S.ABORTED}),
    S.APPROVED: frozenset({S.RUNNING, S.ABORTED}),
    S.RUNNING: frozenset({S.PAUSED, S.COMPLETED, S.COMPLETED_WITH_EXCEPTIONS, S.ABORTED}),
    S.PAUSED: frozenset({S.RUNNING, S.ABORTED, S.ROLLED_BACK}),
    # infra-failed or inconclusive targets left behind: retried (back to running) or rolled back
    S.COMPLETED_WITH_EXCEPTIONS: frozenset({S.RUNNING, S.ROLLED_BACK}),
    S.COMPLETED: frozenset({S.ROLLED_BACK}),
    S.ABORTED: frozenset({S.ROLLED_BACK}),
    S.ROLLED_BACK: frozenset(),
}
TERMINAL_STATES = (S.COMPLETED, S.ABORTED, S.ROLLED_BACK)

T = TargetState
TARGET_TRANSITIONS: dict[str, frozenset[str]] = {
    T.PENDING: frozenset({T.PRECHECK, T.CANCELLED}),
    T.PRECHECK: frozenset({T.STAGING, T.SKIPPED, T.FAILED, T.CANCELLED}),
    T.STAGING: frozenset({T.STAGING, T.DRAINING, T.FAILED, T.CANCELLED}),
    T.DRAINING: frozenset({T.ACTIVATING, T.CANCELLED, T.FAILED}),
    T.ACTIVATING: frozenset({T.ACTIVATING, T.VERIFYING, T.FAILED}),  # past the point of no return: no cancel
    T.VERIFYING: frozenset({T.SUCCEEDED, T.FAILED}),
    T.FAILED: frozenset({T.PENDING}),  # an operator's retry of a rollout's exceptions (infra, inconclusive)
    T.SUCCEEDED: frozenset({T.ROLLED_BACK}),
    T.SKIPPED: frozenset(),
    T.CANCELLED: frozenset(),
    T.ROLLED_BACK: frozenset(),
}
# Failed targets a retry may send back to pending: not the firmware's fault, or not known.
RETRYABLE_ERROR_CLASSES = ("infra", "inconclusive")


@dataclass(frozen=True)
class RolloutAction:
    label: str
    role: str
    states: tuple[str, ...]
    to_state: str
    reason: str = ""  # "required", "optional" or "" (no reason asked)
    confirm: str = ""
    style: str = "secondary"


_NOT_TERMINAL = tuple(s for s in S.values if s not in TERMINAL_STATES)

ROLLOUT_ACTIONS: dict[str, RolloutAction] = {
    "plan": RolloutAction("Re-plan", OPERATOR, (S.DRAFT, S.PLANNED), S.PLANNED),
    "submit": RolloutAction("Submit for approval", OPERATOR, (S.PLANNED,), S.AWAITING_APPROVAL, style="primary"),
    "approve_start": RolloutAction("Approve and start", APPROVER, (S.AWAITING_APPROVAL,), S.RUNNING,
                                   style="primary"),
    "approve": RolloutAction("Approve only", APPROVER, (S.AWAITING_APPROVAL,), S.APPROVED),
    "reject": RolloutAction("Send back", APPROVER, (S.AWAITING_APPROVAL,), S.PLANNED, reason="optional"),
    "start": RolloutAction("Start", OPERATOR, (S.APPROVED,), S.RUNNING, style="primary"),
    "pause": RolloutAction("Pause", OPERATOR, (S.RUNNING,), S.PAUSED, reason="required"),
    "resume": RolloutAction("Resume", OPERATOR, (S.PAUSED,), S.RUNNING, reason="optional", style="primary"),
    "retry_exceptions": RolloutAction(
        "Retry the exceptions", OPERATOR, (S.COMPLETED_WITH_EXCEPTIONS,), S.RUNNING, style="primary",
        confirm="Send the infra-failed and inconclusive targets through the engine again?"),
    "abort": RolloutAction("Abort", OPERATOR, tuple(s for s in _NOT_TERMINAL if s != S.COMPLETED_WITH_EXCEPTIONS),
                           S.ABORTED, reason="optional",
                           confirm="Abort this rollout? Targets not yet activating are cancelled; the others finish.",
                           style="danger"),
    "rollback": RolloutAction("Roll back", OPERATOR, (S.PAUSED, S.COMPLETED, S.COMPLETED_WITH_EXCEPTIONS, S.ABORTED),
                              S.ROLLED_BACK, confirm="Create a rollout back to the previous bundle for the servers "
                                                    "this one activated?", style="danger"),
}


def rollout_can(state: str, to_state: str) -> bool:
    return to_state in ROLLOUT_TRANSITIONS.get(state, frozenset())


def target_can(state: str, to_state: str) -> bool:
    return to_state in TARGET_TRANSITIONS.get(state, frozenset())


def rollout_actions(user: Any, rollout: Any) -> list[tuple[str, RolloutAction]]:
    """The actions this user may take on this rollout now: by role and state; the approver is not the creator;
    a rollback needs a previous bundle."""
    shown = []
    for name, action in ROLLOUT_ACTIONS.items():
        if rollout.state not in action.states or not has_role(user, action.role):
            continue
        if name in ("approve", "approve_start", "reject") and getattr(user, "pk", None) == rollout.created_by_id:
            continue
        if name == "rollback" and rollout.previous_bundle_id is None:
            continue
        shown.append((name, action))
    return shown


def action_role(name: str) -> str:
    return ROLLOUT_ACTIONS[name].role
