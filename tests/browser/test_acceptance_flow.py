"""An operator in real Chromium takes a delivery's GPUs through burn-in: starts it for the delivery, uploads the
host's dcgmi diag result on the server page (one GPU fails memory), moves the passed GPUs into service from the
delivery's progress page, and sends the failed GPU to RMA with the failing run as evidence."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

from acceptance.models import BurnInPolicy, DiagnosticRun
from fleet.audit import SYSTEM
from inventory import services as inventory_services
from inventory.models import Gpu
from procurement.models import RmaCase
from procurement.services import orders
from tests import factories
from tests.acceptance.helpers import doc4
from tests.browser.helpers import CHROMIUM, login, shot
from tests.procurement import helpers as procurement

playwright = pytest.importorskip("playwright.sync_api")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (make chromium)"),
]


@pytest.fixture(autouse=True)
def _patient_expect():
    """Assertions wait on their condition up to 30 s here (a loaded machine), then back to Playwright's 5 s."""
    playwright.expect.set_options(timeout=30_000)
    yield
    playwright.expect.set_options(timeout=5_000)


@pytest.fixture
def delivered(transactional_db):
    po = procurement.order(quantity=3, reference="PO-BURN-1")
    rows = orders.receipt_rows(serials="BURN-A\nBURN-B\nBURN-C")[0]
    delivery = orders.delivery_receive(order_line=procurement.line(po), site=factories.site("fra9"),
                                       received_on=dt.date(2026, 3, 1), rows=rows, actor=SYSTEM)
    server = factories.server(hostname="burn-node-1")
    for i, serial in enumerate(["BURN-A", "BURN-B", "BURN-C"]):
        inventory_services.gpu_move(gpu=Gpu.objects.get(serial=serial), to_server=server,
                                    to_pci_bus_id=f"00000000:{0x18 + i:02X}:00.0", to_module_id=i + 1, actor=SYSTEM)
    BurnInPolicy.objects.create(gpu_model=factories.gpu_model(), min_level=3, required_runs=1, min_hours=0)
    return {"delivery": delivery, "server": server}


def test_delivery_through_burn_in_and_a_failed_gpu_to_rma(live_server, page, delivered, make_user, tmp_path):
    expect = playwright.expect
    page.set_default_timeout(30_000)  # a shared, loaded machine: waits are on conditions, only their ceiling grows
    operator = make_user("operator", username="ops-burn")
    login(page, live_server.url, operator.username, "/acceptance/")
    page.click("a:has-text('PO-BURN-1')")
    expect(page.locator("#burn-in-counts")).to_contain_text("3 pending")
    page.click("button:has-text('Start burn-in')")
    expect(page.locator(".messages")).to_contain_text("3 GPUs moved into burn-in.")
    expect(page.locator("#progress-table")).to_contain_text("0 of 1 passing level 3+")
    shot(page, "acc-01-burn-in-started")

    # The host's dcgmi diag -r 3 -j (no serials: placed by the host's slots in PCI bus order); GPU 2 fails memory.
    result = tmp_path / "burn-node-1.json"
    result.write_text(json.dumps(doc4({0: "Pass", 1: "Pass", 2: "Fail"})))
    page.goto(f"{live_server.url}/servers/{delivered['server'].pk}/")
    page.set_input_files("#diag-upload input[type=file]", str(result))
    page.select_option("#diag-upload select[name=level]", "3")
    page.click("#diag-upload button:has-text('Upload')")
    page.wait_for_url(re.compile(r"/acceptance/runs/\d+/$"))
    run = DiagnosticRun.objects.get()
    expect(page.locator("main")).to_contain_text("memory mismatch was detected on GPU 2")
    shot(page, "acc-02-run")

    page.goto(f"{live_server.url}/acceptance/deliveries/{delivered['delivery'].pk}/")
    expect(page.locator("#burn-in-counts")).to_contain_text("2 passed")
    expect(page.locator("#burn-in-counts")).to_contain_text("1 failed")
    expect(page.locator("tr.outcome-failed")).to_contain_text(f"diagnostic run #{run.pk}")
    page.click("button:has-text('Move passed GPUs to service')")
    expect(page.locator(".messages")).to_contain_text("2 GPUs moved into service.")
    expect(page.locator("#burn-in-counts")).to_contain_text("2 passed")
    shot(page, "acc-03-in-service")
    assert sorted(Gpu.objects.filter(serial__startswith="BURN-").values_list("serial", "state")) == [
        ("BURN-A", "in_service"), ("BURN-B", "in_service"), ("BURN-C", "burn_in_failed")]

    page.click("tr.outcome-failed a")
    expect(page.locator("#acceptance-panel")).to_contain_text("Fail")
    page.click("#send-to-rma")
    page.select_option("#id_cause", "hbm")
    page.fill("#id_evidence", f"burn-in: diagnostic run #{run.pk}, memory fail (error 95)")
    page.click("button:has-text('Open case')")
    page.wait_for_url(re.compile(r"/procurement/rma/\d+/$"))
    expect(page.locator("#rma-status")).to_have_text("Open")
    shot(page, "acc-04-rma")
    case = RmaCase.objects.get()
    assert case.gpu.serial == "BURN-C" and f"#{run.pk}" in case.failure.evidence
    assert Gpu.objects.get(serial="BURN-C").state == "rma"
