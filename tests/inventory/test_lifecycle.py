import pytest
from django.core.exceptions import ValidationError

from fleet.models import AuditEvent
from inventory import services
from inventory.models import GpuState, GpuStateChange
from tests import factories

# --- The lifecycle, stated by the operator's rules (docs/data-model.md, "Lifecycle"), not read from the code ----
# One row per state: the states a plain ``gpu_transition`` may move a GPU to. Every pair not listed is refused.
# A new state adds its row here (and its name in the rows that lead to it); the test below covers every pair
# of ``GpuState`` values, so a state the code has and this table lacks fails loudly.
OPERATOR_RULES: dict[str, set[str]] = {
    "ordered": {"received"},
    "received": {"burn_in", "spare", "rma"},
    "burn_in": {"in_service", "spare", "rma", "drained", "burn_in_failed"},
    "burn_in_failed": {"burn_in", "rma", "decommissioning"},  # a person retests, sends to RMA, or scraps
    "in_service": {"drained"},
    "drained": {"in_service", "burn_in", "rma", "spare", "decommissioning"},
    "rma": {"received", "decommissioning"},  # repaired or replaced; or scrapped
    "spare": {"burn_in", "rma", "decommissioning"},
    "decommissioning": {"sanitized", "drained"},  # drained: the decommission was aborted
    "sanitized": {"disposed"},
    "disposed": set(),  # final
}
# Pairs the table allows but only a workflow may take: sanitized and disposed need the decommission workflow
# and its verified certificates (docs/decommission.md), so a plain transition is refused.
WORKFLOW_ONLY: set[tuple[str, str]] = {("decommissioning", "sanitized"), ("sanitized", "disposed")}
# Pairs the table allows only with burn-in evidence (docs/acceptance.md): a GPU without a passing run stays out of
# service and out of the spares shelf; these factory GPUs have none, so each is refused
# (tests/inventory/test_lifecycle_burn_in.py covers them with evidence).
NEEDS_BURN_IN_EVIDENCE: set[tuple[str, str]] = {("burn_in", "in_service"), ("drained", "in_service"),
                                                ("burn_in", "spare")}

ALL_PAIRS = [(a, b) for a in GpuState.values for b in GpuState.values]


def test_the_operator_table_names_every_state_the_code_has():
    assert set(OPERATOR_RULES) == set(GpuState.values)


@pytest.mark.django_db
@pytest.mark.parametrize(("from_state", "to_state"), ALL_PAIRS)
def test_every_transition_is_allowed_or_refused_as_the_operator_rules_say(from_state, to_state, operator):
    gpu = factories.gpu(state=from_state)
    changes_before = GpuStateChange.objects.filter(gpu=gpu).count()
    refused_here = WORKFLOW_ONLY | NEEDS_BURN_IN_EVIDENCE
    allowed = to_state in OPERATOR_RULES[from_state] and (from_state, to_state) not in refused_here
    if allowed:
        services.gpu_transition(gpu=gpu, to_state=to_state, actor=operator, reason="test")
        gpu.refresh_from_db()
        assert gpu.state == to_state
        change = GpuStateChange.objects.filter(gpu=gpu).first()
        assert (change.from_state, change.to_state, change.actor_name, change.reason) == (
            from_state, to_state, operator.username, "test")
        event = AuditEvent.objects.filter(object_id=str(gpu.pk), action="transition").get()
        assert event.changes == {"state": [from_state, to_state]}
        return
    with pytest.raises(ValidationError) as excinfo:
        services.gpu_transition(gpu=gpu, to_state=to_state, actor=operator, reason="test")
    if (from_state, to_state) not in refused_here:
        # An illegal pair names both states (a workflow's guard or the burn-in gate explains its own refusal).
        assert f"'{from_state}'" in str(excinfo.value) and f"'{to_state}'" in str(excinfo.value)
    gpu.refresh_from_db()
    assert gpu.state == from_state
    assert GpuStateChange.objects.filter(gpu=gpu).count() == changes_before
    assert not AuditEvent.objects.filter(object_id=str(gpu.pk), action="transition").exists()
# --- end of the lifecycle table section ---------------------------------------------------------------------


@pytest.mark.django_db
def test_bulk_transition_is_all_or_nothing_when_small(operator):
    good = [factories.gpu(state="in_service") for _ in range(3)]
    bad = factories.gpu(state="ordered")
    with pytest.raises(ValidationError):
        services.gpu_bulk_transition(gpu_ids=[g.pk for g in [*good, bad]], to_state="drained", actor=operator)
    assert not GpuStateChange.objects.filter(to_state="drained").exists()
    result = services.gpu_bulk_transition(gpu_ids=[g.pk for g in good], to_state="drained", actor=operator,
                                          reason="maintenance")
    assert result.done == 3
    assert GpuStateChange.objects.filter(to_state="drained", reason="maintenance").count() == 3


@pytest.mark.django_db
def test_a_gpu_going_to_spares_cannot_name_a_server(operator):
    server = factories.server()
    gpu = factories.gpu(server)
    with pytest.raises(ValidationError) as excinfo:
        services.gpu_move(gpu=gpu, to_server=factories.server(), to_spares=True, actor=operator)
    assert "to_spares" in excinfo.value.message_dict
    gpu.refresh_from_db()
    assert gpu.server_id == server.pk
