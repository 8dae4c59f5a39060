"""The decommission request's state machine: which action moves a request from which states to which state, and
the role it needs. Services, views, API and admin ask this table; none restates it.

    requested -> approved -> drained -> inventoried -> sanitizing -> verifying -> validated -> certified
    -> released -> in_transit -> disposed -> closed
    side states: on_hold (legal hold; blocks sanitizing), sanitize_failed (retry or escalate),
    escalated_destroy (destruction recorded -> verifying), cancelled (only before sanitizing)
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import ValidationError

from decommission.models import RequestState
from fleet.roles import APPROVER, OPERATOR

S = RequestState


@dataclass(frozen=True)
class Action:
    name: str
    label: str
    sources: frozenset[str]
    target: str
    role: str
    worker: bool = False  # taken by the workers (or by a person on their behalf), not shown as a button


BEFORE_SANITIZING = frozenset({S.REQUESTED, S.APPROVED, S.DRAINED, S.INVENTORIED})

ACTIONS: dict[str, Action] = {a.name: a for a in [
    Action("approve", "Approve", frozenset({S.REQUESTED}), S.APPROVED, APPROVER),
    Action("drain", "Mark drained", frozenset({S.APPROVED}), S.DRAINED, OPERATOR),
    Action("inventory", "Record media", frozenset({S.DRAINED}), S.INVENTORIED, OPERATOR),
    Action("sanitize", "Start sanitizing", frozenset({S.INVENTORIED, S.SANITIZE_FAILED}), S.SANITIZING, OPERATOR),
    Action("sanitized", "All media done", frozenset({S.SANITIZING}), S.VERIFYING, OPERATOR, worker=True),
    Action("fail", "Sanitize failed", frozenset({S.SANITIZING}), S.SANITIZE_FAILED, OPERATOR, worker=True),
    Action("escalate", "Escalate to destroy", frozenset({S.SANITIZE_FAILED, S.SANITIZING}), S.ESCALATED_DESTROY,
           OPERATOR),
    Action("destroyed", "Record destruction", frozenset({S.ESCALATED_DESTROY}), S.VERIFYING, OPERATOR),
    Action("validate", "Validate", frozenset({S.VERIFYING}), S.VALIDATED, APPROVER),
    Action("certify", "Issue certificates", frozenset({S.VALIDATED}), S.CERTIFIED, OPERATOR),
    Action("release", "Release", frozenset({S.CERTIFIED}), S.RELEASED, APPROVER),
    Action("ship", "Hand off (in transit)", frozenset({S.RELEASED}), S.IN_TRANSIT, OPERATOR),
    Action("dispose", "Record disposal", frozenset({S.IN_TRANSIT}), S.DISPOSED, OPERATOR),
    Action("close", "Close", frozenset({S.DISPOSED}), S.CLOSED, APPROVER),
    Action("hold", "Legal hold", BEFORE_SANITIZING | {S.SANITIZE_FAILED, S.SANITIZING}, S.ON_HOLD, APPROVER),
    Action("release_hold", "Release hold", frozenset({S.ON_HOLD}), "", APPROVER),  # back to the held state
    Action("cancel", "Cancel", BEFORE_SANITIZING | {S.ON_HOLD}, S.CANCELLED, OPERATOR),
]}

FINAL = frozenset({S.CLOSED, S.CANCELLED})


class IllegalTransition(ValidationError):
    def __init__(self, action: str, state: str, detail: str = "") -> None:
        allowed = ", ".join(a.name for a in available(state)) or "none"
        super().__init__(detail or f"A request in '{state}' cannot '{action}'. From '{state}' it may: {allowed}.",
                         code="illegal_transition")
        self.action, self.state = action, state


def available(state: str, held_from: str = "") -> list[Action]:
    """Actions a request in ``state`` may take (cancel from a hold only when the held state was before sanitizing)."""
    out = []
    for action in ACTIONS.values():
        if state not in action.sources:
            continue
        if action.name == "cancel" and state == S.ON_HOLD and held_from not in BEFORE_SANITIZING:
            continue
        out.append(action)
    return out


def check(action: str, state: str, held_from: str = "") -> Action:
    """The action, if a request in ``state`` may take it; else ``IllegalTransition``."""
    if action not in ACTIONS:
        raise ValidationError({"action": f"Unknown action '{action}'; actions are {', '.join(ACTIONS)}."})
    if ACTIONS[action] not in available(state, held_from):
        if action == "sanitize" and state == S.ON_HOLD:
            raise IllegalTransition(action, state, "A legal hold blocks sanitizing; release the hold first.")
        raise IllegalTransition(action, state)
    return ACTIONS[action]


def target(action: Action, held_from: str) -> str:
    return held_from if action.name == "release_hold" else action.target
