import pytest
from django.core.exceptions import ValidationError

from fleet.models import AuditEvent
from inventory import services
from inventory.lifecycle import ALLOWED, GUARDS
from inventory.models import GpuState, GpuStateChange
from tests import factories

ALL_PAIRS = [(a, b) for a in GpuState.values for b in GpuState.values]


@pytest.mark.django_db
@pytest.mark.parametrize(("from_state", "to_state"), ALL_PAIRS)
def test_every_transition_is_allowed_or_refused_by_the_table(from_state, to_state, operator):
    gpu = factories.gpu(state=from_state)
    if to_state in ALLOWED[from_state] and to_state in GUARDS:
        # The table allows it, but a guard owns the way in (decommission: only its workflow, with certificates).
        with pytest.raises(ValidationError):
            services.gpu_transition(gpu=gpu, to_state=to_state, actor=operator, reason="test")
        gpu.refresh_from_db()
        assert gpu.state == from_state
        assert not AuditEvent.objects.filter(object_id=str(gpu.pk), action="transition").exists()
    elif to_state in ALLOWED[from_state]:
        services.gpu_transition(gpu=gpu, to_state=to_state, actor=operator, reason="test")
        gpu.refresh_from_db()
        assert gpu.state == to_state
        change = GpuStateChange.objects.filter(gpu=gpu).first()
        assert (change.from_state, change.to_state, change.actor_name, change.reason) == (
            from_state, to_state, operator.username, "test")
        event = AuditEvent.objects.filter(object_id=str(gpu.pk), action="transition").get()
        assert event.changes == {"state": [from_state, to_state]}
    else:
        with pytest.raises(ValidationError) as excinfo:
            services.gpu_transition(gpu=gpu, to_state=to_state, actor=operator)
        assert f"'{from_state}'" in str(excinfo.value) and f"'{to_state}'" in str(excinfo.value)
        gpu.refresh_from_db()
        assert gpu.state == from_state
        assert not AuditEvent.objects.filter(object_id=str(gpu.pk), action="transition").exists()


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
