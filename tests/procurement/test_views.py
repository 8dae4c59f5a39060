"""The procurement pages: role checks, the receipt preview/confirm flow (all or nothing), RMA steps, forecast,
backtest, warranty CSV and refresh pages render."""

import datetime as dt

import pytest

from fleet.audit import SYSTEM
from inventory.models import Gpu
from procurement.models import GpuAsset, RmaCase
from procurement.services import forecast, history, orders
from tests import factories
from tests.procurement import helpers

pytestmark = pytest.mark.django_db

PAGES = ["procurement-home", "procurement-rma-list", "procurement-forecast", "procurement-backtest-page",
         "procurement-warranty", "procurement-refresh"]


@pytest.fixture
def login(client, users):
    def as_(role):
        client.force_login(users[role])
        return client
    return as_


def seed_history():
    factories.gpu_model()
    factories.site("fra1")
    rows = ["serial,model,site,in_service_at,failed_at,removed_at,cause,batch"]
    for i in range(200):
        failed = f"2025-{1 + i % 12:02d}-10" if i % 8 == 0 else ""
        rows.append(f"V{i},NVIDIA H100 80GB HBM3,fra1,2024-03-01,{failed},,{'hbm' if failed else ''},B{i % 3}")
    assert history.history_import(text="\n".join(rows) + "\n", actor=SYSTEM).ok
    forecast.forecast_compute(actor=SYSTEM, lead_days=90)


# What each page shows of the fixture below (200 boards at fra1, 25 failed; order PO-1 of 4 H100 at 30000).
PAGE_SHOWS = {
    "procurement-home": ["PO-1", "Supermicro", "4 × NVIDIA H100 80GB HBM3"],
    "procurement-rma-list": ["No cases."],
    "procurement-forecast": ["NVIDIA H100 80GB HBM3", "fra1", "175", "25"],  # installed, failures
    "procurement-backtest-page": ['id="backtest-summary"', "origins"],
    "procurement-warranty": ['<option value="', "fra1", "Nothing in this period."],
    "procurement-refresh": ["NVIDIA H100 80GB HBM3", "30000"],  # the order's unit price
}


@pytest.mark.parametrize("name", PAGES)
def test_pages_render_for_viewers_and_need_a_login(client, login, name):
    import re

    from django.urls import reverse

    seed_history()
    helpers.order()
    assert client.get(reverse(name)).status_code == 302
    response = login("viewer").get(reverse(name))
    assert response.status_code == 200
    text = re.sub(r"<[^>]+>", " ", response.content.decode())
    for shown in PAGE_SHOWS[name]:
        assert shown in (response.content.decode() if shown.startswith(("<", "id=")) else text), shown


def test_viewers_cannot_create_orders(login):
    assert login("viewer").get("/procurement/orders/new/").status_code == 403


def test_order_form_errors_name_the_field(login):
    factories.gpu_model()
    client = login("operator")
    response = client.post("/procurement/orders/new/", {
        "vendor": helpers.vendor().pk, "reference": "PO-9", "ordered_on": "2026-02-01", "promised_on": "2026-01-01",
        "currency": "USD", "lines-TOTAL_FORMS": "1", "lines-INITIAL_FORMS": "0",
        "lines-0-gpu_model": factories.gpu_model().pk, "lines-0-quantity": "-2", "lines-0-unit_price": "10",
        "lines-0-warranty_months": "36", "lines-0-support_months": "60"})
    assert response.status_code == 200
    assert "The promised date is before the order date." in response.content.decode()
    assert "Ensure this value is greater than or equal to 1." in response.content.decode()


def test_receipt_preview_then_confirm(login):
    po = helpers.order(quantity=3)
    line = helpers.line(po)
    site = factories.site("ams1")
    factories.gpu(serial="DUP1")
    client = login("operator")
    base = {"line": line.pk, "site": site.pk, "received_on": "2026-03-01", "step": "preview"}
    bad = client.post(f"/procurement/orders/{po.pk}/receive/", {**base, "serials": "R1\nDUP1\nR2\nR3"})
    text = bad.content.decode()
    assert "DUP1 is already in the fleet" in text and "over-delivery" in text and "Confirm receipt" not in text
    assert not GpuAsset.objects.exists()
    good = client.post(f"/procurement/orders/{po.pk}/receive/", {**base, "serials": "R1\nR2"})
    assert "Confirm receipt of 2" in good.content.decode()
    assert not Gpu.objects.filter(serial="R1").exists()  # the preview writes nothing
    done = client.post(f"/procurement/orders/{po.pk}/receive/", {**base, "step": "confirm",
                                                                 "rows": "1\tR1\t\n2\tR2\t"})
    assert done.status_code == 302
    assert set(GpuAsset.objects.values_list("gpu__serial", flat=True)) == {"R1", "R2"}


def test_rma_from_the_gpu_page(login):
    po = helpers.order(quantity=1)
    orders.delivery_receive(order_line=helpers.line(po), site=factories.site(), received_on=dt.date(2026, 2, 1),
                            rows=orders.receipt_rows(serials="G1")[0], actor=SYSTEM)
    gpu = Gpu.objects.get(serial="G1")
    client = login("operator")
    page = client.get(f"/gpus/{gpu.pk}/").content.decode()
    assert "Open RMA case" in page
    response = client.post(f"/procurement/rma/new/{gpu.pk}/", {"cause": "hbm", "evidence_kind": "note",
                                                                "evidence": "ECC storm", "opened_on": "2026-03-01"})
    case = RmaCase.objects.get()
    assert response.status_code == 302 and case.gpu == gpu
    bad = client.post(f"/procurement/rma/{case.pk}/ship/", {"ship-shipped_on": "2026-01-01", "ship-carrier": "UPS",
                                                            "ship-tracking": "1Z"})
    assert bad.status_code == 400 and "before the case was opened" in bad.content.decode()
    client.post(f"/procurement/rma/{case.pk}/ship/", {"ship-shipped_on": "2026-03-02", "ship-carrier": "UPS",
                                                      "ship-tracking": "1Z"})
    case.refresh_from_db()
    assert case.status == "shipped"
    assert "procurement-panel" in client.get(f"/gpus/{gpu.pk}/").content.decode()


def test_warranty_csv(login):
    seed_history()
    po = helpers.order(quantity=1)
    orders.delivery_receive(order_line=helpers.line(po), site=factories.site("w1"), received_on=dt.date(2026, 2, 1),
                            rows=orders.receipt_rows(serials="W1")[0], actor=SYSTEM)
    response = login("viewer").get("/procurement/warranty/", {"start": "2029-01-01", "end": "2029-12-31",
                                                              "export": "csv"})
    lines = response.content.decode().splitlines()
    assert lines[0].startswith("serial,model,site") and lines[1].startswith("W1,NVIDIA H100 80GB HBM3,w1")
