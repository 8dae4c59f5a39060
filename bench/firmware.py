#!/usr/bin/env python
"""Firmware benchmark: compliance, planning and the rollout engine over a 100,000-GPU demo fleet on PostgreSQL.

    .venv/bin/python bench/firmware.py            # DATABASE_URL's server; database fleet_bench_fw (re-created)

Runs against a DEDICATED database that it drops and re-creates (``fleet_bench_fw`` on DATABASE_URL's server,
unless DATABASE_URL names a database containing "bench_fw"), and a private ``redis-server`` on a free port (never
the shared Redis). Measured in one run, printed with the targets:

- ``compliance_recompute()`` over the seeded fleet (``seed_demo`` + ``firmware_demo_seed``): median of 3;
- planning every server of the fleet (each platform's "next" bundle, ``plan_preview``: the dry run), the sum over
  platforms, median of 3; and persisting the largest platform's plan (``rollout_create``: waves + COPY of targets);
- engine throughput: ``--engine-targets`` servers of a bench platform whose BMCs are virtual BMCs of the simulator
  (``python -m world.bmc``, zero task time, zero reset time), a one-release bundle (BMC firmware: update,
  activate, BMC reset, verify), 2 Celery worker processes (``--pool solo``), this process ticking like beat.
  Target-steps = compare-and-set advances of targets (the sum of their ``version`` columns) per second of wall time
  from start to the last target finished.

- ``chaos_duplicates``: a short chaos run (``--chaos-targets`` BMCs, 5 % of mutating requests processed only after
  the client timed out, 3 kill -9s of a worker): update requests or resets the simulator processed twice (its
  ``/_sim/counters``); must be 0.

- ``targets_per_s_0ms`` / ``targets_per_s_200ms`` / ``targets_per_s_timeouts``: servers completed per second of
  a COMPLETED rollout of ``--rate-targets`` (200) HGX servers (the simulator's standard-only ``hgx-h100`` profile;
  host BMC firmware: update, Activate, BMC reset, verify) on 2 worker processes, with the simulator answering
  every request at once, every request 200 ms late, and 5 % of GETs never answered (the client's 2 s timeout),
  otherwise at once. Targets: >= 2 servers/s at 200 ms; the timeouts run >= half the 0 ms rate.

The last line of output is one JSON object: ``compliance_s``, ``plan_s``, ``engine_steps_per_s``,
``chaos_duplicates``, ``targets_per_s_0ms``, ``targets_per_s_200ms``, ``targets_per_s_timeouts``, and the CPU
each timed run cost per operation (``cpu_ms_per_step``, ``cpu_ms_per_server_<case>``: the workers, the simulator,
this process's tick and every PostgreSQL process, summed; a ``CPU ...`` line per run gives the parts).
``--only-rate`` runs the three rollout-rate cases alone (no 100k seed).
The machine's 2 cores are shared with PostgreSQL, Redis, the simulator and the workers: figures are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from benchlib import CpuMeter, bench_database_url, loadavg, recreate_database, say, stop_processes

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CPU: dict[str, float] = {}  # CPU milliseconds per operation of each timed run (workers, simulator, this process,
# PostgreSQL), printed with the figures
TARGETS = {"compliance_s": 2.0, "plan_s": 3.0, "engine_steps_per_s": 500.0, "targets_per_s_200ms": 2.0}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(fn, repeats: int = 3) -> tuple[float, list[float], object]:  # type: ignore[no-untyped-def]
    runs, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs), runs, result


def verdict(value: float, target: float, higher_is_better: bool = False) -> str:
    ok = value >= target if higher_is_better else value <= target
    return "ok" if ok else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=100_000)
    parser.add_argument("--engine-targets", type=int, default=2000, help="servers the engine updates (default 2000)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads per worker process (--pool threads; default 1: --pool solo)")
    parser.add_argument("--chaos-targets", type=int, default=40, help="BMCs of the short chaos run (default 40)")
    parser.add_argument("--reuse", action="store_true", help="keep the bench database if it is seeded")
    parser.add_argument("--rate-targets", type=int, default=200, help="HGX servers of the rate runs (default 200)")
    parser.add_argument("--only-rate", action="store_true", help="only the targets_per_s runs (no 100k seed)")
    parser.add_argument("--rate-cases", default="0ms,200ms,timeouts", help="which rate runs (default all three)")
    parser.add_argument("--profile", action="store_true", help="cProfile one worker's steps (to var/)")
    args = parser.parse_args()

    url = bench_database_url(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/fleet_bench_fw"),
                             "fleet_bench_fw")
    redis_port = free_port()
    broker = f"redis://127.0.0.1:{redis_port}/0"
    os.environ.update({"DATABASE_URL": url, "REDIS_URL": broker, "DJANGO_SETTINGS_MODULE": "fleet.settings",
                       "LOG_LEVEL": os.environ.get("LOG_LEVEL", "WARNING"),
                       "FLEET_ROLLOUT_DEFAULT_CONCURRENCY": str(args.engine_targets),
                       "FLEET_ROLLOUT_TICK_LIMIT": str(max(5000, args.engine_targets))})
    say(f"Fleet firmware benchmark: {args.gpus:,} GPUs on {urlsplit(url).path.lstrip('/')} "
        f"({os.cpu_count()} cores shared with PostgreSQL, Redis, the simulator and the workers; {loadavg()})")
    reuse = False
    if args.reuse:
        import psycopg

        try:
            with psycopg.connect(url) as conn:
                reuse = conn.execute("SELECT count(*) FROM firmware_bundle").fetchone()[0] > 0
        except psycopg.Error:
            reuse = False
    if not reuse:
        recreate_database(url)
    redis_proc = subprocess.Popen(  # noqa: S603 - a private redis-server on loopback
        ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],  # noqa: S607
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        figures = {**run(args, url, broker, reuse), **CPU}
    finally:
        redis_proc.kill()
        redis_proc.wait(timeout=10)
    say(json.dumps(figures))


def run(args: argparse.Namespace, url: str, broker: str, reuse: bool) -> dict[str, float]:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from fleet.audit import SystemActor
    from fleet.roles import APPROVER, OPERATOR, user_set_role

    actor = SystemActor("bench")
    users = get_user_model().objects
    if args.only_rate:
        if not reuse:
            call_command("migrate", verbosity=0)
        operator = users.filter(username="bench-operator").first() or users.create_user("bench-operator")
        approver = users.filter(username="bench-approver").first() or users.create_user("bench-approver")
        user_set_role(operator, OPERATOR)
        user_set_role(approver, APPROVER)
        return rates(args, url, broker, operator, approver)
    if not reuse:
        call_command("migrate", verbosity=0)
        users.create_superuser("bench-admin", password=None)
        started = time.perf_counter()
        call_command("seed_demo", gpus=args.gpus, seed=1, verbosity=0)
        from firmware.demo import firmware_demo_seed

        firmware_demo_seed(actor=actor)
        say(f"seed (inventory + firmware catalog, observations): {time.perf_counter() - started:.1f} s")
        with connection.cursor() as cur:
            cur.execute("VACUUM ANALYZE")
    operator = users.filter(username="bench-operator").first() or users.create_user("bench-operator")
    approver = users.filter(username="bench-approver").first() or users.create_user("bench-approver")
    user_set_role(operator, OPERATOR)
    user_set_role(approver, APPROVER)

    # --- compliance ------------------------------------------------------------------------------------------
    from firmware.services.compliance import compliance_recompute
    from inventory.models import Gpu, Server

    gpus = Gpu.objects.count()
    compliance_s, runs, result = timed(compliance_recompute)
    say(f"compliance_recompute over {gpus:,} GPUs: median {compliance_s:.2f} s of "
        f"{', '.join(f'{r:.2f}' for r in runs)} (target <= {TARGETS['compliance_s']} s) "
        f"{verdict(compliance_s, TARGETS['compliance_s'])}; {result}")

    # --- plan --------------------------------------------------------------------------------------------------
    from firmware.models import Bundle
    from firmware.services import rollout as svc
    from firmware.services.plan import plan_preview

    bundles = list(Bundle.objects.filter(name__endswith=" next").select_related("platform").order_by("name"))

    def plan_all() -> list:
        return [plan_preview(bundle=b, selector={}, strategy={"domain_caps": {"rack": 2, "power_feed": 8}})
                for b in bundles]

    plan_s, runs, plans = timed(plan_all)
    servers = sum(len(p.servers) for p in plans)
    say(f"plan every server ({servers:,} servers, {gpus:,} GPUs; {len(bundles)} platforms, each its 'next' bundle; "
        f"canary + 1/5/25/100 % waves, <= 2 per rack and 8 per power feed per wave): median {plan_s:.2f} s of "
        f"{', '.join(f'{r:.2f}' for r in runs)} (target <= {TARGETS['plan_s']} s) {verdict(plan_s, TARGETS['plan_s'])}")
    for bundle, plan in zip(bundles, plans, strict=True):
        say(f"  {bundle.platform}: {plan.target_count:,} targets, {len(plan.skipped):,} compliant, "
            f"{len(plan.paths)} upgrade paths, {len(plan.waves)} waves "
            f"({', '.join(str(len(w.server_ids)) for w in plan.waves)})")
    largest = max(bundles, key=lambda b: Server.objects.filter(platform=b.platform).count())
    started = time.perf_counter()
    persisted = svc.rollout_create(name="bench plan", bundle=largest, selector={}, actor=operator,
                                   strategy={"domain_caps": {"rack": 2, "power_feed": 8}})
    say(f"persist the plan of {largest.platform} (rollout_create: plan + waves + COPY of "
        f"{persisted.targets.count():,} targets): {time.perf_counter() - started:.2f} s")
    svc.rollout_abort(rollout=persisted, actor=operator, reason="bench")

    # --- engine -------------------------------------------------------------------------------------------------
    engine_steps = engine_throughput(args, url, broker, operator, approver)
    duplicates = chaos_duplicates(args, url, broker, operator, approver)
    return {"compliance_s": round(compliance_s, 3), "plan_s": round(plan_s, 3),
            "engine_steps_per_s": round(engine_steps, 1), "chaos_duplicates": duplicates,
            **rates(args, url, broker, operator, approver)}


def rates(args: argparse.Namespace, url: str, broker: str, operator, approver) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The three rollout-rate cases (see the module docstring) and their verdicts."""
    cases = args.rate_cases.split(",")
    fast = rollout_rate(args, url, broker, operator, approver, "0ms", []) if "0ms" in cases else 0.0
    slow = rollout_rate(args, url, broker, operator, approver, "200ms", [
        {"kind": "slow", "seconds": 0.2}]) if "200ms" in cases else 0.0
    flaky = rollout_rate(args, url, broker, operator, approver, "timeouts", [
        {"kind": "timeout", "method": "GET", "rate": 0.05, "seconds": 6}]) if "timeouts" in cases else 0.0
    say(f"targets_per_s: 0 ms {fast:.2f}, 200 ms {slow:.2f} (target >= {TARGETS['targets_per_s_200ms']}) "
        f"{verdict(slow, TARGETS['targets_per_s_200ms'], higher_is_better=True)}, 5 % GET timeouts {flaky:.2f} "
        f"(target >= half of 0 ms: {fast / 2:.2f}) {verdict(flaky, fast / 2, higher_is_better=True)}")
    return {"targets_per_s_0ms": round(fast, 2), "targets_per_s_200ms": round(slow, 2),
            "targets_per_s_timeouts": round(flaky, 2)}


def wait_for_workers(broker: str, count: int, timeout: float = 180) -> None:
    """Until ``count`` workers answer a ping on ``broker`` (on a loaded machine they take long to import)."""
    from celery import Celery

    app = Celery("bench-ping", broker=broker, set_as_current=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(app.control.ping(timeout=1.0) or []) >= count:
            return
    raise RuntimeError(f"{count} workers did not answer within {timeout}s")


def rollout_rate(args: argparse.Namespace, url: str, broker: str, operator, approver, label: str,  # type: ignore[no-untyped-def]
                 faults: list[dict]) -> float:
    """Servers completed per second of one COMPLETED rollout of ``--rate-targets`` HGX servers on
    ``--workers`` worker processes, the simulator answering with ``faults``."""
    from firmware.models import Release, RolloutState, RolloutTarget
    from firmware.services import catalog, engine
    from firmware.services import rollout as svc
    from fleet import bulk
    from fleet.audit import SystemActor
    from inventory.models import Server, ServerPlatform
    from world.bmc.testing import SimulatorProcess

    n = args.rate_targets
    actor = SystemActor("bench")
    catalog.component_specs_ensure(actor=actor)
    stamp = f"{label}-{time.time():.0f}"
    platform = ServerPlatform.objects.create(name=f"Bench HGX {stamp}", vendor="Supermicro")
    sim = SimulatorProcess(bmcs=n, profile="hgx-h100", task_seconds=0,
                           extra_args=("--prefix", f"rate{label}-", "--bmc-reset-seconds", "0.5")).start()
    sim.control.configure(faults=faults)
    workers: list[subprocess.Popen] = []
    try:
        width = max(4, len(str(n)))
        bulk.insert(Server, [Server(hostname=f"rate-{stamp}-{i:05d}", platform=platform,
                                    bmc_address=sim.bmc_url(f"rate{label}-{i:0{width}d}")) for i in range(1, n + 1)])
        release = (Release.objects.filter(component="bmc", version="01.05.00-bench").first()
                   or catalog.release_create(component="bmc", version="01.05.00-bench", sha256="0" * 64, actor=actor,
                                             image_url="https://firmware.example.internal/bmc/01.05.00-bench.fwpkg"))
        bundle = catalog.bundle_create(name=f"rate BMC {stamp}", platform=platform, releases=[release], actor=actor)
        rollout = svc.rollout_create(name=f"bench rate {label}", bundle=bundle, selector={}, actor=operator,
                                     strategy={"canary": False, "waves": [100],
                                               "retry": {"max_attempts": 10, "backoff_seconds": [1]}})
        rollout = svc.rollout_approve(rollout=svc.rollout_submit(rollout=rollout, actor=operator), actor=approver)
        env = {**os.environ, "DATABASE_URL": url, "REDIS_URL": broker, "FLEET_BMC_TIMEOUT": "2",
               "FLEET_BMC_TASK_RETENTION_SECONDS": "600", "FLEET_BMC_BOOT_GRACE_SECONDS": "30"}
        for w in range(args.workers):
            command = [sys.executable, "-m", "celery", "-A", "fleet", "worker", "--pool", "solo", "--loglevel",
                       "WARNING", "-n", f"rate{w}@%h", "--without-heartbeat", "--without-gossip", "--without-mingle"]
            workers.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,  # noqa: S603
                                            stderr=subprocess.DEVNULL))
        wait_for_workers(broker, len(workers))  # the clock starts when they consume, not while they import
        meter = CpuMeter(workers=workers, simulator=[sim.proc]).start()
        started = time.perf_counter()
        rollout = svc.rollout_start(rollout=rollout, actor=operator)
        while time.perf_counter() - started < 900:
            engine.rollout_tick()
            rollout.refresh_from_db()
            if rollout.state not in (RolloutState.RUNNING,):
                break
            time.sleep(0.3)
        elapsed = time.perf_counter() - started
        meter.stop()
        done = RolloutTarget.objects.filter(rollout=rollout, state="succeeded").count()
        counters = sim.control.counters()
    finally:
        stop_processes(workers)
        sim.kill()
    dup = sum(1 for c in counters["bmcs"].values() for k, v in c["processed"].items() if v > 1 and "Update" in k)
    rate = done / elapsed if rollout.state == RolloutState.COMPLETED and elapsed else 0.0
    say(f"rollout rate ({label}): {n} HGX servers, {done} succeeded in {elapsed:.1f} s, rollout {rollout.state}: "
        f"{rate:.2f} servers/s; faults {counters['faults']}; {dup} duplicate update requests; "
        f"{meter.per(done, 'server')} (the tick in this process)")
    CPU[f"cpu_ms_per_server_{label}"] = meter.total_ms_per(done)
    return rate


def chaos_duplicates(args: argparse.Namespace, url: str, broker: str, operator, approver) -> int:  # type: ignore[no-untyped-def]
    """A short chaos run: ``--chaos-targets`` BMCs, 5 % of mutating requests processed only after the client
    timed out, 3 kill -9s of a worker process mid-rollout (a fresh one each time). Returns how many (BMC,
    request) pairs the simulator PROCESSED more than once among update requests and resets: must be 0."""
    import random

    from django.conf import settings

    from firmware.models import Release, RolloutTarget
    from firmware.models.rollout import TARGET_DONE
    from firmware.services import catalog, engine
    from firmware.services import rollout as svc
    from fleet import bulk
    from fleet.audit import SystemActor
    from inventory.models import Server, ServerPlatform
    from world.bmc.testing import SimulatorProcess

    n = args.chaos_targets
    settings.FLEET_ROLLOUT_LEASE_SECONDS = 3
    stamp = f"{time.time():.0f}"
    actor = SystemActor("bench")
    platform = ServerPlatform.objects.create(name=f"Bench chaos BMC {stamp}", vendor="Contoso")
    sim = SimulatorProcess(bmcs=n, profile="generic", task_seconds=0.3,
                           extra_args=("--prefix", "chaos-", "--bmc-reset-seconds", "0.3")).start()
    sim.control.configure(faults=[{"kind": "late", "method": "POST", "rate": 0.05, "seconds": 2.0}])
    env = {**os.environ, "DATABASE_URL": url, "REDIS_URL": broker, "FLEET_BMC_TIMEOUT": "1",
           "FLEET_BMC_SETTLE_SECONDS": "4", "FLEET_ROLLOUT_LEASE_SECONDS": "3", "FLEET_ROLLOUT_CHUNK": "4"}
    command = [sys.executable, "-m", "celery", "-A", "fleet", "worker", "--pool", "solo", "--loglevel", "ERROR",
               "--without-heartbeat", "--without-gossip", "--without-mingle"]
    workers: list[subprocess.Popen] = []

    def start_worker() -> None:
        workers.append(subprocess.Popen([*command, "-n", f"chaos{len(workers)}@%h"], cwd=ROOT, env=env,  # noqa: S603
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    kills, done = 0, 0
    try:
        width = max(4, len(str(n)))
        bulk.insert(Server, [Server(hostname=f"chaos-{stamp}-{i:05d}", platform=platform,
                                    bmc_address=sim.bmc_url(f"chaos-{i:0{width}d}")) for i in range(1, n + 1)])
        release = Release.objects.get(component="bmc", version="1.46.0-bench")
        bundle = catalog.bundle_create(name=f"chaos BMC {stamp}", platform=platform, releases=[release], actor=actor)
        rollout = svc.rollout_create(name="bench chaos", bundle=bundle, selector={}, actor=operator,
                                     strategy={"canary": False, "waves": [100],
                                               "retry": {"max_attempts": 10, "backoff_seconds": [1]}})
        rollout = svc.rollout_approve(rollout=svc.rollout_submit(rollout=rollout, actor=operator), actor=approver)
        for _ in range(2):
            start_worker()
        time.sleep(4)
        rollout = svc.rollout_start(rollout=rollout, actor=operator)
        rng = random.Random(5)
        started = time.perf_counter()
        next_kill = 1.0
        while time.perf_counter() - started < 180:
            engine.rollout_tick()
            done = RolloutTarget.objects.filter(rollout=rollout, state__in=TARGET_DONE).count()
            if done == n:
                break
            if kills < 3 and time.perf_counter() - started >= next_kill:
                alive = [p for p in workers if p.poll() is None]
                rng.choice(alive).kill()
                start_worker()
                kills += 1
                next_kill += rng.uniform(0.8, 2.0)
            time.sleep(0.3)
        counters = sim.control.counters()
    finally:
        stop_processes(workers)
        sim.kill()
    resets = ("Chassis.Reset", "ComputerSystem.Reset", "Manager.Reset")
    duplicated = [(bmc, key, k) for bmc, c in counters["bmcs"].items() for key, k in c["processed"].items()
                  if k > 1 and (key.endswith("UpdateService.SimpleUpdate") or key.endswith(resets))]
    say(f"chaos: {n} targets ({done} finished), {kills} kill -9s, {counters['faults'].get('late', 0)} late "
        f"requests: {len(duplicated)} duplicate update requests or resets (must be 0) "
        f"{'ok' if not duplicated else 'MISSED'}")
    return len(duplicated)


def engine_throughput(args: argparse.Namespace, url: str, broker: str, operator, approver) -> float:  # type: ignore[no-untyped-def]
    from django.db.models import Count, Sum

    from firmware.models import RolloutState, RolloutTarget
    from firmware.models.rollout import TARGET_DONE
    from firmware.services import catalog, engine
    from firmware.services import rollout as svc
    from fleet import bulk
    from fleet.audit import SystemActor
    from inventory.models import Server, ServerPlatform
    from world.bmc.testing import SimulatorProcess

    n = args.engine_targets
    actor = SystemActor("bench")
    stamp = f"{time.time():.0f}"  # a run of its own, also on a reused database
    platform = ServerPlatform.objects.create(name=f"Bench generic BMC {stamp}", vendor="Contoso")
    sim = SimulatorProcess(bmcs=n, profile="generic", task_seconds=0,
                           extra_args=("--prefix", "bench-", "--bmc-reset-seconds", "0")).start()
    workers: list[subprocess.Popen] = []
    try:
        width = max(4, len(str(n)))  # the simulator's ids: <prefix>0001 ...
        bulk.insert(Server, [Server(hostname=f"bench-{stamp}-{i:05d}", platform=platform,
                                    bmc_address=sim.bmc_url(f"bench-{i:0{width}d}")) for i in range(1, n + 1)])
        from firmware.models import Release

        release = (Release.objects.filter(component="bmc", version="1.46.0-bench").first()
                   or catalog.release_create(component="bmc", version="1.46.0-bench", sha256="0" * 64, actor=actor,
                                             image_url="https://firmware.example.internal/bmc/1.46.0-bench.fwpkg"))
        bundle = catalog.bundle_create(name=f"bench BMC {stamp}", platform=platform, releases=[release],
                                       actor=actor)
        rollout = svc.rollout_create(name="bench engine", bundle=bundle, selector={}, actor=operator,
                                     strategy={"canary": False, "waves": [100],
                                               "retry": {"max_attempts": 5, "backoff_seconds": [1]}})
        rollout = svc.rollout_approve(rollout=svc.rollout_submit(rollout=rollout, actor=operator), actor=approver)
        env = {**os.environ, "DATABASE_URL": url, "REDIS_URL": broker}
        for w in range(args.workers):
            pool = ["--pool", "threads", "--concurrency", str(args.threads)] if args.threads > 1 else ["--pool", "solo"]
            command = [sys.executable, "-m", "celery", "-A", "fleet", "worker", *pool, "--loglevel",
                       "WARNING", "-n", f"bench{w}@%h", "--without-heartbeat", "--without-gossip",
                       "--without-mingle"]
            workers.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,  # noqa: S603
                                            stderr=subprocess.DEVNULL))
        time.sleep(4)  # the workers import Django
        meter = CpuMeter(workers=workers, simulator=[sim.proc]).start()
        started = time.perf_counter()
        rollout = svc.rollout_start(rollout=rollout, actor=operator)
        done = 0
        while time.perf_counter() - started < 600:
            engine.rollout_tick()
            done = RolloutTarget.objects.filter(rollout=rollout, state__in=TARGET_DONE).count()
            if done == n:
                break
            time.sleep(0.5)
        elapsed = time.perf_counter() - started
        meter.stop()
        steps = RolloutTarget.objects.filter(rollout=rollout).aggregate(s=Sum("version"))["s"] or 0
        engine.rollout_tick()
        rollout.refresh_from_db()
        states = dict(RolloutTarget.objects.filter(rollout=rollout).order_by().values_list("state")
                      .annotate(n=Count("id")))
        stats = sim.control.stats()
    finally:
        stop_processes(workers)
        sim.kill()
    rate = steps / elapsed if elapsed else 0.0
    say(f"engine: {n:,} targets ({done:,} finished: {states}) in {elapsed:.1f} s with {args.workers} worker "
        f"processes: {steps:,} target-steps = {rate:.0f} steps/s (target >= {TARGETS['engine_steps_per_s']:.0f}) "
        f"{verdict(rate, TARGETS['engine_steps_per_s'], higher_is_better=True)}; rollout {rollout.state}; "
        f"simulator: {stats['requests']:,} requests, {stats['update_requests']:,} update requests, "
        f"{len(stats['duplicate_updates'])} duplicates; {meter.per(steps, 'target-step')}")
    CPU["cpu_ms_per_step"] = meter.total_ms_per(steps)
    assert rollout.state in (RolloutState.COMPLETED, RolloutState.RUNNING, RolloutState.PAUSED)
    return rate


if __name__ == "__main__":
    main()
