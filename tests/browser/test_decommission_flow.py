"""The whole decommission flow in real Chromium, against the BMC simulator over HTTP: an operator requests a
server's decommission in the wizard (policy and media preview), an approver approves, the operator drains it and
has its media recorded from the BMC, starts sanitizing (the executor runs every Redfish step; the host agent's
script is fetched and its outputs uploaded over HTTP), the approver validates, the operator issues the
certificates and verifies one, the approver releases, the operator hands it off, records the disposal and the
downstream receipt, and the approver closes it. Screenshots go to /tmp/fleet-shots/."""

from __future__ import annotations

import datetime as dt
import re

import pytest
import requests

from decommission import services
from decommission.models import DecommissionRequest, Medium
from decommission.services.agent import agent_token_issue
from fleet import dispatch
from inventory.services import record_update
from tests.browser.helpers import CHROMIUM, login, shot
from tests.decommission.decom_factories import server_with_gpus
from tests.decommission.tool_outputs import agent_results
from world.bmc.testing import running_simulator

playwright = pytest.importorskip("playwright.sync_api")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (make chromium)"),
]


@pytest.fixture
def sim(settings, tmp_path):
    settings.DECOMMISSION_SIGNING_KEY_DIR = str(tmp_path / "keys")
    settings.DECOMMISSION_POLL_SECONDS = 0.0
    with running_simulator(bmcs=1, task_seconds=0, plugins=["world.bmc.decommission"], bmc_reset_seconds=0) as server:
        server.sim.bmc("bmc-0001").extra["decommission"]["erase_seconds"] = 0
        yield server


def _act(page, name: str) -> None:
    page.click(f"#action-{name}")
    page.wait_for_load_state("networkidle")


def test_request_to_closed_in_the_browser(live_server, new_page, transactional_db, make_user, sim, eager_celery):
    expect = playwright.expect
    operator = make_user("operator", username="ops-decom")
    approver = make_user("approver", username="appr-decom")
    server = server_with_gpus(hostname="hgx-pw-01")
    record_update(obj=server, actor=None, bmc_address=sim.bmc_url("bmc-0001"))
    processor = services.processor_create(name="GreenCycle ITAD", certification="R2v3", certificate_id="R2-9",
                                          expires_on=dt.date(2099, 1, 1), actor=None)

    op = new_page(timeout=20_000)
    login(op, live_server.url, operator.username, "/decommission/new/")
    op.select_option("#id_category", "high")
    op.select_option("#id_destination", "resale")
    expect(op.locator("#policy-minimum")).to_contain_text("Destroy")
    op.select_option("#id_category", "moderate")
    expect(op.locator("#policy-minimum")).to_contain_text("Purge")
    expect(op.locator("#media-preview")).to_contain_text("not altered")
    op.fill("#id_servers", "hgx-pw-01")
    op.fill("#id_reason", "H100 refresh: resale")
    shot(op, "decom-01-wizard")
    op.click("#submit-request")
    op.wait_for_url(re.compile(r"/decommission/\d+/$"))
    request = DecommissionRequest.objects.get()
    expect(op.locator("#request-state")).to_have_text("Requested")
    expect(op.locator("#action-approve")).to_have_count(0)  # not the operator's to approve

    ap = new_page(timeout=20_000)
    login(ap, live_server.url, approver.username, f"/decommission/{request.pk}/")
    _act(ap, "approve")
    expect(ap.locator("#request-state")).to_have_text("Approved")

    op.reload()
    _act(op, "drain")
    expect(op.locator("#request-state")).to_have_text("Drained")
    _act(op, "inventory")  # the worker reads the media from the BMC
    op.reload()
    expect(op.locator("#request-state")).to_have_text("Inventoried")
    expect(op.locator("#media-table")).to_contain_text("hgx-pw-01")
    _act(op, "sanitize")
    expect(op.locator("#request-state")).to_have_text("Sanitizing")
    shot(op, "decom-02-sanitizing")

    asset = request.assets.get()  # the host agent: token, script and upload over HTTP
    _token, raw = agent_token_issue(asset=asset, actor=operator)
    auth = {"Authorization": f"AgentToken {raw}"}
    script = requests.get(f"{live_server.url}/decommission/agent/script/?server=hgx-pw-01", headers=auth, timeout=30)
    assert script.status_code == 200 and "nvme sanitize" in script.text
    nvme = list(Medium.objects.filter(asset=asset, media_type="nvme", target_uri="").values_list("serial", flat=True))
    upload = requests.post(f"{live_server.url}/api/v1/decommission/agent/results/", headers=auth, timeout=30,
                           json={"server": "hgx-pw-01", "results": agent_results(nvme)})
    assert upload.status_code == 200, upload.text
    for _ in range(10):  # what beat does: the workers continue after the agent's upload
        dispatch.send("decommission.tasks.tick_task")
        if DecommissionRequest.objects.get(pk=request.pk).state == "verifying":
            break
    expect(op.locator("#request-state")).to_have_text("Verifying", timeout=20_000)  # the live partial polls
    shot(op, "decom-03-verifying")

    ap.reload()
    _act(ap, "validate")
    expect(ap.locator("#request-state")).to_have_text("Validated")
    op.reload()
    _act(op, "certify")
    expect(op.locator("#request-state")).to_have_text("Certified")
    op.click("#certificates-link")
    expect(op.locator("#certificate-table")).to_contain_text("Purge")
    op.locator(".verify-btn").first.click()
    expect(op.locator(".verdict").first).to_have_text("Valid")
    assert op.locator("a.download").count() == request.certificates.count()
    shot(op, "decom-04-certificates")

    ap.goto(f"{live_server.url}/decommission/{request.pk}/")
    _act(ap, "release")
    op.goto(f"{live_server.url}/decommission/{request.pk}/")
    form = {"#id_from_party": "DC cage 4", "#id_to_party": "Acme Logistics", "#id_from_signed_by": "ops-decom",
            "#id_to_signed_by": "J. Driver", "#id_seal_ids": "SEAL-1", "#id_count": "1", "#id_weight_kg": "130",
            "#id_carrier": "Acme Logistics", "#id_reference": "BOL-1"}
    for selector, value in form.items():
        op.fill(selector, value)
    op.click("#custody-submit")
    expect(op.locator("#request-state")).to_have_text("In transit")
    op.select_option("#outcome", "resold")
    _act(op, "dispose")
    expect(op.locator("#request-state")).to_have_text("Disposed")
    op.select_option("#id_kind", "receipt")
    for selector, value in (form | {"#id_from_party": "Acme Logistics", "#id_to_party": "GreenCycle ITAD",
                                     "#id_reference": "COD-1", "#id_weight_kg": "130.2"}).items():
        op.fill(selector, value)
    op.select_option("#id_processor", str(processor.pk))
    op.click("#custody-submit")
    expect(op.locator("#custody-table")).to_contain_text("COD-1")

    ap.reload()
    _act(ap, "close")
    expect(ap.locator("#request-state")).to_have_text("Closed")
    shot(ap, "decom-05-closed")
