"""A Celery worker process killed (SIGKILL) in the middle of a step, with the BMC simulator in its own process:
no step is sent twice, and the request completes on another worker that reconciles from the device's state."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
from django.conf import settings

from decommission import services
from decommission.models import MediaState, Medium
from decommission.services.agent import agent_results_submit, agent_script, agent_token_issue
from fleet import dispatch
from inventory.services import record_update
from tests.decommission.decom_factories import server_with_gpus
from tests.decommission.tool_outputs import agent_results
from tests.workers import start_worker
from world.bmc.testing import SimulatorProcess

pytestmark = [pytest.mark.celery, pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL")]
ERASE = "POST /redfish/v1/Systems/1/Storage/1/Drives/0/Actions/Drive.SecureErase"
FAST = {"DECOMMISSION_LEASE_SECONDS": "3", "DECOMMISSION_SETTLE_SECONDS": "4", "DECOMMISSION_POLL_SECONDS": "0.2",
        "DECOMMISSION_SIM_ERASE_SECONDS": "0"}


def _worker() -> subprocess.Popen:
    return start_worker(broker=settings.REDIS_URL,
                        env={**FAST, "DECOMMISSION_SIGNING_KEY_DIR": settings.DECOMMISSION_SIGNING_KEY_DIR})


def _until(check, timeout: float, tick: bool = False):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if tick:
            dispatch.send("decommission.tasks.tick_task")  # what beat does every 10 s
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {check}")


@pytest.mark.django_db(transaction=True)
def test_worker_killed_mid_step_sends_nothing_twice_and_the_request_completes(users, tmp_path, monkeypatch,
                                                                              no_eager_celery):
    import redis

    monkeypatch.setattr(settings, "DECOMMISSION_SIGNING_KEY_DIR", str(tmp_path / "keys"))
    monkeypatch.setenv("DECOMMISSION_SIM_ERASE_SECONDS", "0")
    redis.Redis.from_url(settings.REDIS_URL).delete("celery")
    sim = SimulatorProcess(bmcs=1, plugins=("world.bmc.decommission",))
    sim.start()
    workers: list[subprocess.Popen] = []
    try:
        # The erase is answered 6 s late: the worker is killed while it waits for the answer.
        sim.control.configure(faults=[{"kind": "slow", "method": "POST", "seconds": 6,
                                       "path": "/redfish/v1/Systems/1/Storage/1/Drives/0/Actions/*"}])
        server = server_with_gpus()
        record_update(obj=server, actor=None, bmc_address=sim.bmc_url("bmc-0001"))
        r = services.request_create(servers=[server], reason="eol", category="moderate", destination="resale",
                                    actor=users["operator"])
        services.request_approve(request=r, actor=users["approver"])
        services.request_drain(request=r, actor=users["operator"])
        workers.append(_worker())
        services.request_inventory_start(request=r, actor=users["operator"])
        _until(lambda: Medium.objects.filter(request=r).exists(), 60)
        services.request_start_sanitizing(request=r, actor=users["operator"])
        asset = r.assets.get()
        _token, raw = agent_token_issue(asset=asset, actor=None)
        agent_script(raw_token=raw, server=asset.label, upload_url="http://fleet/")
        agent_results_submit(raw_token=raw, server=asset.label, results=agent_results([]))

        drive = Medium.objects.get(request=r, target_uri="/redfish/v1/Systems/1/Storage/1/Drives/0")
        received = lambda: sim.control.counters("bmc-0001")["bmcs"].get("bmc-0001", {}).get(  # noqa: E731
            "received", {}).get(ERASE, 0)
        _until(received, 60, tick=True)
        drive.refresh_from_db()
        assert drive.state == MediaState.SENDING, "the kill lands after the record and before the answer"
        asset.refresh_from_db()  # the step in flight is the killed process's own (lease owner host:pid:nonce)
        assert f":{workers[0].pid}:" in asset.lease_owner, (asset.lease_owner, workers[0].pid)
        workers[0].send_signal(signal.SIGKILL)
        assert workers[0].wait(timeout=10) == -signal.SIGKILL
        _until(lambda: sim.control.counters("bmc-0001")["bmcs"]["bmc-0001"]["processed"].get(ERASE, 0), 20)

        workers.append(_worker())
        try:
            _until(lambda: r.__class__.objects.get(pk=r.pk).state == "verifying", 180, tick=True)
        except AssertionError:
            media = list(Medium.objects.filter(request=r).values_list("media_type", "state", "detail"))
            events = list(r.events.order_by("-seq").values_list("step", "result", "detail")[:8])
            raise AssertionError(f"not verifying: {r.__class__.objects.get(pk=r.pk).state} {media} {events} "
                                 f"{r.assets.values_list('state', 'next_run_at', 'lease_owner', 'lease_until')}") from None
        counters = sim.control.counters("bmc-0001")["bmcs"]["bmc-0001"]
        assert counters["received"][ERASE] == 1 and counters["processed"][ERASE] == 1
        assert all(n == 1 for n in counters["processed"].values()), counters
        assert r.events.filter(medium=drive, step="nvme.reconcile", result="adopted").exists()
        drive.refresh_from_db()
        assert drive.state == MediaState.SANITIZED
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
        sim.kill()
