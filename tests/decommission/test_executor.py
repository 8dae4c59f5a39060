"""The step executor against the BMC simulator over real HTTP (its decommission plugin): inventory from Redfish,
every Redfish step in order (ResetToDefaults last), the host agent's part, power-off for volatile media; a lost
answer reconciled from the device without a second send; a device failure retried then escalated."""

from __future__ import annotations

import datetime as dt
import json
import urllib.request

import pytest
from django.utils import timezone

from decommission import services
from decommission.executor import run_due
from decommission.inventory_run import inventory_collect
from decommission.models import Asset, MediaState, Medium
from decommission.services.agent import agent_results_submit, agent_script, agent_token_issue
from inventory.services import record_update
from tests.decommission.decom_factories import server_with_gpus
from tests.decommission.tool_outputs import agent_results
from world.bmc.testing import SimulatorControl, running_simulator

pytestmark = pytest.mark.django_db


@pytest.fixture
def sim(settings, tmp_path):
    settings.DECOMMISSION_SIGNING_KEY_DIR = str(tmp_path / "keys")
    settings.DECOMMISSION_SETTLE_SECONDS = 0.0
    settings.DECOMMISSION_POLL_SECONDS = 0.0
    with running_simulator(bmcs=2, task_seconds=0, plugins=["world.bmc.decommission"], bmc_reset_seconds=0) as server:
        for bmc in server.sim.bmc_ids():
            server.sim.bmc(bmc).extra["decommission"]["erase_seconds"] = 0
        yield server


def _post(server, bmc, path, body):
    req = urllib.request.Request(f"{server.bmc_url(bmc)}/redfish/v1/{path}", data=json.dumps(body).encode(),  # noqa: S310
                                 method="POST", headers={"Content-Type": "application/json",
                                                         "Authorization": "Basic ZmxlZXQ6ZmxlZXQ="})
    with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310 - the test's own simulator
        return json.loads(resp.read() or b"{}")


def _device(server, bmc, **settings):
    """Device faults and behaviour of one BMC's decommission plugin, set through the simulator's control API."""
    return SimulatorControl(server.url).request("POST", f"bmcs/{bmc}/decommission", settings)


def _snap(server, bmc):
    """The BMC's inside, through the simulator's control API (the Redfish answers carry no simulator fields)."""
    with urllib.request.urlopen(f"{server.url}/_sim/bmcs/{bmc}", timeout=5) as resp:  # noqa: S310 - the test's own simulator
        return json.loads(resp.read())["decommission"]


def _request(users, sim, n=1):
    servers = []
    for i in range(n):
        server = server_with_gpus()
        record_update(obj=server, actor=None, bmc_address=sim.bmc_url(f"bmc-{i + 1:04d}"))
        servers.append(server)
    r = services.request_create(servers=servers, reason="eol", category="moderate", destination="resale",
                                actor=users["operator"])
    services.request_approve(request=r, actor=users["approver"])
    services.request_drain(request=r, actor=users["operator"])
    assert inventory_collect(request_id=r.pk) == n
    r.refresh_from_db()
    assert r.state == "inventoried"
    services.request_start_sanitizing(request=r, actor=users["operator"])
    return r


def _agent(asset):
    _token, raw = agent_token_issue(asset=asset, actor=None)
    agent_script(raw_token=raw, server=asset.label, upload_url="http://x/")
    serials = list(Medium.objects.filter(asset=asset, media_type="nvme", target_uri="").values_list("serial",
                                                                                                   flat=True))
    agent_results_submit(raw_token=raw, server=asset.label, results=agent_results(serials))


def _run_until_idle(rounds=10):
    for _ in range(rounds):
        Asset.objects.update(next_run_at=timezone.now() - dt.timedelta(seconds=1))
        run_due()


def test_inventory_then_every_step_in_order_then_certify(sim, users):
    r = _request(users, sim)
    asset = r.assets.get()
    types = sorted(Medium.objects.filter(asset=asset).values_list("media_type", flat=True))
    assert types.count("nvme") == 2 and {"bmc_flash", "hmc_flash", "uefi_nvram", "tpm", "dpu"} <= set(types)
    run_due()
    state = _snap(sim, "bmc-0001")
    assert all(state["drives_erased"].values()) and state["dpu_factory"]
    assert "Manager.ResetToDefaults" not in state["done"], "the BMC reset waits for the host agent and the power-off"
    _agent(asset)
    _run_until_idle()
    r.refresh_from_db()
    assert r.state == "verifying", list(Medium.objects.filter(request=r).exclude(
        state__in=["sanitized", "recorded"]).values_list("media_type", "state", "detail"))
    state = _snap(sim, "bmc-0001")
    assert state["done"]["Manager.ResetToDefaults"] == 1 and state["factory_accounts"]
    assert sim.sim.bmc("bmc-0001").power["1"] == "Off"
    counters = sim.sim.stats.counters_json("bmc-0001")["bmcs"]["bmc-0001"]
    assert all(n == 1 for n in counters["received"].values()), counters  # every action sent once
    order = [e.step for e in r.events.filter(step__endswith=".sanitize").order_by("seq")]
    assert order[-1] == "bmc_flash.sanitize", order
    services.request_validate(request=r, actor=users["approver"])
    services.request_certify(request=r, actor=users["operator"])


def test_a_lost_answer_is_reconciled_not_resent(sim, users, settings):
    r = _request(users, sim)
    asset = r.assets.get()
    drive = Medium.objects.filter(asset=asset, media_type="nvme").order_by("serial").first()
    # The erase landed on the BMC but the worker died before recording the answer: simulate by sending it
    # ourselves after recording "sending" the way the executor does (with the event log's reading before it:
    # empty on this fresh BMC).
    Medium.objects.filter(pk=drive.pk).update(state=MediaState.SENDING, sent_at=timezone.now(), sends=1,
                                              baseline={"event_log": True, "events_last": None})
    _post(sim, "bmc-0001", f"{drive.target_uri.removeprefix('/redfish/v1/')}/Actions/Drive.SecureErase",
          {"SanitizationType": "CryptographicErase"})
    erase = f"POST {drive.target_uri}/Actions/Drive.SecureErase"
    run_due()
    drive.refresh_from_db()
    assert drive.state == MediaState.SANITIZED
    assert r.events.filter(step="nvme.reconcile", result="adopted").exists()
    counters = sim.sim.stats.counters_json("bmc-0001")["bmcs"]["bmc-0001"]
    assert counters["received"][erase] == 1, "ours only: the executor adopted it and never sent it again"


def test_device_failure_retries_then_escalates(sim, users):
    r = _request(users, sim)
    asset = r.assets.get()
    drive = Medium.objects.filter(asset=asset, media_type="nvme").order_by("serial").first()
    _device(sim, "bmc-0001", fail={drive.target_uri.removeprefix("/redfish/v1/"): 3})
    _agent(asset)
    _run_until_idle(rounds=8)
    drive.refresh_from_db()
    assert drive.device_failures == 3 and drive.state == MediaState.ESCALATED
    r.refresh_from_db()
    assert r.state == "escalated_destroy"


def test_legal_hold_stops_the_workers(sim, users):
    r = _request(users, sim)
    services.request_hold(request=r, reason="Matter 5", actor=users["approver"])
    assert run_due() == 0
    assert not Medium.objects.filter(request=r).exclude(state="pending").exists()


def test_query_budget_and_the_request_lock_once_per_server(sim, users):
    """The worker's cost per server is pinned: a first pass (BMC actions) and a second pass (after the agent's
    upload: power-off, BMC reset) within a query budget, and the request's row locked only when a server
    finishes (its chain anchored), not at every step: the servers' chains are their own."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    r = _request(users, sim, n=2)
    with CaptureQueriesContext(connection) as first:
        run_due()
    for asset in r.assets.all():
        _agent(asset)
    Asset.objects.update(next_run_at=timezone.now() - dt.timedelta(seconds=1))
    with CaptureQueriesContext(connection) as second:
        run_due()
    r.refresh_from_db()
    assert r.state == "verifying"

    def counted(ctx):
        return [q["sql"] for q in ctx.captured_queries if "SAVEPOINT" not in q["sql"]]

    # measured 28 per server: the readings each send is reconciled against, and each send's own time stamp
    assert len(counted(first)) <= 2 * 30, len(counted(first))
    # measured 57 per server: the ForceOff, the BMC log clear and ResetAll each recorded before it is sent
    assert len(counted(second)) <= 2 * 60, len(counted(second))
    request_locks = [q for q in counted(first) + counted(second)
                     if 'FROM "decommission_decommissionrequest"' in q and "FOR UPDATE" in q]
    assert not [q for q in counted(first) if q in request_locks], "no request lock while servers run"
    # in each finishing server's transaction: settle + its anchor; then the request's own move (the last one)
    assert len(request_locks) <= 2 * 2 + 1, request_locks
    anchors = r.events.filter(step="chain.anchor", asset__isnull=True)
    assert sorted(a["asset"] for e in anchors for a in e.detail["anchors"]) == sorted(
        r.assets.values_list("pk", flat=True))


def test_a_server_waiting_for_its_agent_is_not_polled_and_the_upload_wakes_it(sim, users):
    r = _request(users, sim)
    asset = r.assets.get()
    assert run_due() == 1
    asset.refresh_from_db()
    assert asset.next_run_at > timezone.now() + dt.timedelta(seconds=20), "parked until the upload, not polled"
    assert run_due() == 0, "nothing due: the worker does not come back to ask"
    _agent(asset)
    asset.refresh_from_db()
    assert asset.next_run_at <= timezone.now(), "the upload made it due"
    assert run_due() == 1
    r.refresh_from_db()
    assert r.state == "verifying"
