"""The GPU lifecycle: which state may follow which, and the guards on entering a state.

This table is the single source of truth; ``services.gpu_transition`` is the only writer.
"""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import ValidationError

from inventory.models import Gpu, GpuState

S = GpuState

ALLOWED: dict[str, frozenset[str]] = {
    S.ORDERED: frozenset({S.RECEIVED}),
    S.RECEIVED: frozenset({S.BURN_IN, S.SPARE, S.RMA}),
    S.BURN_IN: frozenset({S.IN_SERVICE, S.SPARE, S.RMA, S.DRAINED, S.BURN_IN_FAILED}),
    # A failed burn-in waits for a person: retest (back to burn-in), RMA with the failing run, or retire.
    S.BURN_IN_FAILED: frozenset({S.BURN_IN, S.RMA, S.DECOMMISSIONING}),
    S.IN_SERVICE: frozenset({S.DRAINED}),
    S.DRAINED: frozenset({S.IN_SERVICE, S.BURN_IN, S.RMA, S.SPARE, S.DECOMMISSIONING}),
    S.RMA: frozenset({S.RECEIVED, S.DECOMMISSIONING}),
    S.SPARE: frozenset({S.BURN_IN, S.RMA, S.DECOMMISSIONING}),
    S.DECOMMISSIONING: frozenset({S.SANITIZED, S.DRAINED}),
    S.SANITIZED: frozenset({S.DISPOSED}),
    S.DISPOSED: frozenset(),
}

# A guard inspects a GPU about to enter a state and raises ValidationError to refuse it (the GPU still carries its
# current state, so a guard sees where it comes from). The decommission workflow registers its guard for
# ``sanitized`` and ``disposed`` here; the acceptance app registers the burn-in gate (``gate_register``).
Guard = Callable[[Gpu, str], None]
GUARDS: dict[str, list[Guard]] = {}


def register_guard(to_state: str, guard: Guard) -> None:
    GUARDS.setdefault(to_state, []).append(guard)


# The transitions an acceptance gate decides: into service (from burn-in, or back from a drain or a repair) and
# out of burn-in into the spares pool. A GPU back from RMA re-enters at ``received`` and reaches service only
# through ``burn_in``, so the same gate holds on return from repair.
GATED: dict[str, frozenset[str]] = {
    S.IN_SERVICE: frozenset({S.BURN_IN, S.DRAINED}),
    S.SPARE: frozenset({S.BURN_IN}),
}


GATES: list[Guard] = []


def gate_register(gate: Guard) -> None:
    """Register a gate (a layer-2 app's, called from its ``AppConfig.ready()``) on every transition in ``GATED``.
    Page, API, admin and bulk actions all pass through ``check_transition``, so the gate holds everywhere."""
    if gate not in GATES:
        GATES.append(gate)


def is_gated(from_state: str, to_state: str) -> bool:
    return bool(GATES) and from_state in GATED.get(to_state, ())


class IllegalTransition(ValidationError):
    def __init__(self, from_state: str, to_state: str) -> None:
        allowed = ", ".join(sorted(ALLOWED.get(from_state, ()))) or "none (final state)"
        super().__init__(
            f"A GPU cannot go from '{from_state}' to '{to_state}'. From '{from_state}' it may go to: {allowed}.",
            code="illegal_transition",
        )
        self.from_state, self.to_state = from_state, to_state


def check_transition(gpu: Gpu, to_state: str) -> None:
    """Raise ``ValidationError`` unless ``gpu`` may enter ``to_state`` now."""
    if to_state not in GpuState.values:
        raise ValidationError(f"'{to_state}' is not a GPU state; states are {', '.join(GpuState.values)}.",
                              code="unknown_state")
    if to_state not in ALLOWED[gpu.state]:
        raise IllegalTransition(gpu.state, to_state)
    for guard in GUARDS.get(to_state, ()):
        guard(gpu, to_state)
    if is_gated(gpu.state, to_state):
        for gate in GATES:
            gate(gpu, to_state)


def allowed_targets(state: str) -> list[str]:
    return [s for s in GpuState.values if s in ALLOWED[state]]
