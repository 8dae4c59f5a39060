"""Orders and delivery receipt: GPUs created in received, linked to their line; over-delivery, a serial already in
the fleet and a wrong model are per-row errors and write nothing; approval above the threshold."""

import datetime as dt
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from fleet.audit import SYSTEM
from fleet.models import AuditEvent
from inventory.models import Gpu
from procurement.models import GpuAsset, OrderStatus
from procurement.services import orders
from tests import factories
from tests.procurement import helpers

pytestmark = pytest.mark.django_db


def rows(*serials):
    return orders.receipt_rows(serials="\n".join(serials))[0]


def test_receipt_creates_received_gpus_with_warranty_and_closes_a_full_order():
    po = helpers.order(quantity=3)
    assert po.status == OrderStatus.APPROVED
    site = factories.site()
    delivery = orders.delivery_receive(order_line=helpers.line(po), site=site, received_on=dt.date(2026, 3, 1),
                                       rows=rows("S1", "S2"), actor=SYSTEM)
    assets = GpuAsset.objects.filter(delivery=delivery).select_related("gpu")
    assert {a.gpu.serial for a in assets} == {"S1", "S2"}
    assert {a.gpu.state for a in assets} == {"received"}
    assert {a.warranty_end for a in assets} == {dt.date(2029, 3, 1)}
    assert orders.received_counts(po)[helpers.line(po).pk] == 2
    po.refresh_from_db()
    assert po.status == OrderStatus.APPROVED  # one still open
    orders.delivery_receive(order_line=helpers.line(po), site=site, received_on=dt.date(2026, 3, 9),
                            rows=rows("S3"), actor=SYSTEM)
    po.refresh_from_db()
    assert po.status == OrderStatus.CLOSED
    assert AuditEvent.objects.filter(object_repr__startswith="PO-1 @").exists()


def test_bad_rows_are_per_row_errors_and_nothing_is_written():
    po = helpers.order(quantity=2)
    factories.gpu(serial="TAKEN1")
    before = Gpu.objects.count()
    preview = orders.receipt_preview(order_line=helpers.line(po), rows=rows("A1", "TAKEN1", "A1", "A2", "A3"))
    errors = preview.row_errors
    assert "line 2: serial: TAKEN1 is already in the fleet." in errors
    assert "line 3: serial: A1 appears twice in this delivery." in errors
    assert any(e.startswith("line 5: quantity: over-delivery") for e in errors)
    with pytest.raises(ValidationError) as err:
        orders.delivery_receive(order_line=helpers.line(po), site=factories.site(), received_on=dt.date(2026, 3, 1),
                                rows=rows("A1", "TAKEN1"), actor=SYSTEM)
    assert "rows" in err.value.message_dict
    assert Gpu.objects.count() == before
    assert not GpuAsset.objects.exists()


def test_a_model_that_does_not_match_the_line_is_an_error():
    po = helpers.order(quantity=2)
    bad = orders.ReceiptRow(1, "X1", model="NVIDIA A100-SXM4-80GB")
    preview = orders.receipt_preview(order_line=helpers.line(po), rows=[bad])
    assert preview.row_errors == ["line 1: model: NVIDIA A100-SXM4-80GB does not match the order line "
                                  "(NVIDIA H100 80GB HBM3)."]


def test_receipt_from_an_nvidia_smi_csv():
    po = helpers.order(quantity=2)
    content = (b"name, serial, uuid\nNVIDIA H100 80GB HBM3, 1650124000001, GPU-aaaaaaaa-1111-2222-3333-444455556666\n"
               b"NVIDIA H100 80GB HBM3, 1650124000002, GPU-bbbbbbbb-1111-2222-3333-444455556666\n")
    parsed, errors = orders.receipt_rows(content=content, filename="burnin.csv")
    assert not errors
    assert [r.serial for r in parsed] == ["1650124000001", "1650124000002"]
    assert orders.receipt_preview(order_line=helpers.line(po), rows=parsed).ok


def test_orders_above_the_threshold_wait_for_an_approver(settings, users):
    settings.PROCUREMENT_APPROVAL_THRESHOLD = 100_000
    po = helpers.order(quantity=8, price="30000")
    assert po.status == OrderStatus.AWAITING_APPROVAL
    assert not orders.receipt_preview(order_line=helpers.line(po), rows=rows("Z1")).ok
    orders.order_approve(order=po, actor=users["approver"])
    po.refresh_from_db()
    assert po.status == OrderStatus.APPROVED and po.approved_by == users["approver"]
    with pytest.raises(ValidationError):
        orders.order_approve(order=po, actor=users["approver"])


def test_dates_out_of_order_and_negative_quantities_are_refused():
    with pytest.raises(ValidationError) as err:
        orders.order_create(vendor=helpers.vendor(), reference="PO-X", ordered_on=dt.date(2026, 2, 1),
                            promised_on=dt.date(2026, 1, 1), actor=SYSTEM,
                            lines=[{"gpu_model": factories.gpu_model(), "quantity": -1, "unit_price": Decimal(1)}])
    assert set(err.value.message_dict) == {"promised_on", "lines"}
