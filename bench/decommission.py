#!/usr/bin/env python
"""Decommission benchmark: certify N servers' media end to end against the BMC simulator, then verify 10,000
certificates.

    .venv/bin/python bench/decommission.py            # DATABASE_URL's server; database fleet_bench_decom (re-created)

Runs against a DEDICATED database that it drops and re-creates (``fleet_bench_decom``), a private
``redis-server`` on a free port, the BMC simulator (``python -m world.bmc --plugin world.bmc.decommission``,
zero task time and zero erase time: the bench measures Fleet, not drives) and 2 Celery worker processes
(``--pool solo``); this process ticks like beat and plays every server's host agent (token, script, upload of
real-format nvme-cli / tpm2 / nvidia-smi outputs, through the same service the HTTP endpoint calls).

- ``certify_s``: wall time from "inventory" (workers read every server's media over Redfish) through sanitizing
  (every Redfish step per server, the agent's uploads, power-off, BMC reset), validation (the chain recomputed)
  and certification (one signed certificate per medium plus one per server, GPUs to ``sanitized``). Setup
  (servers, GPUs, request, approval, drain) is reported apart.
- ``verify_per_s``: offline verification (``decommission.verify.verify_document``: signature, completeness,
  carried events) of 10,000 certificate files, per second, in this process. Only certificates that verify
  count; if any fails verification the run stops with an error (a broken certificate is not a fast one).

The clock starts when both workers answer a ping (their start-up is not under test). The ``cpu:`` line gives
the CPU seconds the workers and this process (the agents, validation, certification) spent from then to the
last certificate, per server: on a shared machine the figure to compare, since wall time depends on the load.
``--profile DIR`` runs the workers under py-spy (collapsed stacks, ``DIR/worker-N.txt``) and this process under
pyinstrument (``DIR/bench.txt``).

The last line of output is one JSON object: ``certify_s``, ``verify_per_s``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from benchlib import (
    bench_database_url,
    children,
    loadavg,
    processes_cpu,
    recreate_database,
    say,
    stop_processes,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TARGETS = {"certify_s": 60.0, "verify_per_s": 2000.0}

if TYPE_CHECKING:
    from world.bmc.testing import SimulatorProcess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seed(n: int, sim: SimulatorProcess) -> list:  # type: ignore[type-arg]
    """N HGX servers with 8 GPUs each, on the simulator's BMCs, each at its own port (``sim.bmc_url``; bulk
    inserts: setup, not under test)."""
    from inventory.models import Gpu, GpuModel, GpuState, Server, ServerPlatform

    model = GpuModel.objects.create(sku="H100-SXM5-80GB", name="NVIDIA H100 80GB HBM3", memory_gib=80)
    platform = ServerPlatform.objects.create(name="HGX H100 8-GPU", vendor="Supermicro", gpu_model=model)
    servers = Server.objects.bulk_create(
        Server(hostname=f"bench-{i:05d}", serial=f"SRV{i:07d}", platform=platform,
               bmc_address=sim.bmc_url(f"bmc-{i:04d}")) for i in range(1, n + 1))
    Gpu.objects.bulk_create(
        Gpu(serial=f"165{s.pk:07d}{slot}", uuid=f"GPU-{s.pk:08d}-{slot:04d}", model=model, server=s, module_id=slot,
            pci_bus_id=f"0000:{slot:02x}:00.0", state=GpuState.IN_SERVICE)
        for s in servers for slot in range(8))
    return servers


def workers_ready(n: int, timeout: float = 180) -> None:
    """Wait until ``n`` workers answer a ping: their start-up (Django set-up, checks) is not under test."""
    from fleet.celery import app

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(app.control.ping(timeout=1.0)) >= n:
            return
    sys.exit("timed out: the workers did not start")


def wait(check, timeout: float, what: str, tick: bool = True) -> None:  # type: ignore[no-untyped-def]
    from fleet import dispatch

    deadline, last = time.monotonic() + timeout, 0.0
    while time.monotonic() < deadline:
        if check():
            return
        if tick and time.monotonic() - last > 2:
            dispatch.send("decommission.tasks.tick_task")
            last = time.monotonic()
        time.sleep(0.2)
    sys.exit(f"timed out: {what}")


def run(args: argparse.Namespace, url: str, broker: str) -> dict[str, float]:  # noqa: PLR0915
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from decommission import services
    from decommission.models import Asset, Certificate, DecommissionRequest, Medium
    from decommission.selectors import public_keys
    from decommission.services.agent import agent_results_submit, agent_script, agent_token_issue
    from decommission.verify import verify_document
    from fleet.roles import user_set_role
    from tests.decommission.tool_outputs import agent_results
    from world.bmc.testing import SimulatorProcess

    sim = SimulatorProcess(bmcs=args.servers, plugins=("world.bmc.decommission",)).start()
    workers: list[subprocess.Popen] = []
    try:
        t = time.perf_counter()
        servers = seed(args.servers, sim)
        User = get_user_model()
        operator, approver = User.objects.create_user("operator"), User.objects.create_user("approver")
        user_set_role(operator, "operator")
        user_set_role(approver, "approver")
        request = services.request_create(servers=servers, reason="bench", category="moderate",
                                          destination="resale", actor=operator)
        services.request_approve(request=request, actor=approver)
        services.request_drain(request=request, actor=operator)
        setup_s = time.perf_counter() - t
        say(f"setup: {args.servers:,} servers, {args.servers * 8:,} GPUs, request approved and drained in "
            f"{setup_s:.1f} s")
        env = {**os.environ, "LOG_LEVEL": "WARNING"}
        command = [sys.executable, "-m", "celery", "-A", "fleet", "worker", "--pool", "solo", "--loglevel",
                   "WARNING", "--without-heartbeat", "--without-gossip", "--without-mingle"]
        for n in range(args.workers):
            wrap = [str(Path(sys.executable).parent / "py-spy"), "record", "--rate", "50", "--format", "raw", "--output",  # an optional profile
                    str(Path(args.profile) / f"worker-{n}.txt"), "--"] if args.profile else []
            workers.append(subprocess.Popen(  # noqa: S603 - our own interpreter
                wrap + command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        workers_ready(len(workers))
        cpu0, own0, sim0 = processes_cpu(workers), time.process_time(), processes_cpu([sim.proc])
        profiler = None
        if args.profile:
            from pyinstrument import Profiler

            profiler = Profiler(async_mode="disabled")
            profiler.start()

        t0 = time.perf_counter()
        services.request_inventory_start(request=request, actor=operator)
        wait(lambda: DecommissionRequest.objects.get(pk=request.pk).state == "inventoried", 600, "inventory")
        t_inv = time.perf_counter() - t0
        services.request_start_sanitizing(request=request, actor=operator)
        def host_agent(asset: Asset) -> None:  # what each server's host agent does, hosts in parallel
            from django.db import connection

            try:
                _token, raw = agent_token_issue(asset=asset, actor=None)
                agent_script(raw_token=raw, server=asset.label, upload_url="http://fleet/")
                agent_results_submit(raw_token=raw, server=asset.label, results=agent_results([]))
            finally:
                connection.close()

        with ThreadPoolExecutor(args.agents) as pool:
            list(pool.map(host_agent, Asset.objects.filter(request=request).select_related("server").order_by("id")))
        t_agents = time.perf_counter() - t0
        wait(lambda: DecommissionRequest.objects.get(pk=request.pk).state in ("verifying", "sanitize_failed",
                                                                               "escalated_destroy"),
             900, "sanitizing")
        t_san = time.perf_counter() - t0
        services.request_validate(request=request, actor=approver)
        t_val = time.perf_counter() - t0
        services.request_certify(request=request, actor=operator)
        certify_s = time.perf_counter() - t0
        media = Medium.objects.filter(request=request).count()
        certs = Certificate.objects.filter(request=request).count()
        say(f"certify: {args.servers:,} servers, {media:,} media, {certs:,} certificates in {certify_s:.1f} s "
            f"(inventory {t_inv:.1f} s, agents uploaded by {t_agents:.1f} s, sanitized {t_san:.1f} s, "
            f"validated {t_val:.1f} s, certified {certify_s:.1f} s; {loadavg()})")
        worker_cpu, own_cpu = processes_cpu(workers) - cpu0, time.process_time() - own0
        sim_cpu = processes_cpu([sim.proc]) - sim0
        if profiler is not None:
            profiler.stop()
            (Path(args.profile) / "bench.txt").write_text(profiler.output_text(show_all=False))
        say(f"cpu: workers {worker_cpu:.1f} s ({worker_cpu / args.servers * 1000:.0f} ms per server), this process "
            f"(agents, validation, certification) {own_cpu:.1f} s ({own_cpu / args.servers * 1000:.0f} ms per server), "
            f"the simulator {sim_cpu:.1f} s")

        keys = public_keys()
        docs = [json.loads(json.dumps(d)) for d in Certificate.objects.filter(kind="medium").values_list(
            "document", flat=True)[:args.verify]]
        while len(docs) < args.verify:
            docs += docs[:args.verify - len(docs)]
        t = time.perf_counter()
        problems = [p for p in (verify_document(d, keys) for d in docs) if p]
        verify_s = time.perf_counter() - t
        valid = len(docs) - len(problems)
        verify_per_s = valid / verify_s  # only certificates that verified count
        say(f"verify: {len(docs):,} certificates in {verify_s:.2f} s, {valid:,} valid = {verify_per_s:,.0f}/s")
        if problems:  # a failed verification is a broken certificate, not a slower one: the run fails
            raise SystemExit(f"verify: {len(problems)} of {len(docs)} certificates FAILED verification, e.g. "
                             f"{problems[0]}")
        return {"certify_s": round(certify_s, 1), "verify_per_s": round(verify_per_s)}
    finally:
        if args.profile:  # py-spy writes when its child exits
            for proc in workers:
                for child in children(proc.pid):
                    os.kill(child, signal.SIGTERM)
            for proc in workers:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=30)
        stop_processes(workers)
        sim.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--verify", type=int, default=10_000)
    parser.add_argument("--agents", type=int, default=4, help="host agents uploading at once (default 4)")
    parser.add_argument("--profile", default="", help="a folder: run the workers under py-spy (collapsed stacks)")
    args = parser.parse_args()
    url = bench_database_url(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/fleet_bench_decom"),
                             "fleet_bench_decom")
    redis_port = free_port()
    broker = f"redis://127.0.0.1:{redis_port}/0"
    os.environ.update({"DATABASE_URL": url, "REDIS_URL": broker, "DJANGO_SETTINGS_MODULE": "fleet.settings",
                       "LOG_LEVEL": os.environ.get("LOG_LEVEL", "WARNING"), "DECOMMISSION_SIM_ERASE_SECONDS": "0",
                       "DECOMMISSION_POLL_SECONDS": "0.2", "DECOMMISSION_SETTLE_SECONDS": "10",
                       "DECOMMISSION_SIGNING_KEY_DIR": str(ROOT / "var" / "bench-decommission-keys")})
    say(f"Fleet decommission benchmark: {args.servers:,} servers x 8 GPUs, {args.workers} workers "
        f"({os.cpu_count()} cores shared with PostgreSQL, Redis, the simulator and the workers; {loadavg()})")
    recreate_database(url)
    redis_proc = subprocess.Popen(  # noqa: S603 - a private redis-server on loopback
        ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],  # noqa: S607
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        figures = run(args, url, broker)
    finally:
        redis_proc.kill()
        redis_proc.wait(timeout=10)
    for key, target in TARGETS.items():
        lower = key == "certify_s"  # seconds: lower is better; verify_per_s: higher is better
        ok = figures[key] <= target if lower else figures[key] >= target
        say(f"{key}: {figures[key]} (target {'<=' if lower else '>='} {target:g}) {'ok' if ok else 'MISSED'}")
    say(json.dumps(figures))


if __name__ == "__main__":
    main()
