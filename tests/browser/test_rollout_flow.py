"""A small rollout in real Chromium, end to end: an operator builds it in the wizard and watches the live plan
preview change, submits it; a second person (an approver) approves it; the operator starts it and the rollout page
shows the progress moving, without a reload, until it is completed. The engine runs for real: a Celery worker
process over Redis does the steps against the in-process BMC simulator over HTTP, and a thread in this process
ticks like beat. Screenshots go to /tmp/fleet-shots/."""

from __future__ import annotations

import re
import threading

import pytest
from django.conf import settings as django_settings
from django.db import connection, transaction

from firmware.models import Rollout, RolloutState, TargetState
from tests.browser.helpers import CHROMIUM, login, shot
from tests.firmware import fw_factories, rollout_fleet
from world.bmc.testing import running_simulator

playwright = pytest.importorskip("playwright.sync_api")

SERVERS = 10

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (make chromium)"),
]


@pytest.fixture
def worker(monkeypatch, request):
    """A real Celery worker process (the conftest's fixture) with short BMC timeouts and leases."""
    monkeypatch.setenv("FLEET_BMC_TIMEOUT", "2")
    monkeypatch.setenv("FLEET_ROLLOUT_LEASE_SECONDS", "5")
    return request.getfixturevalue("celery_worker_process")


@pytest.fixture
def ticker(worker, settings):
    """What beat does in production: a rollout tick every half second, from a thread of this process. The tick
    publishes the steps; the worker runs them."""
    from firmware.services.engine import rollout_tick

    settings.FLEET_ROLLOUT_LEASE_SECONDS = 5
    stop = threading.Event()
    errors: list[str] = []

    def run() -> None:
        try:
            while not stop.wait(0.5):
                try:
                    rollout_tick()
                except Exception as exc:  # noqa: BLE001 - reported by the fixture, not lost in the thread
                    errors.append(repr(exc))
        finally:
            connection.close()

    thread = threading.Thread(target=run, name="rollout-ticker", daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=10)
    assert not errors, errors


@pytest.fixture
def sim_fleet(transactional_db):
    with running_simulator(bmcs=SERVERS, task_seconds=0.5, bmc_reset_seconds=0.3, seed=3) as sim:
        yield rollout_fleet.build(servers=SERVERS, per_rack=2,
                                  bmc_url=lambda n: sim.bmc_url(f"bmc-{n + 1:04d}"))


@pytest.mark.celery
@pytest.mark.skipif(not django_settings.REDIS_URL, reason="needs REDIS_URL (a real broker)")
def test_create_approve_and_watch_a_rollout(live_server, new_page, sim_fleet, make_user, ticker):
    expect = playwright.expect
    operator = make_user("operator", username="ops-carol")
    approver = make_user("approver", username="appr-dave")
    bundle = sim_fleet.bundle

    # The operator opens the wizard from the rollout list.
    ops = new_page()
    login(ops, live_server.url, operator.username, "/firmware/rollouts/")
    expect(ops.locator("#rollout-table")).to_contain_text("No rollouts")
    ops.click("#new-rollout")
    ops.wait_for_url("**/firmware/rollouts/new/")
    expect(ops.locator("#preview-empty")).to_be_visible()
    ops.evaluate("window.__noReload = true")

    # Picking the bundle plans it live: every server is a target, the canary covers the one upgrade path.
    ops.fill("#id_name", "VBIOS 96.00.9F fra")
    ops.select_option("#id_bundle", str(bundle.pk))
    expect(ops.locator("#preview-targets")).to_have_text(str(SERVERS))
    expect(ops.locator("#preview-canary tbody tr")).to_have_count(1)
    first_hash = ops.locator("#plan-hash").get_attribute("data-plan-hash")

    # Changing the waves and the per-rack cap changes the plan (and its hash) in place.
    ops.fill("#id_waves", "30, 100")
    ops.fill("#id_cap_rack", "1")
    expect(ops.locator("#plan-hash")).not_to_have_attribute("data-plan-hash", first_hash)
    expect(ops.locator("#preview-wave-table tbody tr").first).to_contain_text("canary")
    # A bad value is flagged next to its field, and the plan waits for it.
    ops.fill("#id_waves", "30, 10")
    expect(ops.locator("#errors-waves")).to_contain_text("must increase")
    ops.fill("#id_waves", "30, 100")
    expect(ops.locator("#errors-waves")).to_be_empty()
    expect(ops.locator("#preview-wave-table")).to_be_visible()
    planned_hash = ops.locator("#plan-hash").get_attribute("data-plan-hash")
    assert ops.evaluate("window.__noReload") is True, "the preview reloaded the page"
    shot(ops, "20-rollout-wizard-preview")

    ops.click("#create-rollout")
    ops.wait_for_url(re.compile(r"/firmware/rollouts/\d+/$"))
    rollout = Rollout.objects.get()
    assert rollout.plan_hash == planned_hash  # the preview was the plan
    expect(ops.locator("#rollout-state")).to_have_text("Planned")
    expect(ops.locator(".messages")).to_contain_text(f"planned: {SERVERS} targets")
    ops.click("#action-submit")
    expect(ops.locator("#rollout-state")).to_have_text("Awaiting approval")
    expect(ops.locator("#action-approve")).to_have_count(0)  # an operator does not approve
    shot(ops, "21-rollout-awaiting-approval")

    # A second person approves.
    appr = new_page()
    login(appr, live_server.url, approver.username, f"/firmware/rollouts/{rollout.pk}/")
    expect(appr.locator("#rollout-state")).to_have_text("Awaiting approval")
    appr.click("#action-approve")
    expect(appr.locator("#rollout-state")).to_have_text("Approved")
    expect(appr.locator("#rollout-live")).to_contain_text("approved by appr-dave")

    # The operator reloads (a rollout awaiting approval does not poll), sees who approved, and starts it.
    ops.reload()
    expect(ops.locator("#rollout-state")).to_have_text("Approved")
    expect(ops.locator("#rollout-live")).to_contain_text("approved by appr-dave")
    ops.evaluate("window.__noReload = true")
    ops.click("#action-start")
    expect(ops.locator("#rollout-state")).to_have_text("Running")

    # Progress moves on the page by itself: some targets finished, not yet all.
    expect(ops.locator("#rollout-progress-bar")).not_to_have_attribute("aria-valuenow", "0", timeout=60_000)
    shot(ops, "22-rollout-running")
    expect(ops.locator("#rollout-state")).to_have_text("Completed", timeout=120_000)
    expect(ops.locator("#rollout-progress-bar")).to_have_attribute("aria-valuenow", "100")
    expect(ops.locator("#rollout-counts")).to_contain_text(f"{SERVERS} of {SERVERS} targets finished")
    expect(ops.locator("#wave-table tbody .rs-passed")).to_have_count(rollout.waves.count())
    expect(ops.locator("#failures")).to_contain_text("No failures.")
    expect(ops.locator("#rollout-live")).not_to_have_attribute("hx-trigger", re.compile("every"))  # polling stopped
    assert ops.evaluate("window.__noReload") is True, "the page reloaded instead of swapping its progress"
    timeline = ops.locator("#timeline tbody")
    expect(timeline.locator("tr").first).to_contain_text("complete")
    for who in ("ops-carol", "appr-dave", "rollout-engine"):
        expect(timeline).to_contain_text(who)
    shot(ops, "23-rollout-completed")

    rollout.refresh_from_db()
    assert rollout.state == RolloutState.COMPLETED and rollout.approved_by == approver
    assert set(rollout.targets.values_list("state", flat=True)) == {TargetState.SUCCEEDED}

    # The list shows it done, with both people.
    ops.goto(f"{live_server.url}/firmware/rollouts/?state=completed")
    row = ops.locator("#rollout-table tbody tr").first
    expect(row).to_contain_text("VBIOS 96.00.9F fra")
    expect(row).to_contain_text("ops-carol")
    expect(row).to_contain_text("appr-dave")
    shot(ops, "24-rollout-list")


def test_a_paused_rollout_shows_its_failures_and_the_buttons_each_role_gets(live_server, new_page, users,
                                                                              transactional_db):
    """No engine here: the rollout is moved through the services while the page is open, as the engine would."""
    from firmware.models import RolloutTarget
    from firmware.services import rollout as svc

    expect = playwright.expect
    fleet = rollout_fleet.build(servers=6, per_rack=2)
    old = fw_factories.bundle({"gpu_vbios": rollout_fleet.OLD_VBIOS}, name="vbios-in-force")
    fw_factories.baseline(old, users["approver"])  # what a rollback would go back to
    rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"], strategy={"waves": [50, 100]})
    rollout = svc.rollout_start(rollout=rollout, actor=users["operator"])
    canary = RolloutTarget.objects.filter(rollout=rollout, wave__index=0).select_related("server").first()
    RolloutTarget.objects.filter(pk=canary.pk).update(
        state=TargetState.FAILED, error_class="firmware", attempts=1,
        last_error="Update.1.0.ActivateFailed: GPU_SXM_3 still reports 96.00.89.00.01 after the power cycle")
    with transaction.atomic():
        svc.rollout_engine_pause(rollout_id=rollout.pk, reason="canary gate failed: 1 firmware failure")

    # A viewer sees the state, the reason and the failure, and no button.
    viewer = new_page()
    login(viewer, live_server.url, users["viewer"].username, f"/firmware/rollouts/{rollout.pk}/")
    expect(viewer.locator("#rollout-state")).to_have_text("Paused")
    expect(viewer.locator("#pause-reason-text")).to_have_text("canary gate failed: 1 firmware failure")
    failure = viewer.locator("#failures tbody tr").first
    expect(failure).to_contain_text(canary.server.hostname)
    expect(failure).to_contain_text("ActivateFailed")
    expect(failure.locator(".err-firmware")).to_be_visible()
    expect(viewer.locator("#rollout-actions")).to_have_count(0)

    # The operator resumes, then pauses with a reason typed while the page polls (the typing survives the swaps).
    ops = new_page()
    login(ops, live_server.url, users["operator"].username, f"/firmware/rollouts/{rollout.pk}/")
    for name in ("resume", "abort", "rollback"):
        expect(ops.locator(f"#action-{name}")).to_be_visible()
    shot(ops, "25-rollout-paused-failures")
    ops.click("#action-resume")
    expect(ops.locator("#rollout-state")).to_have_text("Running")
    expect(viewer.locator("#rollout-state")).to_have_text("Running", timeout=6_000)  # the viewer's page polled
    ops.fill("#reason-pause", "ticket OPS-99: hold for the vendor")
    ops.wait_for_timeout(2_500)  # at least one poll swaps the live partial
    expect(ops.locator("#reason-pause")).to_have_value("ticket OPS-99: hold for the vendor")
    ops.click("#action-pause")
    expect(ops.locator("#rollout-state")).to_have_text("Paused")
    expect(ops.locator("#rollout-notices")).to_contain_text("Pause: done")
    expect(ops.locator("#pause-reason-text")).to_have_text("ticket OPS-99: hold for the vendor")
    expect(ops.locator("#timeline tbody tr").first).to_contain_text("ticket OPS-99: hold for the vendor")
    # An abort asks first; dismissing it changes nothing.
    ops.once("dialog", lambda dialog: dialog.dismiss())
    ops.click("#action-abort")
    expect(ops.locator("#rollout-state")).to_have_text("Paused")
    ops.once("dialog", lambda dialog: dialog.accept())
    ops.click("#action-abort")
    expect(ops.locator("#rollout-state")).to_have_text("Aborted")
    expect(ops.locator("#rollout-live")).not_to_have_attribute("hx-trigger", re.compile("every"))
    shot(ops, "26-rollout-aborted")
