"""An operator in real Chromium: log in, filter the GPU list (htmx swaps the table), open a GPU, move it
to another state with a reason, see the new state and the history row; then a bulk drain through the
"all matching the filter" path and its job page. Screenshots go to /tmp/fleet-shots/."""

from __future__ import annotations

import re

import pytest

from fleet.models import Job, JobStatus
from inventory.models import Gpu
from tests import factories
from tests.acceptance.helpers import pass_run
from tests.browser.helpers import CHROMIUM, login, shot

playwright = pytest.importorskip("playwright.sync_api")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (make chromium)"),
]


@pytest.fixture
def small_fleet(transactional_db):
    site = factories.site("fra2")
    rack = factories.rack(site, name="fra2-r07")
    servers = [factories.server(rack, hostname=f"gpu-fra2-{n:03d}", rack_unit=2 + 8 * n) for n in range(3)]
    gpus = [factories.gpu(server, vbios_version="96.00.89.00.01", driver_version="550.90.07")
            for server in servers for _ in range(8)]
    return {"rack": rack, "servers": servers, "gpus": gpus}


def test_operator_filters_opens_and_transitions_a_gpu(live_server, page, small_fleet, make_user):
    expect = playwright.expect
    operator = make_user("operator", username="ops-alice")
    login(page, live_server.url, operator.username, "/gpus/")
    expect(page.locator("#gpu-table tbody tr")).to_have_count(24)
    shot(page, "02-gpu-list")

    # Type a serial: htmx swaps the table in place (no page load) and pushes the filtered URL.
    target = small_fleet["gpus"][9]
    page.evaluate("window.__noReload = true")
    page.fill("#id_q", target.serial)
    expect(page.locator("#gpu-table tbody tr")).to_have_count(1)
    row = page.locator("#gpu-table tbody tr").first
    expect(row).to_contain_text(target.serial)
    expect(row).to_contain_text("gpu-fra2-001")
    expect(row).to_contain_text("In service")
    assert page.evaluate("window.__noReload") is True, "the filter reloaded the page instead of swapping the table"
    page.wait_for_url(re.compile(rf"/gpus/\?q={target.serial}&sort=id$"))  # empty filters left out
    shot(page, "03-gpu-list-filtered")

    # Reload: the URL alone reproduces the filtered table.
    page.reload()
    expect(page.locator("#gpu-table tbody tr")).to_have_count(1)
    expect(page.locator("#id_q")).to_have_value(target.serial)

    # Open the GPU and drain it with a reason.
    row.get_by_role("link", name=target.serial).click()
    page.wait_for_url(f"**/gpus/{target.pk}/")
    expect(page.locator("#gpu-state-badge")).to_have_text("In service")
    page.select_option("#id_to_state", "drained")
    page.fill("#id_reason", "XID 79: fell off the bus, ticket OPS-4711")
    page.click("#gpu-transition button[type=submit]")
    page.wait_for_url(f"**/gpus/{target.pk}/")
    expect(page.locator("#gpu-state-badge")).to_have_text("Drained")
    expect(page.locator(".messages")).to_contain_text("In service → Drained")
    history = page.locator("#state-history tbody tr").first
    expect(history).to_contain_text("Drained")
    expect(history).to_contain_text("ops-alice")
    expect(history).to_contain_text("XID 79: fell off the bus, ticket OPS-4711")
    shot(page, "04-gpu-detail-after-transition")

    # An illegal move is a form error naming both states (the select offers legal ones; force another).
    page.evaluate("""() => { const s = document.querySelector('#id_to_state');
                             s.add(new Option('Disposed', 'disposed')); s.value = 'disposed'; }""")
    page.click("#gpu-transition button[type=submit]")
    expect(page.locator("#gpu-transition .errorlist")).to_contain_text("'drained' to 'disposed'")
    shot(page, "05-gpu-detail-illegal-transition")

    # Back to the list: the filtered URL still works, the GPU is drained.
    page.goto(f"{live_server.url}/gpus/?q={target.serial}")
    expect(page.locator("#gpu-table tbody tr").first).to_contain_text("Drained")


def test_operator_drains_a_rack_through_a_job(live_server, page, small_fleet, make_user, settings, eager_celery):
    expect = playwright.expect
    settings.FLEET_BULK_SYNC_LIMIT = 10  # the rack's 24 GPUs become a background job
    settings.FLEET_BULK_CHUNK = 8
    operator = make_user("operator", username="ops-bob")
    rack = small_fleet["rack"]
    login(page, live_server.url, operator.username, f"/gpus/?rack={rack.pk}")
    page.select_option("#id_bulk_to_state", "drained")
    page.fill("#bulk-form input[name=reason]", "PDU swap in fra2-r07")
    page.once("dialog", lambda dialog: dialog.accept())  # "apply to every GPU matching the filter?"
    page.click("button:has-text('Apply to all matching the filter')")
    page.wait_for_url("**/jobs/*/")
    expect(page.locator("#job-status")).to_have_text("Succeeded")
    expect(page.locator("#job-progress")).to_contain_text("24 of 24 done")
    shot(page, "06-job-done")

    # A running job polls its progress partial every second until it ends.
    job = Job.objects.create(kind="gpu_bulk_transition", total=500, done=200, status=JobStatus.RUNNING,
                             params={"to_state": "drained", "reason": "row 7 maintenance", "actor_name": "ops-bob"})
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    expect(page.locator("#job-progress")).to_contain_text("200 of 500 done")
    shot(page, "07-job-running")
    Job.objects.filter(pk=job.pk).update(done=500, status=JobStatus.SUCCEEDED)
    expect(page.locator("#job-status")).to_have_text("Succeeded", timeout=5_000)  # polled, no reload
    expect(page.locator(".progress")).to_have_attribute("aria-valuenow", "100")

    # The selected-rows path (now under the sync limit: done at once), and the pages around the rack.
    settings.FLEET_BULK_SYNC_LIMIT = 200
    pass_run(Gpu.objects.filter(state="drained").order_by("id"))  # back to service: a passing run since the drain
    page.goto(f"{live_server.url}/gpus/?state=drained")
    expect(page.locator("#gpu-table tbody tr")).to_have_count(24)
    page.check("input[data-select-all]")
    assert page.locator("input[name=gpu]:checked").count() == 24
    page.select_option("#id_bulk_to_state", "in_service")
    with page.expect_navigation():
        page.click("button:has-text('Apply to selected')")
    shot(page, "08-bulk-selected-done")
    assert page.url.endswith("/gpus/?state=drained")
    expect(page.locator(".messages")).to_contain_text("24 GPUs moved to In service.")
    expect(page.locator("#gpu-table tbody tr")).to_have_count(1)  # the "no GPUs match" row
    for path, name in [("/", "09-dashboard"), (f"/racks/{rack.pk}/", "10-rack"),
                       (f"/servers/{small_fleet['servers'][0].pk}/", "11-server"), ("/sites/fra2/", "12-site"),
                       ("/audit/", "13-audit"), ("/import/", "14-import")]:
        page.goto(f"{live_server.url}{path}")
        expect(page.locator("main h1")).to_be_visible()
        shot(page, name)
