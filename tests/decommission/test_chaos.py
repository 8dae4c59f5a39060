"""Decommission under faults, on real Celery worker processes (tests/workers.py; this process only ticks, as beat
does, and publishes), the BMC simulator in its own process answering standard Redfish only, and PostgreSQL.

Each test proves its fault landed (the simulator's control-API counters) and asserts from those counters: every
mutating request processed at most once per BMC and path (0 duplicate ForceOffs, resets, erases, clears), no
asset lost (each sanitized, or held with its reason where a person can see it), no medium escalated for a fault
of the management path. Windows are the simulator's (a request processed after the client's timeout, a reboot
window, a purge) and every wait is on a condition."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import redis
from django.conf import settings

from decommission import services
from decommission.models import Asset, DecommissionRequest, MediaState, Medium
from decommission.services.agent import agent_results_submit, agent_script, agent_token_issue
from fleet import dispatch
from inventory.services import record_update
from tests.decommission.decom_factories import server_with_gpus
from tests.decommission.tool_outputs import agent_results
from tests.workers import start_worker
from world.bmc.testing import SimulatorProcess

pytestmark = [pytest.mark.celery, pytest.mark.chaos, pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (a real broker)")]
LATE_SECONDS = 2.0
# The workers' settings: a BMC answer waited 1 s (below the 4 s lease, so no send outlasts it); a lost answer
# settles 5 s (longer than the simulator's late processing, 2 s after the request).
WORKER_ENV = {"DECOMMISSION_LEASE_SECONDS": "4", "DECOMMISSION_SETTLE_SECONDS": "5", "FLEET_BMC_TIMEOUT": "1",
              "DECOMMISSION_POLL_SECONDS": "0.5", "DECOMMISSION_CHUNK": "4"}
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"


def _until(check, timeout: float, every=None):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        dispatch.send("decommission.tasks.tick_task")  # what beat does every 10 s
        if every is not None:
            every()
        time.sleep(0.3)
    return None


class Run:
    def __init__(self, sim: SimulatorProcess, users: dict, servers: int, keys: str) -> None:
        self.sim, self.users, self.servers, self.keys = sim, users, servers, keys
        self.workers: list[subprocess.Popen] = []

    def worker(self, **env: str) -> None:
        self.workers.append(start_worker(broker=settings.REDIS_URL,
                                         env={**WORKER_ENV, "DECOMMISSION_SIGNING_KEY_DIR": self.keys, **env}))

    def request(self) -> DecommissionRequest:
        users, servers = self.users, []
        for i in range(self.servers):
            server = server_with_gpus()
            record_update(obj=server, actor=None, bmc_address=self.sim.bmc_url(f"bmc-{i + 1:04d}"))
            servers.append(server)
        r = services.request_create(servers=servers, reason="eol", category="moderate", destination="resale",
                                    actor=users["operator"])
        services.request_approve(request=r, actor=users["approver"])
        services.request_drain(request=r, actor=users["operator"])
        services.request_inventory_start(request=r, actor=users["operator"])
        inventoried = _until(lambda: DecommissionRequest.objects.get(pk=r.pk).state == "inventoried", 120)
        assert inventoried, "the inventory did not finish"
        services.request_start_sanitizing(request=r, actor=users["operator"])
        for asset in r.assets.all():  # the host agents report first: the run is the BMC's part
            _token, raw = agent_token_issue(asset=asset, actor=None)
            agent_script(raw_token=raw, server=asset.label, upload_url="http://fleet/")
            serials = list(Medium.objects.filter(asset=asset, media_type="nvme", target_uri="").values_list(
                "serial", flat=True))
            agent_results_submit(raw_token=raw, server=asset.label, results=agent_results(serials))
        return r

    def finished(self, r: DecommissionRequest) -> bool:
        """Nothing left to run: every asset sanitized or held for a person."""
        return not Asset.objects.filter(request=r, hold_reason="").exclude(state="sanitized").exists()

    def stop(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()


def _at_most_once(sim: SimulatorProcess) -> dict:
    """Every mutating request processed at most once per BMC and path."""
    counters = sim.control.counters()
    twice = {(bmc, path): n for bmc, c in counters["bmcs"].items() for path, n in c["processed"].items() if n > 1}
    assert not twice, f"processed more than once: {twice}"
    return counters


def _all_done(r: DecommissionRequest, servers: int) -> None:
    """Nothing lost: every server of the plan is in the request and sanitized, every medium done."""
    assert r.assets.count() == servers
    held = list(Asset.objects.filter(request=r).exclude(hold_reason="").values_list("label", "hold_reason"))
    assert not held, held
    r.refresh_from_db()
    left = list(Medium.objects.filter(request=r).exclude(state__in=["sanitized", "recorded"]).values_list(
        "asset__label", "media_type", "state", "detail"))
    assert r.state == "verifying" and not left, (r.state, left)


@pytest.fixture
def run(users, tmp_path, monkeypatch, no_eager_celery):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(settings, "DECOMMISSION_SIGNING_KEY_DIR", str(tmp_path / "keys"))
    redis.Redis.from_url(settings.REDIS_URL).delete("celery")
    holder: dict = {}

    def make(servers: int, erase_seconds: float = 0.0) -> Run:
        monkeypatch.setenv("DECOMMISSION_SIM_ERASE_SECONDS", str(erase_seconds))
        sim = SimulatorProcess(bmcs=servers, plugins=("world.bmc.decommission",), seed=7)
        sim.start()
        holder["run"] = Run(sim, users, servers, str(tmp_path / "keys"))
        return holder["run"]

    yield make
    if "run" in holder:
        holder["run"].stop()
        holder["run"].sim.kill()


def test_late_processing_of_5_percent_of_every_action_sends_nothing_twice(run):
    """5 % of every mutating request (ClearLog, ResetBios, SecureErase, the DPU's reset, ForceOff, ResetAll) is
    answered never and carried out 2 s later, after the worker's 1 s timeout: each is settled from the BMC's
    standard evidence as landed, never sent again."""
    r_ = run(16)
    r_.sim.control.configure(bmc_reset_seconds=0.5, faults=[
        {"kind": "late", "rate": 0.05, "method": "POST", "path": "/redfish/v1/[SCM]*", "seconds": LATE_SECONDS}])
    r_.worker()
    r_.worker()
    r = r_.request()
    assert _until(lambda: r_.finished(r), 400), "the request did not finish"
    counters = _at_most_once(r_.sim)
    late = counters["faults"].get("late", 0)
    if not late:
        pytest.fail("the fault did not land: no request was processed late (seed 7); nothing was tested")
    adopted = r.events.filter(step__endswith=".reconcile", result="adopted").count()
    assert adopted >= 1, "a late request was settled from the device"
    _all_done(r, 16)


def test_purged_tasks_are_settled_from_the_event_log(run):
    """Finished tasks vanish at once (task monitors answer 404); the test process reads every BMC through the
    control API while it waits, which settles and purges their tasks before the workers poll (every 0.5 s)."""
    r_ = run(6, erase_seconds=0.2)
    r_.sim.control.configure(purge_tasks_after=0.001, bmc_reset_seconds=0.5)
    r_.worker()
    r_.worker()
    r = r_.request()

    def read_bmcs() -> None:
        for i in range(6):
            r_.sim.control.bmc(f"bmc-{i + 1:04d}")

    assert _until(lambda: r_.finished(r), 300, every=read_bmcs), "the request did not finish"
    counters = _at_most_once(r_.sim)
    if not counters["faults"].get("purged"):
        pytest.fail("the fault did not land: no task was purged")
    from_log = Medium.objects.filter(request=r, detail__contains="event log").count()
    assert from_log >= 1, "at least one task's end came from the event log (its monitor answered 404)"
    _all_done(r, 6)


def test_reboots_with_refused_connections_are_infra_not_device_failures(run):
    """One BMC in ten reboots (refused connections for 3 s) after answering a request: the workers wait, count
    the errors within their bound, and finish; no medium is failed or escalated, nothing processed twice."""
    r_ = run(8)
    r_.sim.control.configure(reboot_mode="refused", bmc_reset_seconds=0.5, faults=[
        {"kind": "reboot", "rate": 0.1, "method": "POST", "path": "/redfish/v1/[SCM]*", "seconds": 3}])
    r_.worker()
    r_.worker()
    r = r_.request()
    assert _until(lambda: r_.finished(r), 400), "the request did not finish"
    counters = _at_most_once(r_.sim)
    if not counters["faults"].get("reboot"):
        pytest.fail("the fault did not land: no BMC rebooted")
    assert not Medium.objects.filter(request=r, device_failures__gt=0).exists()
    assert not Medium.objects.filter(request=r, state__in=[MediaState.FAILED, MediaState.ESCALATED]).exists()
    _all_done(r, 8)


def _skewed_worker(keys: str, seconds: int) -> subprocess.Popen:
    """A worker process whose clock runs ``seconds`` ahead: Debian's libfaketime preloaded into the real process
    (as ``faketime`` does, without its wrapper process: the pid is the worker's, and stopping it stops it)."""
    import os
    import sys

    from tests.workers import ROOT, worker_database_url

    env = {**os.environ, **WORKER_ENV, "DECOMMISSION_CHUNK": "1", "DECOMMISSION_SIGNING_KEY_DIR": keys,
           "REDIS_URL": settings.REDIS_URL, "DATABASE_URL": worker_database_url("skewed"),
           "CELERY_TASK_ALWAYS_EAGER": "0", "LD_PRELOAD": FAKETIME_LIB, "FAKETIME": f"+{seconds}s"}
    return subprocess.Popen(  # noqa: S603 - our own interpreter
        [sys.executable, "-m", "celery", "-A", "fleet", "worker", "--pool", "solo", "--concurrency", "1",
         "--loglevel", "WARNING", "-n", "skewed@%h", "--without-heartbeat", "--without-gossip",
         "--without-mingle"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.skipif(not Path(FAKETIME_LIB).exists(), reason="needs Debian's faketime")
def test_a_worker_whose_clock_is_30_s_ahead_neither_steals_leases_nor_settles_early(run, settings):
    """One worker's clock 30 s ahead of the other's and the database's: leases (4 s) and the settle period (5 s)
    are the database's, so it neither takes a lease the other still holds nor reconciles a lost answer before
    the BMC carried it out (every drive erase is processed 2 s after the 1 s timeout)."""
    settings.DECOMMISSION_CHUNK = 1  # one run message per due asset: both workers get work
    r_ = run(4)
    r_.sim.control.configure(bmc_reset_seconds=0.5, faults=[
        {"kind": "late", "method": "POST", "path": "/redfish/v1/Systems/1/Storage/1/Drives/*/Actions/*",
         "seconds": LATE_SECONDS}])
    r_.worker(DECOMMISSION_CHUNK="1")
    skewed = _skewed_worker(r_.keys, 30)
    r_.workers.append(skewed)
    r = r_.request()
    owners: set[str] = set()

    def seen() -> None:
        owners.update(o for o in Asset.objects.filter(request=r).values_list("lease_owner", flat=True) if o)

    assert _until(lambda: r_.finished(r), 300, every=seen), "the request did not finish"
    if not any(f":{skewed.pid}:" in o for o in owners):
        pytest.fail(f"the fault did not land: the skewed worker (pid {skewed.pid}) never held a lease {owners}")
    counters = _at_most_once(r_.sim)
    assert counters["faults"].get("late", 0) >= 8, counters["faults"]  # every erase answered late
    _all_done(r, 4)
