"""RMA cases: opened from a GPU (moved to rma, its failure recorded with the lifecycle event), shipped, replacement
received (a new board linked to the old), closed; illegal steps refused; every change audited."""

import datetime as dt

import pytest
from django.core.exceptions import ValidationError

from fleet.audit import SYSTEM
from fleet.models import AuditEvent
from inventory import services as inventory_services
from procurement.models import Failure, RmaStatus
from procurement.services import orders, rma
from tests import factories
from tests.procurement import helpers

pytestmark = pytest.mark.django_db


def received_gpu():
    po = helpers.order(quantity=2)
    orders.delivery_receive(order_line=helpers.line(po), site=factories.site(), received_on=dt.date(2026, 2, 1),
                            rows=orders.receipt_rows(serials="OLD1")[0], actor=SYSTEM)
    from inventory.models import Gpu
    return Gpu.objects.get(serial="OLD1")


def test_the_whole_case():
    gpu = received_gpu()
    case = rma.rma_open(gpu=gpu, cause="hbm", opened_on=dt.date(2026, 4, 1), evidence_kind="xid", xid=64,
                        evidence="row-remap failure", actor=SYSTEM)
    gpu.refresh_from_db()
    assert gpu.state == "rma"
    failure = Failure.objects.get(gpu=gpu)
    assert failure.cause == "hbm" and failure.xid == 64 and failure.state_change.to_state == "rma"
    assert case.vendor.name == "Supermicro"  # from the board's order line
    with pytest.raises(ValidationError):
        rma.rma_open(gpu=gpu, cause="hbm", opened_on=dt.date(2026, 4, 1), actor=SYSTEM)  # one open case per board
    with pytest.raises(ValidationError) as err:
        rma.rma_replace(case=case, serial="NEW1", received_on=dt.date(2026, 4, 20), actor=SYSTEM)
    assert "from 'open' to 'replaced'" in str(err.value)
    rma.rma_ship(case=case, shipped_on=dt.date(2026, 4, 3), carrier="UPS", tracking="1Z999", vendor_case="SR-77",
                 actor=SYSTEM)
    rma.rma_replace(case=case, serial="NEW1", received_on=dt.date(2026, 4, 20), actor=SYSTEM)
    case.refresh_from_db()
    assert case.status == RmaStatus.REPLACED and case.replacement.serial == "NEW1"
    assert case.replacement.state == "received" and case.replacement.asset.site == gpu.asset.site
    assert case.replacement.asset.order_line is None  # a replacement is not a delivery on the order
    assert orders.received_counts(gpu.asset.order_line.order)[gpu.asset.order_line_id] == 1
    rma.rma_close(case=case, closed_on=dt.date(2026, 4, 21), actor=SYSTEM)
    case.refresh_from_db()
    assert case.status == RmaStatus.CLOSED
    assert [c.pk for c in rma.rma_cases_for_gpu(case.replacement)] == [case.pk]
    assert AuditEvent.objects.filter(content_type__model="rmacase", object_id=str(case.pk)).count() == 4


def test_a_gpu_in_service_must_be_drained_first():
    gpu = factories.gpu(state="in_service")
    assert "drain it first" in rma.rma_open_refusal(gpu)
    with pytest.raises(ValidationError):
        rma.rma_open(gpu=gpu, cause="gpu", opened_on=dt.date(2026, 4, 1), vendor=helpers.vendor(), actor=SYSTEM)
    inventory_services.gpu_transition(gpu=gpu, to_state="drained", actor=SYSTEM)
    case = rma.rma_open(gpu=gpu, cause="gpu", opened_on=dt.date(2026, 4, 1), vendor=helpers.vendor(), actor=SYSTEM)
    assert case.status == RmaStatus.OPEN


def test_the_refusal_from_the_cases_already_read_matches_the_one_that_reads_them(django_assert_num_queries):
    """The GPU page passes the cases it shows; an open case of the board refuses, a closed one or one it only
    replaced does not."""
    gpu = received_gpu()
    inventory_services.gpu_transition(gpu=gpu, to_state="burn_in", actor=SYSTEM)

    def both(board):
        cases = rma.rma_cases_for_gpu(board)
        with django_assert_num_queries(0):
            from_cases = rma.rma_open_refusal(board, cases=cases)
        assert from_cases == rma.rma_open_refusal(board)
        return from_cases

    assert both(gpu) is None
    case = rma.rma_open(gpu=gpu, cause="hbm", opened_on=dt.date(2026, 4, 1), actor=SYSTEM)
    gpu.refresh_from_db()
    assert "already has an open RMA case" in both(gpu)
    rma.rma_ship(case=case, shipped_on=dt.date(2026, 4, 3), carrier="UPS", tracking="1Z999", actor=SYSTEM)
    rma.rma_replace(case=case, serial="NEW2", received_on=dt.date(2026, 4, 20), actor=SYSTEM)
    case.refresh_from_db()
    assert both(case.replacement) is None  # its only case is the one it replaced a board on
    rma.rma_close(case=case, closed_on=dt.date(2026, 4, 21), actor=SYSTEM)
    gpu.refresh_from_db()
    assert "open RMA case" not in (both(gpu) or "")


def test_dates_before_the_case_are_refused():
    gpu = received_gpu()
    case = rma.rma_open(gpu=gpu, cause="power", opened_on=dt.date(2026, 4, 1), actor=SYSTEM)
    with pytest.raises(ValidationError) as err:
        rma.rma_ship(case=case, shipped_on=dt.date(2026, 3, 1), carrier="UPS", tracking="x", actor=SYSTEM)
    assert "shipped_on" in err.value.message_dict
