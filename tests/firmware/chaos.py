"""The chaos harness: real Celery worker processes (``--pool solo``: the process that runs a step is the one
killed), the BMC simulator in its own process, a private redis-server when the broker itself is the fault,
PostgreSQL. No eager mode anywhere: the test process only ticks (as beat does) and publishes through
``fleet.dispatch``; every step runs in a worker.

What each fault did is read from where it landed: the simulator's own counters (``/_sim/counters``: every
mutating request received and processed per BMC), ``pg_locks`` (the server lock a killed worker held),
``pg_stat_activity`` (the sessions terminated), the target rows (none lost) and the recorded steps (the caps).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import redis
from django.db import connection

from firmware.models import Rollout, RolloutState, RolloutTarget, TargetState, TargetStep
from firmware.services import engine
from tests.workers import ROOT, start_worker, worker_database_url

SETTLED = (RolloutState.COMPLETED, RolloutState.COMPLETED_WITH_EXCEPTIONS, RolloutState.PAUSED, RolloutState.ABORTED)
UPDATE = "POST /redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"
MULTIPART = "POST /redfish/v1/UpdateService/update-multipart"
ACTIVATE = "POST /redfish/v1/UpdateService/Actions/UpdateService.Activate"
RESET_SUFFIXES = ("Chassis.Reset", "ComputerSystem.Reset", "Manager.Reset")
WORKER_ENV = {"FLEET_ROLLOUT_LEASE_SECONDS": "3", "FLEET_BMC_TIMEOUT": "1", "FLEET_BMC_SETTLE_SECONDS": "4",
              "FLEET_ROLLOUT_VERIFY_SECONDS": "60", "FLEET_BMC_BOOT_GRACE_SECONDS": "10",
              "FLEET_ROLLOUT_CHUNK": "4",
              # the simulator keeps finished tasks 600 s unless a test says otherwise: a true retention, so a
              # request marked as leaving with no task to show within it did not land (reconcile.py)
              "FLEET_BMC_TASK_RETENTION_SECONDS": "600"}


def free_port(low: int = 18500, high: int = 18999) -> int:
    """A free port in this branch's range."""
    for port in range(low, high):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


class Workers:
    """Celery worker processes on the test database, each with its own ``application_name`` (so its PostgreSQL
    session, and the advisory locks it holds, can be found)."""

    def __init__(self, broker: str) -> None:
        self.broker = broker
        self.procs: dict[str, subprocess.Popen] = {}
        self.started = 0

    def start(self, *, pool: str = "solo", env: dict[str, str] | None = None, log: Path | None = None) -> str:
        """A worker; ``--pool solo`` by default (the process that runs a step is the one a kill lands on). The
        prefork pool (one child) is the one that enforces Celery's time limits; ``log`` keeps its output."""
        self.started += 1
        name = f"chaos-{self.started}"
        self.procs[name] = start_worker(broker=self.broker, env={**WORKER_ENV, **(env or {})}, name=name, pool=pool,
                                        loglevel="WARNING" if log is not None else "ERROR",
                                        output=log.open("ab") if log is not None else subprocess.DEVNULL)
        return name

    def start_faketime(self, offset: str, *, env: dict[str, str] | None = None, log: Path) -> str:
        """A worker whose clock is off by ``offset`` (Debian's faketime: its ``libfaketimeMT`` preloaded into the real
        worker process, as ``faketime -f +30s`` does, but with the worker itself as the child we signal):
        its own ``time.time()``/``timezone.now()`` are off; the engine decides on the database's clock. Its log
        (INFO: one line per task run, stamped with its own clock) proves it ran steps with that clock."""
        self.started += 1
        name = f"chaos-{self.started}"
        worker_env = {**os.environ, **WORKER_ENV, **(env or {}), "REDIS_URL": self.broker,
                      "DATABASE_URL": worker_database_url(name), "CELERY_TASK_ALWAYS_EAGER": "0",
                      "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME": offset,
                      "LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"}
        self.procs[name] = subprocess.Popen(  # noqa: S603 - our own interpreter
            [sys.executable, "-m", "celery", "-A", "fleet", "worker", "--pool",
             "solo", "--concurrency", "1", "--loglevel", "INFO", "-n", f"{name}@%h", "--without-heartbeat",
             "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=worker_env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
        return name

    def alive(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is None]

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        proc.kill()  # SIGKILL: no cleanup; the message it runs stays unacknowledged, its session dies with it
        proc.wait(timeout=10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


def server_locks_by_worker() -> dict[str, int]:
    """application_name -> how many server locks (the engine's session advisory locks) its session holds."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT a.application_name, count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                       "WHERE l.locktype = 'advisory' AND l.classid = %s::oid AND l.granted "
                       "AND a.application_name LIKE 'chaos-%%' GROUP BY 1", [engine.SERVER_LOCK_NS])
        return dict(cursor.fetchall())


def terminate_worker_sessions() -> list[str]:
    """pg_terminate_backend on every worker's session; returns the application names terminated."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT application_name, pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE application_name LIKE 'chaos-%%' AND pid <> pg_backend_pid()")
        return [name for name, ok in cursor.fetchall() if ok]


class PrivateRedis:
    """A redis-server of our own (never the shared one) on this branch's port range, killed and restarted empty."""

    def __init__(self) -> None:
        self.port = free_port(18600)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(  # noqa: S603 - the system's redis-server
            ["/usr/bin/redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                redis.Redis.from_url(self.url).ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None


def publisher_send(broker: str):
    """A ``fleet.dispatch.send`` replacement that publishes to ``broker`` (a fresh connection each time: the
    broker may have been restarted). A broker that is down: False, as the real one answers."""
    from celery import Celery

    app = Celery("chaos-publisher", broker=broker, set_as_current=False)
    app.conf.broker_connection_retry_on_startup = False
    app.conf.broker_connection_max_retries = 0

    def send(name, *args, **kwargs):
        try:
            with app.connection_for_write() as conn:
                app.send_task(name, args=args, kwargs=kwargs, connection=conn, retry=False)
        except Exception:  # noqa: BLE001 - the broker is away: the lease brings the targets back
            return False
        return True

    return send


def tick_until_settled(rollouts: list[Rollout], timeout: float, during=None) -> list[Rollout]:
    """Tick like beat (every 0.3 s) until every rollout settles; ``during(elapsed)`` runs each round."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            engine.rollout_tick()
        except Exception as exc:  # noqa: BLE001 - beat's tick fails too while the database is away
            print("tick failed:", type(exc).__name__, exc)
            connection.close()
        if during is not None:
            during(time.monotonic() - start)
        for rollout in rollouts:
            rollout.refresh_from_db()
        if all(r.state in SETTLED for r in rollouts):
            return rollouts
        time.sleep(0.3)
    states = {r.pk: Counter(RolloutTarget.objects.filter(rollout=r).values_list("state", flat=True))
              for r in rollouts}
    sample = list(RolloutTarget.objects.filter(rollout__in=rollouts).exclude(state__in=("succeeded", "failed"))
                  .values_list("state", "last_error", "lease_owner", "next_run_at", "fence")[:5])
    steps = Counter(TargetStep.objects.filter(target__rollout__in=rollouts).values_list("kind", "outcome"))
    raise AssertionError(f"not settled after {timeout}s: {[(r.pk, r.state, r.pause_reason) for r in rollouts]} "
                         f"{states} {sample} {steps}")


def settle_with_a_person(sim, rollouts: list[Rollout], person, timeout: float, during=None) -> list[Rollout]:
    """``tick_until_settled``, with a person on call: a target held on an unanswered request (the BMC's standard
    evidence could not tell whether it landed: ``firmware.services.held``) is checked the way a person checks
    the BMC (here its counters, through the simulator's control API), the finding is recorded with
    ``rollout_target_resolve``, the rollout resumed, and its exceptions retried at the end. Never sends anything
    itself; a rollout paused for any other reason is returned as it is."""
    from firmware.services import held
    from firmware.services import rollout as services

    deadline = time.monotonic() + timeout
    while True:
        rollouts = tick_until_settled(rollouts, max(1.0, deadline - time.monotonic()), during)
        acted = False
        for rollout in rollouts:
            targets = list(RolloutTarget.objects.filter(rollout=rollout).select_related("server"))
            found = held.held_steps(targets)
            for entry in found.values():
                bmc = entry.target.server.bmc_address.rstrip("/").rsplit("/", 1)[-1]
                processed = sim.control.counters()["bmcs"].get(bmc, {}).get("processed", {})
                path = {"update": UPDATE, "activate": ACTIVATE}.get(entry.step.kind)
                assert path is not None, f"a person cannot check a held {entry.step.kind}: {entry.evidence}"
                landed = processed.get(path, 0) >= 1 or processed.get(MULTIPART, 0) >= 1 and entry.step.kind == "update"
                held.rollout_target_resolve(target=entry.target, actor=person, landed=landed,
                                            note=f"the BMC processed {path}: {landed}")
                acted = True
            if rollout.state == RolloutState.PAUSED and found:
                services.rollout_resume(rollout=rollout, actor=person, reason="held targets checked")
                acted = True
            elif rollout.state == RolloutState.COMPLETED_WITH_EXCEPTIONS and (found or held_resolved(rollout)):
                services.rollout_retry_exceptions(rollout=rollout, actor=person)
                acted = True
        for rollout in rollouts:
            rollout.refresh_from_db()
        if not acted or time.monotonic() >= deadline:
            return rollouts


def held_resolved(rollout: Rollout) -> bool:
    """Failed targets whose held step a person resolved and that were not retried since."""
    from firmware.services.engine.side_effects import FOUND, NOT_SENT

    return TargetStep.objects.filter(target__rollout=rollout, target__state=TargetState.FAILED,
                                     outcome__in=(FOUND, NOT_SENT), messages__icontains="checked by").exists()


def duplicates(counters: dict) -> dict[str, list[tuple[str, str, int]]]:
    """Every (bmc, request path) the BMCs PROCESSED more than once, by kind: update requests (one path for every
    component: see ``/_sim/stats``' ``duplicate_updates`` for bundles), resets (per manager, system, chassis),
    activations."""
    found: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for bmc, seen in counters["bmcs"].items():
        for key, n in seen["processed"].items():
            if n <= 1:
                continue
            if key == UPDATE:
                found["update"].append((bmc, key, n))
            elif key.endswith(RESET_SUFFIXES):
                found["reset"].append((bmc, key, n))
            elif key == ACTIVATE:
                found["activate"].append((bmc, key, n))
    return dict(found)


def assert_at_most_once(sim, rollouts: list[Rollout], servers=None) -> dict:
    """0 duplicate update requests, 0 duplicate resets per manager/system/chassis (from the simulator's counters),
    0 lost targets counted against the PLAN's server list (``servers``: every server the test planned for has
    exactly one target across the rollouts, and it is in a final state unless its rollout is paused), every failed
    target visible with its class and reason, and each rollout in a state the rules allow."""
    counters = sim.control.counters()
    dup = duplicates(counters)
    assert not dup.get("activate"), f"duplicate activations: {dup['activate']}"
    # an update is one (BMC, component, version): a bundle sends one SimpleUpdate per item to the same path
    updates = sim.control.stats()["duplicate_updates"]
    assert not updates, f"duplicate update requests: {updates}"
    assert not dup.get("reset"), f"duplicate resets: {dup['reset']}"
    if servers is not None:
        planned = sorted(s.pk for s in servers)
        found = Counter(RolloutTarget.objects.filter(rollout__in=rollouts).values_list("server_id", flat=True))
        lost = [pk for pk in planned if found[pk] != 1]
        assert not lost, f"servers of the plan without exactly one target: {lost[:10]}"
        assert sum(found.values()) == len(planned), "targets for servers outside the plan"
    for rollout in rollouts:
        states = Counter(RolloutTarget.objects.filter(rollout=rollout).values_list("state", flat=True))
        failed = RolloutTarget.objects.filter(rollout=rollout, state=TargetState.FAILED)
        why = (rollout.state, rollout.pause_reason, states, list(failed.values_list("error_class", "last_error")))
        assert not failed.filter(last_error="").exists() and not failed.filter(error_class="").exists(), why
        if rollout.state != RolloutState.PAUSED:
            assert set(states) <= {TargetState.SUCCEEDED, TargetState.FAILED, TargetState.SKIPPED}, why
        if rollout.state == RolloutState.COMPLETED:
            assert not failed.exists(), why
        elif rollout.state == RolloutState.COMPLETED_WITH_EXCEPTIONS:
            assert failed.exclude(error_class="firmware").exists(), why
        else:
            assert rollout.state == RolloutState.PAUSED and rollout.pause_reason, why
    return counters


def assert_one_update_each(counters: dict, servers, rollouts: list[Rollout]) -> None:
    """Every planned server's BMC processed exactly one update request (a BMC that received none is counted as
    0, not left out); on failure, what each such BMC received and processed and what the engine recorded of its
    target's steps."""
    bmcs = {s.bmc_address.rstrip("/").rsplit("/", 1)[-1]: s for s in servers}
    wrong = {bmc: counters["bmcs"].get(bmc, {"received": {}, "processed": {}}) for bmc in bmcs
             if counters["bmcs"].get(bmc, {}).get("processed", {}).get(UPDATE, 0) != 1}
    details = []
    for bmc, seen in sorted(wrong.items())[:5]:
        steps = list(TargetStep.objects.filter(target__rollout__in=rollouts, target__server=bmcs[bmc])
                     .order_by("id").values_list("kind", "outcome", "response_status", "bmc_task_uri", "messages"))
        details.append(f"{bmc}: received {seen['received']}, processed {seen['processed']}; steps {steps}")
    assert not wrong, f"{len(wrong)} of {len(bmcs)} BMCs did not process exactly one update:\n" + "\n".join(details)


def holds(sim) -> dict:
    """Requests the simulator parks (``hold`` rules): {"waiting": [...], "held": n}."""
    return sim.control.request("GET", "holds")


def wait_for(condition, timeout: float, what: str, every=None):
    """Wait on a condition (``every()`` runs each round, e.g. a tick); the condition's value, or AssertionError."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if every is not None:
            every()
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what() if callable(what) else what}")


def workers_waiting_on_locks(advisory_only: bool = False) -> list[str]:
    """application_name of worker sessions waiting on a lock right now (``advisory_only``: an advisory lock, such
    as a site's activation lock; a row lock two steps meet for a moment is not one)."""
    kind = " AND wait_event = 'advisory'" if advisory_only else ""
    with connection.cursor() as cursor:
        cursor.execute("SELECT application_name FROM pg_stat_activity WHERE application_name LIKE 'chaos-%%' "
                       f"AND wait_event_type = 'Lock'{kind}")
        return [row[0] for row in cursor.fetchall()]


def max_unavailable(rollouts: list[Rollout], domain: str) -> int:
    """The most servers of one ``domain`` value unavailable at once, over the rollouts' recorded history: a
    server is unavailable from its Activate request until it verified (or for ever if it did not)."""
    events = []
    for target in RolloutTarget.objects.filter(rollout__in=rollouts):
        start = TargetStep.objects.filter(target=target, kind="activate").values_list("requested_at", flat=True)
        if not start:
            continue
        end = target.finished_at if target.state == TargetState.SUCCEEDED else None
        value = (target.domains or {}).get(domain) if domain != "site" else target.site_id
        events.append((start[0], 1, value))
        if end is not None:
            events.append((end, -1, value))
    events.sort(key=lambda e: (e[0], e[1]))
    now: Counter = Counter()
    worst = 0
    for _, delta, value in events:
        now[value] += delta
        worst = max(worst, now[value])
    return worst


def lock_waits() -> list[tuple[str, str]]:
    """(application_name, query) of every session waiting on a lock (diagnostics)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT application_name, left(query, 200) FROM pg_stat_activity WHERE wait_event_type = "
                       "'Lock' AND pid <> pg_backend_pid()")
        return cursor.fetchall()
