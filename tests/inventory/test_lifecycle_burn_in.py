"""The burn-in states of the GPU lifecycle, written out literally (not derived from the table under test): where
``burn_in`` and ``burn_in_failed`` may go, what may enter ``burn_in_failed``, and which pairs the acceptance gate
decides. Each pair is also driven through ``gpu_transition``."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from fleet.audit import SYSTEM
from inventory import services
from inventory.lifecycle import ALLOWED, GATED, is_gated
from tests import factories
from tests.acceptance.helpers import pass_run

FROM_BURN_IN = {"in_service", "spare", "rma", "drained", "burn_in_failed"}
FROM_BURN_IN_FAILED = {"burn_in", "rma", "decommissioning"}
INTO_BURN_IN_FAILED = {"burn_in"}
INTO_BURN_IN = {"received", "drained", "spare", "burn_in_failed"}
GATED_PAIRS = {("burn_in", "in_service"), ("drained", "in_service"), ("burn_in", "spare")}
STATES = ["ordered", "received", "burn_in", "burn_in_failed", "in_service", "drained", "rma", "spare",
          "decommissioning", "sanitized", "disposed"]


def test_the_table_says_what_the_literal_says():
    assert set(ALLOWED["burn_in"]) == FROM_BURN_IN
    assert set(ALLOWED["burn_in_failed"]) == FROM_BURN_IN_FAILED
    assert {s for s in STATES if "burn_in_failed" in ALLOWED[s]} == INTO_BURN_IN_FAILED
    assert {s for s in STATES if "burn_in" in ALLOWED[s]} == INTO_BURN_IN
    assert {(f, t) for t, froms in GATED.items() for f in froms} == GATED_PAIRS
    assert {(f, t) for f in STATES for t in STATES if is_gated(f, t)} == GATED_PAIRS


@pytest.mark.django_db
@pytest.mark.parametrize("to_state", STATES)
@pytest.mark.parametrize("from_state", ["burn_in", "burn_in_failed"])
def test_out_of_the_burn_in_states(from_state, to_state):
    gpu = factories.gpu(state=from_state)
    allowed = to_state in (FROM_BURN_IN if from_state == "burn_in" else FROM_BURN_IN_FAILED)
    if allowed and (from_state, to_state) in GATED_PAIRS:
        with pytest.raises(ValidationError, match="may not go to"):
            services.gpu_transition(gpu=gpu, to_state=to_state, actor=SYSTEM)
        pass_run([gpu])  # with a passing run the gate opens
    if allowed:
        services.gpu_transition(gpu=gpu, to_state=to_state, actor=SYSTEM)
        gpu.refresh_from_db()
        assert gpu.state == to_state
    else:
        with pytest.raises(ValidationError):
            services.gpu_transition(gpu=gpu, to_state=to_state, actor=SYSTEM)
        gpu.refresh_from_db()
        assert gpu.state == from_state


@pytest.mark.django_db
@pytest.mark.parametrize("from_state", [s for s in STATES if s not in ("burn_in", "burn_in_failed")])
def test_only_burn_in_enters_burn_in_failed(from_state):
    gpu = factories.gpu(state=from_state)
    with pytest.raises(ValidationError):
        services.gpu_transition(gpu=gpu, to_state="burn_in_failed", actor=SYSTEM)
