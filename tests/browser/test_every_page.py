"""Every page of a fresh demo (``manage.py bootstrap --demo-gpus 64``: the fleet, firmware catalog and rollout,
telemetry, procurement, decommission), visited in real Chromium as each role: no JavaScript or console error,
no failed sub-request (htmx partials, charts' API calls, static files, the favicon), and no page slower than
2 s to load and settle (generous: the machine is shared). Pages a role may not open are left out for it."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from fleet import dispatch
from tests.browser.helpers import CHROMIUM, PASSWORD, shot

playwright = pytest.importorskip("playwright.sync_api")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (make chromium)"),
]

SLOW_SECONDS = 2.0
ROLES = ("viewer", "operator", "approver")
RANK = {role: n for n, role in enumerate(ROLES)}


@pytest.fixture
def demo(transactional_db, settings, tmp_path, monkeypatch):
    settings.VAR_DIR = tmp_path
    settings.DECOMMISSION_SIGNING_KEY_DIR = str(tmp_path / "keys")
    monkeypatch.setattr(dispatch, "send", lambda *args, **kwargs: True)  # pages, not workers
    call_command("bootstrap", demo_gpus=64, stdout=open("/dev/null", "w"))  # noqa: SIM115, PTH123
    for user in get_user_model().objects.filter(username__in=ROLES):
        user.set_password(PASSWORD)
        user.save(update_fields=["password"])


def _pages() -> list[tuple[str, str]]:
    """(path, least role) of every page of the demo, detail pages on the demo's own objects."""
    from decommission.models import DecommissionRequest
    from firmware.models import Bundle, Release, Rollout
    from inventory.models import Gpu, ImportRun, Rack, Row, Server, Site
    from procurement.models import PurchaseOrder, RmaCase

    gpu, server, rack, row = Gpu.objects.order_by("id").first(), Server.objects.first(), Rack.objects.first(), \
        Row.objects.first()
    pages = [
        ("/", "viewer"), ("/gpus/", "viewer"), (f"/gpus/{gpu.pk}/", "viewer"), ("/gpus/?state=in_service", "viewer"),
        ("/servers/", "viewer"), (f"/servers/{server.pk}/", "viewer"), ("/servers/place/", "operator"),
        (f"/racks/{rack.pk}/", "viewer"), (f"/rows/{row.pk}/", "viewer"), ("/sites/", "viewer"),
        (f"/sites/{Site.objects.first().code}/", "viewer"), ("/import/", "operator"),
        ("/telemetry/heatmap/", "viewer"), ("/telemetry/health/", "viewer"), ("/telemetry/sources/", "viewer"),
        ("/firmware/", "viewer"), ("/firmware/releases/", "viewer"), ("/firmware/releases/new/", "operator"),
        (f"/firmware/releases/{Release.objects.first().pk}/", "viewer"), ("/firmware/bundles/", "viewer"),
        ("/firmware/bundles/new/", "operator"), (f"/firmware/bundles/{Bundle.objects.first().pk}/", "viewer"),
        ("/firmware/baselines/", "viewer"), ("/firmware/pools/", "viewer"), ("/firmware/windows/", "viewer"),
        ("/firmware/drift/", "viewer"), ("/firmware/rollouts/", "viewer"), ("/firmware/rollouts/new/", "operator"),
        (f"/firmware/rollouts/{Rollout.objects.first().pk}/", "viewer"),
        ("/procurement/", "viewer"), ("/procurement/orders/new/", "operator"),
        (f"/procurement/orders/{PurchaseOrder.objects.first().pk}/", "viewer"), ("/procurement/rma/", "viewer"),
        (f"/procurement/rma/{RmaCase.objects.first().pk}/", "viewer"), ("/procurement/forecast/", "viewer"),
        ("/procurement/forecast/backtest/", "viewer"), ("/procurement/warranty/", "viewer"),
        ("/procurement/refresh/", "viewer"),
        ("/decommission/", "viewer"), ("/decommission/new/", "operator"), ("/audit/", "viewer"),
        ("/approvals/", "viewer"), ("/account/", "viewer"),
    ]
    for request in DecommissionRequest.objects.order_by("id"):
        pages += [(f"/decommission/{request.pk}/", "viewer"), (f"/decommission/{request.pk}/certificates/", "viewer")]
    if run := ImportRun.objects.first():
        pages.append((f"/import/{run.pk}/", "operator"))
    return pages


@pytest.mark.parametrize("role", ROLES)
def test_every_page_of_the_demo_loads_fast_without_errors(live_server, new_page, demo, role):
    page = new_page(timeout=30_000)
    problems: list[str] = []
    where = {"path": "login"}
    page.on("console", lambda msg: problems.append(f"{where['path']}: console {msg.type}: {msg.text}")
            if msg.type == "error" else None)
    page.on("response", lambda r: problems.append(f"{where['path']}: {r.status} {r.request.method} {r.url}")
            if r.status >= 400 else None)
    # (a poll cut short by the next navigation is aborted: not a failure)
    page.on("requestfailed", lambda r: problems.append(f"{where['path']}: failed {r.method} {r.url}: {r.failure}")
            if "ERR_ABORTED" not in (r.failure or "") else None)

    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", role)
    page.fill("#id_password", PASSWORD)
    with page.expect_navigation():
        page.click("button:has-text('Log in')")

    slow = []
    for path, least in _pages():
        if RANK[role] < RANK[least]:
            continue
        where["path"] = path
        started = time.monotonic()
        page.goto(f"{live_server.url}{path}", wait_until="load")
        page.wait_for_load_state("networkidle")
        seconds = time.monotonic() - started
        if seconds > SLOW_SECONDS:
            slow.append(f"{path}: {seconds:.1f} s")
        if "/login/" in page.url:
            problems.append(f"{path}: sent to the login page")
    shot(page, f"30-every-page-{role}")
    assert not problems, "\n".join(problems)
    assert not slow, "slower than 2 s: " + ", ".join(slow)
