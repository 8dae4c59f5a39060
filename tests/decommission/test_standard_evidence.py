"""Decommission against a BMC that shows only standard Redfish (no Oem objects, no task Payload, finished tasks
purged, ResetAll taking the credentials away): every action reconciled from the same BMC's readings, UNKNOWN
held for a person with the evidence, every error class bounded, nothing sent twice. Real HTTP to the simulator
(its decommission plugin); its insides through the control API only."""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.request

import pytest
from django.utils import timezone

from decommission.executor import run_due
from decommission.models import Asset, MediaState, Medium
from fleet.redfish import sessions_clear
from tests.decommission.test_executor import _agent, _device, _post, _request, _snap
from world.bmc.testing import running_simulator

pytestmark = pytest.mark.django_db


@pytest.fixture
def sim(settings, tmp_path):
    settings.DECOMMISSION_SIGNING_KEY_DIR = str(tmp_path / "keys")
    settings.DECOMMISSION_SETTLE_SECONDS = 0.0
    settings.DECOMMISSION_UNKNOWN_SETTLE_SECONDS = 0.0
    settings.DECOMMISSION_POLL_SECONDS = 0.0
    with running_simulator(bmcs=2, task_seconds=0, plugins=["world.bmc.decommission"], bmc_reset_seconds=0) as server:
        for bmc in server.sim.bmc_ids():
            server.sim.bmc(bmc).extra["decommission"]["erase_seconds"] = 0
        yield server
    sessions_clear()


def _control(server, path, body):
    req = urllib.request.Request(f"{server.url}/_sim/{path}", data=json.dumps(body).encode(), method="POST",  # noqa: S310
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310 - the test's own simulator
        return json.loads(resp.read() or b"{}")


def _counters(server, bmc="bmc-0001"):
    with urllib.request.urlopen(f"{server.url}/_sim/counters?bmc={bmc}", timeout=5) as resp:  # noqa: S310
        return json.loads(resp.read())["bmcs"].get(bmc, {"received": {}, "processed": {}})


def _due():
    Asset.objects.update(next_run_at=timezone.now() - dt.timedelta(seconds=1))


def _passes(n):
    for _ in range(n):
        _due()
        run_due()


def _until(check, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {check}")


def _no_oem(doc):
    if isinstance(doc, dict):
        assert "Oem" not in doc and "Payload" not in doc, doc
        for value in doc.values():
            _no_oem(value)
    elif isinstance(doc, list):
        for value in doc:
            _no_oem(value)


def _get(server, bmc, path):
    req = urllib.request.Request(f"{server.bmc_url(bmc)}/redfish/v1/{path}",  # noqa: S310
                                 headers={"Authorization": "Basic ZmxlZXQ6ZmxlZXQ="})
    with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310 - the test's own simulator
        return json.loads(resp.read())


def test_the_plugin_answers_standard_redfish_only(sim):
    erase = _post(sim, "bmc-0001", "Systems/1/Storage/1/Drives/0/Actions/Drive.SecureErase", {})
    for path in ("Systems/1/Storage/1/Drives/0", "Systems/1/Bios", "Chassis/1/NetworkAdapters/DPU_0",
                 "Managers/1/LogServices/Log", "Systems/1/LogServices/EventLog/Entries"):
        _no_oem(_get(sim, "bmc-0001", path))  # (the task itself is the core's: it names its erase in Messages)
    messages = _get(sim, "bmc-0001", erase["@odata.id"].removeprefix("/redfish/v1/"))["Messages"]
    assert [m["MessageId"] for m in messages] == ["TaskEvent.1.0.TaskStarted", "TaskEvent.1.0.TaskCompletedOK"]
    events = _get(sim, "bmc-0001", "Systems/1/LogServices/EventLog/Entries")["Members"]
    assert [e["MessageId"] for e in events] == ["TaskEvent.1.0.TaskStarted", "TaskEvent.1.0.TaskCompletedOK"]
    assert {e["Links"]["OriginOfCondition"]["@odata.id"] for e in events} == {
        "/redfish/v1/Systems/1/Storage/1/Drives/0"}


def _purged_after_first_pass(sim):
    """Tasks that run 0.2 s: the first pass starts them; then wait until the BMC has purged every one (the
    control API's reading settles them), so the next poll meets a 404 whatever the machine's speed."""
    _control(sim, "config", {"purge_tasks_after": 0.001})
    _device(sim, "bmc-0001", erase_seconds=0.2)
    _passes(1)
    assert Medium.objects.filter(media_type="nvme", state=MediaState.RUNNING).exists()
    _until(lambda: all(_snap(sim, "bmc-0001")["drives_erased"].values()) and not _bmc(sim)["tasks"])
    with urllib.request.urlopen(f"{sim.url}/_sim/counters", timeout=5) as resp:  # noqa: S310
        assert json.loads(resp.read())["faults"]["purged"] >= 3  # the fault landed: 2 erases + the DPU reset


def _bmc(server, bmc="bmc-0001"):
    with urllib.request.urlopen(f"{server.url}/_sim/bmcs/{bmc}", timeout=5) as resp:  # noqa: S310
        return json.loads(resp.read())


def test_a_purged_task_is_settled_from_the_event_log_and_sent_once(sim, users):
    r = _request(users, sim)
    asset = r.assets.get()
    _agent(asset)
    _purged_after_first_pass(sim)
    _passes(3)
    r.refresh_from_db()
    assert r.state == "verifying", list(Medium.objects.filter(request=r).values_list("media_type", "state", "detail"))
    drives = Medium.objects.filter(asset=asset, media_type="nvme").exclude(target_uri="")
    assert all("event log" in d.detail for d in drives), [d.detail for d in drives]
    counters = _counters(sim)
    assert counters["received"]["POST /redfish/v1/Systems/1/Storage/1/Drives/0/Actions/Drive.SecureErase"] == 1
    assert all(n == 1 for n in counters["received"].values()), counters


def test_no_event_log_and_a_purged_task_is_unknown_then_held_never_resent(sim, users, client):
    _device(sim, "bmc-0001", event_log=False)
    r = _request(users, sim)
    asset = r.assets.get()
    _purged_after_first_pass(sim)
    _passes(2)  # the purged task (UNKNOWN), the longer settle's reading (UNKNOWN again): held
    asset.refresh_from_db()
    assert asset.hold_reason and "a person decides" in asset.hold_reason, asset.hold_reason
    assert asset.hold_evidence["why"].startswith("the task was purged"), asset.hold_evidence
    assert r.events.filter(step="asset.hold").exists() and r.events.filter(result="unknown").exists()
    _passes(2)  # a held asset is not run
    erase = "POST /redfish/v1/Systems/1/Storage/1/Drives/0/Actions/Drive.SecureErase"
    assert _counters(sim)["received"][erase] == 1, "never sent again on the absence of evidence"
    # visible: the API, the request page and the metric
    client.force_login(users["viewer"])
    api = client.get(f"/api/v1/decommission/requests/{r.pk}/progress/").json()
    rows = api if isinstance(api, list) else api.get("results") or api.get("assets") or []
    assert any(a.get("hold_reason") == asset.hold_reason for a in rows), api
    page = client.get(f"/decommission/{r.pk}/").content.decode()
    assert asset.hold_reason.split(":")[0] in page and 'data-held="1"' in page
    from fleet.metrics import DataCollector
    held = [m for m in DataCollector().collect() if m.name == "fleet_decommission_assets_held"]
    assert held and held[0].samples[0].value == 1


def test_a_lost_reset_all_answer_is_found_from_the_401_it_leaves(sim, users, settings):
    settings.FLEET_BMC_TIMEOUT = 0.5
    sessions_clear()
    reset = "POST /redfish/v1/Managers/1/Actions/Manager.ResetToDefaults"
    _control(sim, "config", {"faults": [{"kind": "late", "method": "POST", "seconds": 1.5,
                                         "path": "/redfish/v1/Managers/1/Actions/Manager.ResetToDefaults"}]})
    r = _request(users, sim)
    asset = r.assets.get()
    _agent(asset)
    _passes(1)  # everything up to ResetAll, whose answer is lost
    bmc = Medium.objects.get(asset=asset, media_type="bmc_flash")
    assert bmc.state == MediaState.SENDING and bmc.baseline["phase"] == "reset"
    _until(lambda: _counters(sim)["processed"].get(reset, 0) == 1)  # the BMC did it after the client gave up
    _passes(1)
    bmc.refresh_from_db()
    r.refresh_from_db()
    assert bmc.state == MediaState.SANITIZED and r.state == "verifying", (bmc.state, bmc.detail)
    assert r.events.filter(medium=bmc, step="bmc_flash.reconcile", result="adopted",
                           detail__status=401).exists()
    assert _counters(sim)["received"][reset] == 1 and _snap(sim, "bmc-0001")["done"]["Manager.ResetToDefaults"] == 1


def test_a_clear_log_whose_post_fails_after_the_record_is_retried_under_it(sim, users):
    clear = "POST /redfish/v1/Managers/HGX_BMC_0/LogServices/Log/Actions/LogService.ClearLog"
    _control(sim, "config", {"faults": [{"kind": "http_error", "status": 503, "method": "POST",
                                         "path": "/redfish/v1/Managers/HGX_BMC_0/LogServices/Log/Actions/*"}]})
    r = _request(users, sim)
    asset = r.assets.get()
    _passes(1)
    hmc = Medium.objects.get(asset=asset, media_type="hmc_flash")
    assert hmc.state == MediaState.PENDING and hmc.sends == 1  # recorded, sent, not processed: pending again
    asset.refresh_from_db()
    assert asset.errors == 1
    _control(sim, "config", {"faults": []})
    _agent(asset)
    _passes(3)
    hmc.refresh_from_db()
    assert hmc.state == MediaState.SANITIZED and hmc.sends == 2
    counters = _counters(sim)
    assert counters["received"][clear] == 2 and counters["processed"][clear] == 1  # the 503 was not carried out
    assert _snap(sim, "bmc-0001")["done"]["LogService.ClearLog HGX_BMC_0"] == 1


def test_errors_are_bounded_then_the_asset_is_held_with_the_error(sim, users, settings):
    settings.DECOMMISSION_MAX_ERRORS = 3
    r = _request(users, sim)
    asset = r.assets.get()
    _control(sim, "config", {"faults": [{"kind": "http_error", "status": 503}]})  # every request, forever
    _passes(4)
    asset.refresh_from_db()
    assert asset.errors == 3 and "failed 3 passes" in asset.hold_reason and asset.hold_evidence["status"] == 503
    assert not Medium.objects.filter(asset=asset, state__in=["failed", "escalated"]).exists(), "infra, not device"


def test_a_refused_reboot_inside_the_recorded_boot_grace_is_waited_for_not_counted(sim, users, settings):
    settings.DECOMMISSION_MAX_ERRORS = 2
    r = _request(users, sim)
    asset = r.assets.get()
    _passes(1)
    Asset.objects.filter(pk=asset.pk).update(boot_grace_until=timezone.now() + dt.timedelta(seconds=60))
    _control(sim, "bmcs/bmc-0001/reboot", {"seconds": 600, "mode": "refused"})
    _agent(asset)
    _passes(4)
    asset.refresh_from_db()
    assert asset.errors == 0 and not asset.hold_reason
    _control(sim, "bmcs/bmc-0001/reboot", {"seconds": 0})
    sim.sim.bmc("bmc-0001").unreachable_until = 0  # the reboot ends
    _passes(3)
    r.refresh_from_db()
    assert r.state == "verifying"


def test_a_definite_refusal_holds_the_asset_and_is_no_device_failure(sim, users):
    _control(sim, "config", {"faults": [{"kind": "http_error", "status": 400, "method": "POST",
                                         "path": "/redfish/v1/Systems/1/Bios/Actions/*"}]})
    r = _request(users, sim)
    asset = r.assets.get()
    _passes(1)
    asset.refresh_from_db()
    assert "refused Bios.ResetBios" in asset.hold_reason and asset.hold_evidence["status"] == 400
    bios = Medium.objects.get(asset=asset, media_type="uefi_nvram")
    assert bios.device_failures == 0


def test_a_person_resumes_a_held_asset_with_a_decision_recorded_in_its_chain(sim, users, client):
    _device(sim, "bmc-0001", event_log=False)
    r = _request(users, sim)
    asset = r.assets.get()
    _agent(asset)
    _purged_after_first_pass(sim)
    _passes(2)
    asset.refresh_from_db()
    assert asset.hold_reason
    url = f"/api/v1/decommission/assets/{asset.pk}/resume/"
    client.force_login(users["viewer"])
    assert client.post(url, {"decision": "landed", "note": "x"}, content_type="application/json").status_code == 403
    client.force_login(users["approver"])
    bad = client.post(url, {"decision": "maybe"}, content_type="application/json")
    assert bad.status_code == 400 and "decision" in bad.json(), bad.json()
    no_note = client.post(url, {"decision": "landed"}, content_type="application/json")
    assert no_note.status_code == 400 and "note" in no_note.json(), no_note.json()
    ok = client.post(url, {"decision": "landed", "note": "nvme sanitize-log on the host: SSTAT 1 after the "
                                                         "request's start"}, content_type="application/json")
    assert ok.status_code == 200 and ok.json()["hold_reason"] == "", ok.json()
    assert r.events.filter(asset=asset, step="asset.resume", result="landed").exists()
    _passes(2)
    r.refresh_from_db()
    assert r.state == "verifying", list(Medium.objects.filter(request=r).values_list("media_type", "state"))
    erase = "POST /redfish/v1/Systems/1/Storage/1/Drives/0/Actions/Drive.SecureErase"
    assert _counters(sim)["received"][erase] == 1


def test_lost_answers_of_reset_bios_clear_log_and_force_off_are_adopted_from_the_device(sim, users, settings):
    settings.FLEET_BMC_TIMEOUT = 0.5
    sessions_clear()
    paths = {"bios": "/redfish/v1/Systems/1/Bios/Actions/Bios.ResetBios",
             "hmc": "/redfish/v1/Managers/HGX_BMC_0/LogServices/Log/Actions/LogService.ClearLog",
             "off": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"}
    settings.DECOMMISSION_SETTLE_SECONDS = 2.0  # longer than the BMC's late processing (1 s after the request)
    _control(sim, "config", {"faults": [{"kind": "late", "method": "POST", "path": p, "seconds": 1.0}
                                        for p in paths.values()]})
    r = _request(users, sim)
    asset = r.assets.get()
    _agent(asset)

    def verifying() -> bool:
        _passes(1)  # each pass either waits out the settle period or settles from the device
        r.refresh_from_db()
        return r.state == "verifying"

    _until(verifying, timeout=60)
    assert r.state == "verifying", list(Medium.objects.filter(request=r).values_list("media_type", "state", "detail"))
    adopted = set(r.events.filter(step__endswith=".reconcile", result="adopted").values_list("step", flat=True))
    assert {"uefi_nvram.reconcile", "hmc_flash.reconcile"} <= adopted, adopted
    counters = _counters(sim)
    assert [counters["received"].get(f"POST {p}") for p in paths.values()] == [1, 1, 1], counters
    with urllib.request.urlopen(f"{sim.url}/_sim/counters", timeout=5) as resp:  # noqa: S310
        assert json.loads(resp.read())["faults"]["late"] == 3, "each of the three answers was lost"
