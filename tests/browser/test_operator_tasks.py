"""Issue 21's daily operator tasks in real Chromium, each from a small demo-like fleet (sites, named racks, servers,
GPUs, a flagged GPU, a firmware release, purchase orders, decommission requests), each asserting what the person
sees at the end: places typed by name, new hardware received and placed, the shorter ways through rollouts and
approvals, waiting states that say what they wait for. Screenshots go to /tmp/fleet-shots/."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone

from fleet import dispatch
from inventory.models import Gpu, GpuState
from telemetry.models import HealthFlag, HealthKind, HealthSeverity
from tests import factories
from tests.browser.helpers import CHROMIUM, login, shot

playwright = pytest.importorskip("playwright.sync_api")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (make chromium)"),
]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def no_broker(monkeypatch):
    """Services enqueue Celery work after commit; these tests look at pages, not at workers."""
    monkeypatch.setattr(dispatch, "send", lambda *args, **kwargs: True)


@pytest.fixture
def demo(transactional_db, users, no_broker):
    """A small demo-like fleet: sjc1 with racks sjc1-r01 (two servers of four GPUs) and sjc1-r02 (empty), one
    GPU flagged for RMA."""
    site = factories.site("sjc1")
    rack = factories.rack(site, name="sjc1-r01")
    empty = factories.rack(site, name="sjc1-r02")
    servers = [factories.server(rack, hostname=f"gpu-sjc1-{n:03d}", rack_unit=2 + 8 * n) for n in range(2)]
    gpus = [factories.gpu(server) for server in servers for _ in range(4)]
    now = timezone.now()
    flagged = gpus[5]
    HealthFlag.objects.create(gpu=flagged, kind=HealthKind.ROW_REMAP_FAILURE, severity=HealthSeverity.RMA,
                              evidence={"remapped_rows_uncorrectable": 1, "remapped_rows_correctable": 3},
                              raised_at=now, last_seen_at=now)
    return {"site": site, "rack": rack, "empty_rack": empty, "servers": servers, "gpus": gpus, "flagged": flagged,
            "users": users}


def test_drain_and_rma_a_flagged_gpu_found_by_rack_name(live_server, page, demo):
    expect = playwright.expect
    flagged = demo["flagged"]
    login(page, live_server.url, demo["users"]["operator"].username, "/telemetry/health/")

    # The rack is typed by name (completion offers it), not by its id.
    page.fill("#id_rack", "sjc1-r")
    expect(page.locator("#places-rack-rack option[value='sjc1-r01']")).to_have_count(1)
    page.fill("#id_rack", "sjc1-r01")
    page.keyboard.press("Tab")  # change: the table follows
    page.wait_for_url(re.compile(r"rack=sjc1-r01"))
    rows = page.locator("#health-table tbody tr[id^=flag-]")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(flagged.serial)
    shot(page, "21-health-by-rack-name")

    row = rows.first
    row.get_by_role("button", name="Drain").click()
    expect(page.locator(f"#flag-{flagged.health_flags.get().pk} .notice")).to_contain_text("In service → Drained")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f"#flag-{flagged.health_flags.get().pk}").get_by_role("button", name="Send to RMA").click()
    row = page.locator(f"#flag-{flagged.health_flags.get().pk}")
    expect(row.locator(".notice")).to_contain_text("Drained → RMA")
    expect(row.locator(".badge.state-rma")).to_have_text("RMA")

    # The rack page names the flagged GPU by serial and links to the filtered list.
    page.goto(f"{live_server.url}/racks/{demo['rack'].pk}/")
    expect(page.locator("#place-flagged-gpus")).to_contain_text(flagged.serial)
    page.get_by_role("link", name="flagged GPUs").click()
    page.wait_for_url(re.compile(r"/telemetry/health/\?rack=sjc1-r01$"))
    expect(page.locator("#health-table tbody tr[id^=flag-]")).to_have_count(1)
    shot(page, "22-rack-flagged-by-serial")
    assert Gpu.objects.get(pk=flagged.pk).state == GpuState.RMA


def test_import_a_new_servers_nvidia_smi_file_and_place_it(live_server, page, demo):
    expect = playwright.expect
    login(page, live_server.url, demo["users"]["operator"].username, "/import/")
    page.set_input_files("#id_file", str(FIXTURES / "nvidia-smi-xml" / "a100-sxm4-v12.xml"))
    page.fill("#id_server_hint", "gpu-sjc1-100")
    expect(page.locator("#id_new_state")).to_have_value("received")
    with page.expect_navigation():
        page.click("button:has-text('Preview import')")
    expect(page.locator("#import-new-state")).to_have_text("Received")
    with page.expect_navigation():
        page.click("button:has-text('Confirm import')")
    created = page.locator("#import-created")
    expect(created).to_contain_text("gpu-sjc1-100")
    expect(created).to_contain_text("1650522003820")
    shot(page, "23-import-created")

    # Place it: from the import's link to the server page, the rack by name.
    created.get_by_role("link", name="Place it").click()
    page.wait_for_url(re.compile(r"/servers/\d+/"))
    expect(page.locator("h1")).to_contain_text("needs a rack position")
    page.fill("#id_rack", "sjc1-r02")
    page.fill("#id_rack_unit", "10")
    with page.expect_navigation():
        page.click("#place button[type=submit]")
    expect(page.locator(".messages")).to_contain_text("gpu-sjc1-100 placed in sjc1-r02 at U10")
    expect(page.locator("h1")).not_to_contain_text("needs a rack position")
    shot(page, "24-server-placed")

    # Its GPU is at the site now, received (burn-in comes before service), found by a serial prefix.
    page.goto(f"{live_server.url}/gpus/?q=16505220&site=sjc1")
    row = page.locator("#gpu-table tbody tr").first
    expect(row).to_contain_text("1650522003820")
    expect(row).to_contain_text("Received")
    expect(row).to_contain_text("gpu-sjc1-100")


def test_order_approve_reject_another_receive_by_scanned_serials_and_find_them_at_their_site(
        live_server, new_page, demo, settings):
    from procurement.models import Vendor
    from procurement.services.orders import order_create

    expect = playwright.expect
    settings.PROCUREMENT_APPROVAL_THRESHOLD = 1000
    users = demo["users"]
    vendor = Vendor.objects.create(name="Supermicro")
    model = factories.gpu_model()
    today = timezone.localdate()
    orders = [order_create(vendor=vendor, reference=ref, ordered_on=today, promised_on=today + dt.timedelta(days=30),
                           lines=[{"gpu_model": model, "quantity": 3, "unit_price": Decimal("25000"),
                                   "warranty_months": 36}], actor=users["operator"])
              for ref in ("PO-2026-101", "PO-2026-102")]

    approver = new_page()
    login(approver, live_server.url, users["approver"].username, "/")
    panel = approver.locator("#approvals-panel")
    expect(panel).to_contain_text("PO-2026-101")
    expect(panel).to_contain_text("PO-2026-102")
    expect(approver.locator("#nav-approvals-count")).to_contain_text("2")
    panel.get_by_role("link", name=re.compile("PO-2026-101")).click()
    expect(approver.locator("#order-next-step")).to_contain_text("Waiting for an approver")
    with approver.expect_navigation():
        approver.click("button:has-text('Approve order')")
    expect(approver.locator("#order-status")).to_have_text("Approved")

    approver.goto(f"{live_server.url}/procurement/orders/{orders[1].pk}/")
    approver.fill("#id_reject_reason", "Duplicate of PO-2026-101")
    with approver.expect_navigation():
        approver.click("button:has-text('Reject order')")
    expect(approver.locator("#order-status")).to_have_text("Rejected")
    expect(approver.locator("#order-rejection")).to_have_text("Duplicate of PO-2026-101")
    shot(approver, "25-order-rejected")

    operator = new_page()
    login(operator, live_server.url, users["operator"].username, f"/procurement/orders/{orders[0].pk}/")
    expect(operator.locator("#order-next-step")).to_contain_text("Waiting for the delivery")
    operator.click("a:has-text('Receive delivery')")
    operator.wait_for_url(re.compile(r"/receive/$"))
    operator.select_option("#id_line", index=1)
    operator.select_option("#id_site", str(demo["site"].pk))
    operator.fill("#id_serials", "1652100000001\n1652100000002\n1652100000003")  # a scanner types, Enter each
    with operator.expect_navigation():
        operator.click("button:has-text('Preview')")
    with operator.expect_navigation():
        operator.click("button:has-text('Confirm receipt of 3')")
    expect(operator.locator(".messages")).to_contain_text("Received 3")
    delivery = operator.locator("tr.delivery").first
    expect(delivery).to_contain_text("1652100000001")
    delivery.get_by_role("link", name=re.compile("received GPUs at sjc1")).click()
    operator.wait_for_url(re.compile(r"/gpus/\?site=sjc1&state=received"))
    rows = operator.locator("#gpu-table tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.first).to_contain_text("Received")
    shot(operator, "26-received-at-their-site")


def test_plan_approve_and_start_pause_and_resume_a_rollout_started_from_one_release(live_server, new_page, demo):
    from firmware.models import Rollout
    from firmware.services import catalog
    from fleet.audit import SYSTEM
    from inventory.models import ServerPlatform

    expect = playwright.expect
    users = demo["users"]
    catalog.component_specs_ensure(actor=SYSTEM)
    platform = ServerPlatform.objects.get(name="HGX H100 8-GPU")
    release = catalog.release_create(component="gpu_vbios", version="96.00.9F.00.01", sha256="ab" * 32,
                                     image_url="https://fw.example/vbios/96.00.9F.00.01.fwpkg", actor=SYSTEM,
                                     platforms=[platform])

    operator = new_page()
    login(operator, live_server.url, users["operator"].username, f"/firmware/releases/{release.pk}/")
    with operator.expect_navigation():
        operator.click("#release-rollout button")
    operator.wait_for_url(re.compile(r"/firmware/rollouts/new/\?bundle=\d+"))
    expect(operator.locator("#id_bundle option:checked")).to_contain_text("96.00.9F.00.01 on HGX H100 8-GPU")
    operator.fill("#id_rack", "sjc1-r01")
    operator.keyboard.press("Tab")
    expect(operator.locator("#plan-preview")).to_contain_text("wave", timeout=15_000)
    with operator.expect_navigation():
        operator.click("#create-rollout")
    operator.wait_for_url(re.compile(r"/firmware/rollouts/\d+/$"))
    rollout = Rollout.objects.get()
    expect(operator.locator("#rollout-waiting")).to_contain_text("submit it for approval")
    operator.click("#action-submit")
    expect(operator.locator("#rollout-state")).to_have_text("Awaiting approval")
    expect(operator.locator("#rollout-waiting")).to_contain_text("Waiting for an approver")

    approver = new_page()
    login(approver, live_server.url, users["approver"].username, "/")
    approver.locator("#approvals-panel").get_by_role("link", name=re.compile(rollout.name)).click()
    approver.wait_for_url(re.compile(rf"/firmware/rollouts/{rollout.pk}/$"))
    expect(approver.locator("#action-approve_start")).to_have_class(re.compile(r"^btn$"))  # the primary button
    approver.click("#action-approve_start")
    expect(approver.locator("#rollout-state")).to_have_text("Running")

    operator.reload()
    operator.fill("#reason-pause", "PDU work in sjc1-r01")
    operator.click("#action-pause")
    expect(operator.locator("#rollout-state")).to_have_text("Paused")
    expect(operator.locator("#rollout-waiting")).to_contain_text("Paused: PDU work in sjc1-r01")
    operator.fill("#reason-resume", "PDU work done, ticket OPS-77")
    operator.click("#action-resume")
    expect(operator.locator("#rollout-state")).to_have_text("Running")
    operator.reload()
    audit = operator.locator("body")
    expect(audit).to_contain_text("PDU work done, ticket OPS-77")  # Resume's reason is kept
    expect(audit).to_contain_text(f"approved_by: ∅ → {users['approver'].username}")  # a name, not an id
    shot(operator, "27-rollout-resumed")


@pytest.fixture
def keys(settings, tmp_path):
    settings.DECOMMISSION_SIGNING_KEY_DIR = str(tmp_path / "keys")


def test_a_decommission_request_waits_for_the_host_agent_with_its_token_and_command_on_the_page(
        live_server, new_page, demo, keys):
    from tests.decommission.decom_factories import server_with_gpus, walk

    expect = playwright.expect
    page = new_page(timeout=30_000)
    users = demo["users"]
    request = walk("sanitizing", users=users, servers=[server_with_gpus(hostname="gpu-sjc1-900")])
    login(page, live_server.url, users["operator"].username, f"/decommission/{request.pk}/")
    expect(page.locator("#request-state")).to_have_text("Sanitizing")
    waits = page.locator("#agent-waits")
    expect(waits).to_contain_text("Waiting for the host agent")
    expect(waits).to_contain_text("gpu-sjc1-900")
    # Cancel, hold and escalate are never the primary button.
    for name in ("hold", "escalate"):
        if page.locator(f"#action-{name}").count():
            expect(page.locator(f"#action-{name}")).not_to_have_class(re.compile(r"\bprimary\b"))
    with page.expect_navigation():
        waits.get_by_role("button", name="Issue agent token").click()
    issued = page.locator("#agent-issued")
    token = page.locator("#agent-token").inner_text()
    assert len(token) >= 40
    command = page.locator("#agent-command").inner_text()
    assert f"AgentToken {token}" in command and "server=gpu-sjc1-900" in command and "| sudo sh" in command
    expect(issued).to_contain_text("Shown once")
    shot(page, "28-agent-token-and-command")

    # The script the command fetches answers to that token (and the page links the script's source).
    import requests as http

    script = http.get(command.split('"')[3], headers={"Authorization": f"AgentToken {token}"}, timeout=10)
    assert script.status_code == 200 and "gpu-sjc1-900" in script.text
    page.click("#agent-script-link")
    expect(page.locator("body")).to_contain_text("#!")


def test_download_a_certificate_pdf(live_server, page, demo, keys):
    from tests.decommission.decom_factories import walk

    expect = playwright.expect
    request = walk("certified", users=demo["users"])
    login(page, live_server.url, demo["users"]["viewer"].username, f"/decommission/{request.pk}/certificates/")
    groups = page.locator("tbody.cert-server")
    expect(groups.first).to_be_visible()
    first = page.locator("tbody.cert-server tr:not(.group-head)").first
    expect(first.get_by_role("link", name="JSON (record)")).to_be_visible()
    with page.expect_download() as info:
        first.get_by_role("link", name="PDF").click()
    download = info.value
    assert download.suggested_filename.endswith(".pdf")
    assert Path(download.path()).read_bytes().startswith(b"%PDF")
    shot(page, "29-certificates-grouped")
