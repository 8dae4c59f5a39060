"""An operator in real Chromium: create a purchase order, receive its delivery (preview, then confirm), open an
RMA case from a received GPU's page and ship it, then recompute and read the spares forecast with its backtest
chart. Screenshots go to /tmp/fleet-shots/."""

from __future__ import annotations

import re

import pytest

from fleet.audit import SYSTEM
from inventory.models import Gpu
from procurement.models import GpuAsset, RmaCase
from procurement.services import history
from tests import factories
from tests.browser.helpers import CHROMIUM, login, shot
from tests.procurement import helpers

playwright = pytest.importorskip("playwright.sync_api")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (make chromium)"),
]


@pytest.fixture
def procurement_data(transactional_db):
    model = factories.gpu_model()
    site = factories.site("fra3")
    vendor = helpers.vendor("Supermicro")
    rows = ["serial,model,site,in_service_at,failed_at,removed_at,cause,batch"]
    for i in range(400):
        failed = f"2025-{1 + i % 12:02d}-12" if i % 9 == 0 else ""
        rows.append(f"PH{i:04d},{model.name},fra3,2024-02-01,{failed},,{'gpu' if failed else ''},L{i % 4}")
    assert history.history_import(text="\n".join(rows) + "\n", actor=SYSTEM).ok
    return {"model": model, "site": site, "vendor": vendor}


def test_order_receipt_rma_and_forecast(live_server, page, procurement_data, make_user, eager_celery):
    expect = playwright.expect
    operator = make_user("operator", username="ops-proc")
    login(page, live_server.url, operator.username, "/procurement/orders/new/")

    page.select_option("#id_vendor", str(procurement_data["vendor"].pk))
    page.fill("#id_reference", "PO-PW-1")
    page.fill("#id_ordered_on", "2026-01-05")
    page.fill("#id_promised_on", "2026-03-01")
    page.select_option("#id_lines-0-gpu_model", str(procurement_data["model"].pk))
    page.fill("#id_lines-0-quantity", "2")
    page.fill("#id_lines-0-unit_price", "30000")
    shot(page, "proc-01-order-form")
    page.click("button:has-text('Create order')")
    page.wait_for_url(re.compile(r"/procurement/orders/\d+/$"))
    expect(page.locator("#order-status")).to_have_text("Approved")

    page.click("a:has-text('Receive delivery')")
    page.select_option("#id_line", index=1)
    page.select_option("#id_site", str(procurement_data["site"].pk))
    page.fill("#id_received_on", "2026-02-20")
    page.fill("#id_serials", "PW-0001\nPH0001\nPW-0002")  # PH0001 is already in the fleet
    page.click("button:has-text('Preview')")
    expect(page.locator("#receipt-preview")).to_contain_text("PH0001 is already in the fleet")
    expect(page.locator("button:has-text('Confirm receipt')")).to_have_count(0)
    page.fill("#id_serials", "PW-0001\nPW-0002")
    page.click("button:has-text('Preview')")
    shot(page, "proc-02-receipt-preview")
    assert not Gpu.objects.filter(serial="PW-0001").exists()  # a preview writes nothing
    page.click("button:has-text('Confirm receipt of 2')")
    page.wait_for_url(re.compile(r"/procurement/orders/\d+/$"))
    expect(page.locator("#order-status")).to_have_text("Closed")
    expect(page.locator("#line-table tbody tr").first).to_contain_text("2")
    assert GpuAsset.objects.filter(gpu__serial__in=["PW-0001", "PW-0002"], site__code="fra3").count() == 2

    gpu = Gpu.objects.get(serial="PW-0001")
    page.goto(f"{live_server.url}/gpus/{gpu.pk}/")
    expect(page.locator("#procurement-panel")).to_contain_text("PO-PW-1")
    page.click("a:has-text('Open RMA case')")
    page.select_option("#id_cause", "hbm")
    page.select_option("#id_evidence_kind", "xid")
    page.fill("#id_xid", "64")
    page.fill("#id_evidence", "row-remap failure in burn-in")
    page.click("button:has-text('Open case')")
    page.wait_for_url(re.compile(r"/procurement/rma/\d+/$"))
    expect(page.locator("#rma-status")).to_have_text("Open")
    page.fill("#id_ship-carrier", "UPS")
    page.fill("#id_ship-tracking", "1Z999AA10123456784")
    page.fill("#id_ship-vendor_case", "SR-1234")
    page.click("button:has-text('Record shipment')")
    expect(page.locator("#rma-status")).to_have_text("Shipped")
    shot(page, "proc-03-rma-case")
    case = RmaCase.objects.get()
    assert case.gpu == gpu and case.vendor_case == "SR-1234" and case.failure.xid == 64
    gpu.refresh_from_db()
    assert gpu.state == "rma"

    page.goto(f"{live_server.url}/procurement/forecast/")
    page.click("button:has-text('Recompute now')")
    page.wait_for_url(re.compile(r"/procurement/forecast/$"))
    table = page.locator(".forecast-table").first
    expect(table).to_contain_text("fleet (pooled)")
    expect(table).to_contain_text("site fra3")
    expect(page.locator("#backtest-summary")).to_contain_text("Fill rate", timeout=30_000)
    expect(page.locator("#backtest-verdict")).to_contain_text("0.95")  # which won, or how far short
    expect(page.locator("#backtest svg").first).to_be_visible()
    shot(page, "proc-04-forecast")
    page.click(".forecast-table a:has-text('fleet (pooled)')")
    expect(page.locator("h1")).to_contain_text("fleet (pooled)")
    expect(page.locator("svg").first).to_be_visible()
    shot(page, "proc-05-forecast-scope")
