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
    S.BURN_IN: frozenset({S.IN_SERVICE, S.SPARE, S.RMA, S.DRAINED}),
    S.IN_SERVICE: frozenset({S.DRAINED}),
    S.DRAINED: frozenset({S.IN_SERVICE, S.BURN_IN, S.RMA, S.SPARE, S.DECOMMISSIONING}),
    S.RMA: frozenset({S.RECEIVED, S.DECOMMISSIONING}),
    S.SPARE: frozenset({S.BURN_IN, S.RMA, S.DECOMMISSIONING}),
    S.DECOMMISSIONING: frozenset({S.SANITIZED, S.DRAINED}),
    S.SANITIZED: frozenset({S.DISPOSED}),
    S.DISPOSED: frozenset(),
}

# A guard inspects a GPU about to enter a state and raises ValidationError to refuse it.
# The decommission workflow registers its guard for ``sanitized`` and ``disposed`` here.
Guard = Callable[[Gpu, str], None]
GUARDS: dict[str, list[Guard]] = {}


def register_guard(to_state: str, guard: Guard) -> None:
    GUARDS.setdefault(to_state, []).append(guard)


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


def allowed_targets(state: str) -> list[str]:
    return [s for s in GpuState.values if s in ALLOWED[state]]
