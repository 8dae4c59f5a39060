#!/usr/bin/env python
"""Acceptance benchmark: ``dcgmi diag -j`` documents ingested per second, the burn-in gate of a 1,000-GPU delivery
and that delivery's progress page, on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/fleet_bench_acc .venv/bin/python bench/acceptance.py
    make bench-acceptance                     # the same
    .venv/bin/python bench/acceptance.py --smoke   # tiny sizes: proves it runs, figures meaningless

Runs against a DEDICATED database that it drops and re-creates (``fleet_bench_acc`` unless DATABASE_URL names a
database containing "bench_acc"). Measured in one run, each case on work no earlier case touched:

- ``diag_docs_per_s``: ``--docs`` distinct DCGM 4.x level-3 documents, one per server (8 GPUs each, in burn-in),
  each ingested by ``acceptance.services.diag_ingest`` as the API, the upload and ``ingest_diag`` do (parse, place
  by serial, verdicts, results, audit; a failing GPU moves to ``burn_in_failed``). The documents are generated in
  the shape of the real 4.5.2 capture in ``tests/fixtures/dcgm-diag/`` (dcgmi's formatting, ``test_summary`` per
  test, ``info`` lines, warnings with ``error_id``/``error_category``/``error_severity``, ``entity_groups`` with
  serials, ``metadata``), with their own serials, measured values and ~2 % failing, ~3 % warning GPUs: no two
  documents alike. ``parse_docs_per_s`` is the parser alone over the same texts, for reference.
- ``gate_delivery_s``: the burn-in gate of a ``--delivery-gpus`` (1,000) GPU delivery: its GPUs read
  (``selectors.delivery_gpus``) and judged together (``gate.evaluate_many``: policy, verdicts in each GPU's window,
  required tests, required checks). The delivery went through burn-in for real: received, ``burn_in_start``, two
  level-3 runs per GPU (distinct documents by serial), an NCCL check for most GPUs, ~2 % failed. Median over
  ``--deliveries`` deliveries, each judged once. ``gate_per_gpu_path_s`` is the same delivery judged one GPU at a
  time (``gate.evaluate``, what the lifecycle's guard does per GPU in a bulk transition), after the group pass.
- ``progress_ms``: ``GET /acceptance/deliveries/<id>/`` through Django's test client, signed in as a viewer (the
  whole request: session, view, selectors, gate, template), on deliveries no earlier case read (cold for their
  rows); median over ``--deliveries``. The process's first request (URL conf import, template compilation) goes
  to a small warm-up delivery and is printed apart (``progress_first_request_ms``), with the page's query count.

Every case prints wall time AND CPU time: this process's (``time.process_time``) plus its PostgreSQL backend's
(``/proc`` of ``pg_backend_pid()``); on 2 shared cores the CPU figures move much less than wall time. Figures are
printed as ``key value`` lines; the last line is one JSON object with the same keys.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import random
import statistics
import sys
import time
from decimal import Decimal
from pathlib import Path

from benchlib import Timing, bench_database_url, loadavg, recreate_database, say

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (category, test) of a DCGM 4.x level-3 run, in dcgmi's order.
LEVEL3 = (("Deployment", "software"), ("Hardware", "memory"), ("Hardware", "diagnostic"), ("Integration", "pcie"),
          ("Stress", "targeted_stress"), ("Stress", "targeted_power"), ("Stress", "memory_bandwidth"))
HGX_BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


def diag_document(rng: random.Random, serials: list[str], *, fail_rate: float = 0.02, warn_rate: float = 0.03) -> str:
    """One distinct DCGM 4.x level-3 ``dcgmi diag -j`` document for these GPUs (entity i = serials[i])."""
    failing = {i for i in range(len(serials)) if rng.random() < fail_rate}
    warning = {i for i in range(len(serials)) if rng.random() < warn_rate} - failing

    def info(test: str, i: int) -> list[str]:
        if test == "memory":
            return [f"Allocated {rng.randrange(74_000_000_000, 75_000_000_000)} bytes (87.5%)"]
        if test == "diagnostic":
            return ["Allocated space for 138 output matricies from 76077622886 bytes available.",
                    "Running with precisions: FP64 1, FP32 1, FP16 1",
                    f"GPU {i} calculated at approximately {rng.uniform(840, 880):.2f} gigaflops during this test"]
        if test == "pcie":
            return [f"GPU to Host bandwidth:\t\t{rng.uniform(50, 56):.2f} GB/s",
                    f"Host to GPU bandwidth:\t\t{rng.uniform(50, 56):.2f} GB/s",
                    f"bidirectional bandwidth:\t{rng.uniform(50, 56):.2f} GB/s",
                    f"GPU to Host latency:\t\t{rng.uniform(1.4, 1.9):.3f} us",
                    f"Host to GPU latency:\t\t{rng.uniform(1.5, 2.0):.3f} us",
                    f"bidirectional latency:\t\t{rng.uniform(2.8, 3.4):.3f} us"]
        if test == "memory_bandwidth":
            return [f"GPU {i} DRAM bandwidth {rng.uniform(2900, 3100):.0f} GB/s"]
        if test in ("targeted_stress", "targeted_power"):
            return [f"GPU {i} averaged {rng.uniform(640, 700):.1f} W"]
        return []

    def result(test: str, i: int) -> dict:  # type: ignore[type-arg]
        out: dict = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": i}  # type: ignore[type-arg]
        lines = info(test, i)
        if lines:
            out["info"] = lines
        if test == "memory" and i in failing:
            out["status"] = "Fail"
            out["warnings"] = [{"error_category": 3, "error_id": 95, "error_severity": 2,
                                "warning": f"A memory mismatch was detected on GPU {i}, but no error was reported "
                                           "by CUDA or NVML."}]
        elif test == "targeted_power" and i in warning:
            out["status"] = "Warn"
            out["warnings"] = [{"error_category": 6, "error_id": 52, "error_severity": 1,
                                "warning": f"Clocks are being throttled for GPU {i} because of clock optimized for "
                                           "power."}]
        else:
            out["status"] = "Pass"
        return out

    categories: dict[str, list] = {}  # type: ignore[type-arg]
    for category, test in LEVEL3:
        results = [result(test, i) for i in range(len(serials))]
        worst = next((s for s in ("Fail", "Warn") if any(r["status"] == s for r in results)), "Pass")
        categories.setdefault(category, []).append({"name": test, "results": results, "test_summary": {"status": worst}})
    document = {
        "DCGM Diagnostic": {"test_categories": [{"category": c, "tests": t} for c, t in categories.items()]},
        "entity_groups": [{"entities": [{"device_id": "2330", "entity_id": i, "serial_num": s}
                                        for i, s in enumerate(serials)], "entity_group": "GPU", "entity_group_id": 1}],
        "metadata": {"Driver Version Detected": "580.82.09", "version": "4.5.2"},
    }
    return json.dumps(document, indent="\t", separators=(",", " : "))  # dcgmi's layout


def seed_hosts(n: int, model, platform) -> list:  # type: ignore[no-untyped-def,type-arg]
    """``n`` HGX servers with 8 GPUs each, in burn-in since two hours (bulk inserts: setup, not under test)."""
    from django.utils import timezone

    from inventory.models import Gpu, GpuState, Server

    since = timezone.now() - dt.timedelta(hours=2)
    servers = Server.objects.bulk_create(Server(hostname=f"acc-{i:05d}", serial=f"ASRV{i:07d}", platform=platform)
                                         for i in range(n))
    Gpu.objects.bulk_create(
        (Gpu(serial=f"178{s.pk:07d}{slot}", uuid=f"GPU-{s.pk:08x}-{slot:04x}-4a00-8000-000000000000", model=model,
             server=s, module_id=slot + 1, pci_bus_id=f"00000000:{HGX_BUSES[slot]}:00.0", state=GpuState.BURN_IN,
             state_changed_at=since) for s in servers for slot in range(8)), batch_size=2000)
    return servers


def delivery_in_burn_in(n: int, ref: str, *, site, vendor, model, actor, rng: random.Random) -> int:  # type: ignore[no-untyped-def]
    """A delivery of ``n`` GPUs taken through burn-in by the services: received, started, two level-3 runs per GPU
    (by serial, 8 GPUs per document), an NCCL check for ~95 %. Returns the delivery id."""
    from django.utils import timezone

    from acceptance import selectors, services
    from acceptance.models import AcceptanceCheck
    from procurement.services import orders

    po = orders.order_create(vendor=vendor, reference=ref, ordered_on=dt.date(2026, 11, 2),
                             promised_on=dt.date(2026, 12, 1), actor=actor, lines=[
                                 {"gpu_model": model, "quantity": n, "unit_price": Decimal("100"),
                                  "warranty_months": 36}])
    rows = orders.receipt_rows(serials="\n".join(f"{ref}{i:05d}" for i in range(n)))[0]
    delivery = orders.delivery_receive(order_line=po.lines.get(), site=site, received_on=dt.date(2026, 12, 1),
                                       rows=rows, actor=actor)
    services.burn_in_start(gpus=selectors.delivery_gpus(delivery_id=delivery.pk), actor=actor)
    gpus = selectors.delivery_gpus(delivery_id=delivery.pk)
    for _ in range(2):
        for k in range(0, len(gpus), 8):
            serials = [g.serial for g in gpus[k:k + 8]]
            services.diag_ingest(document=diag_document(rng, serials, warn_rate=0), server=None, level=3,
                                 source="bench", actor=actor)
    now = timezone.now()
    AcceptanceCheck.objects.bulk_create(  # setup: the site's NCCL results (the service is not under test here)
        (AcceptanceCheck(gpu=g, name="nccl_allreduce_busbw", passed=True, value=round(rng.uniform(360, 380), 1),
                         unit="GB/s", measured_at=now, actor_name="bench") for g in gpus if rng.random() < 0.95),
        batch_size=2000)
    return delivery.pk


def case(key: str, timing: Timing, n: int, unit: str, extra: str = "") -> None:
    say(f"# {key}: {n:,} {unit}(s) in {timing.seconds:.3f} s wall; {timing.per(n, unit)} {extra}".rstrip())


def main() -> None:  # noqa: PLR0915
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=500, help="documents ingested (one per server, 8 GPUs each)")
    parser.add_argument("--delivery-gpus", type=int, default=1000, help="GPUs per delivery (gate, progress)")
    parser.add_argument("--deliveries", type=int, default=2, help="deliveries per figure (each read once)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", default=bool(os.environ.get("BENCH_ACC_SMOKE")),
                        help="tiny sizes (also BENCH_ACC_SMOKE=1): proves the script runs; figures meaningless")
    args = parser.parse_args()
    if args.smoke:
        args.docs, args.delivery_gpus, args.deliveries = 8, 16, 1

    url = bench_database_url(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/fleet_bench_acc"),
                             "fleet_bench_acc")
    recreate_database(url)
    os.environ.update({"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "fleet.settings"})
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    # Setup only: "Start burn-in" of a 1,000-GPU delivery runs now instead of as a Celery job (no worker here).
    os.environ["FLEET_BULK_SYNC_LIMIT"] = str(max(args.delivery_gpus, 200))
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from acceptance import gate, selectors, services
    from acceptance.models import BurnInPolicy
    from acceptance.parsers import parse_diag
    from fleet.audit import SystemActor
    from fleet.roles import user_set_role
    from inventory.models import GpuModel, ServerPlatform, Site
    from procurement.models import Vendor

    call_command("migrate", verbosity=0)
    call_command("createcachetable", verbosity=0)  # the pages' cache without REDIS_URL (as make setup does)
    say(f"database {url.rsplit('/', 1)[-1]}; {loadavg()}")
    rng = random.Random(args.seed)
    actor = SystemActor("bench")
    model = GpuModel.objects.create(sku="H100-SXM5-80GB", name="NVIDIA H100 80GB HBM3", architecture="Hopper",
                                    memory_gib=80, tdp_w=700)
    platform = ServerPlatform.objects.create(name="HGX H100 8-GPU", vendor="Supermicro", gpu_model=model)
    site = Site.objects.create(code="acc", name="Bench site", timezone="UTC", electricity_price_kwh="0.1000",
                               pue="1.30")
    vendor = Vendor.objects.create(name="Supermicro")
    BurnInPolicy.objects.create(gpu_model=model, min_level=3, required_runs=2, min_hours=0,
                                required_tests=["memory", "targeted_stress"], required_checks=["nccl_allreduce_busbw"])

    # Setup: hosts and their documents, the deliveries through burn-in, a viewer.
    started = time.perf_counter()
    servers = seed_hosts(args.docs, model, platform)
    from inventory.models import Gpu

    serials: dict[int, list[str]] = {}
    for server_id, serial in Gpu.objects.filter(server__in=servers).order_by("server_id", "pci_bus_id").values_list(
            "server_id", "serial"):
        serials.setdefault(server_id, []).append(serial)
    documents = [(diag_document(rng, serials[s.pk]), s) for s in servers]
    size = statistics.median(len(text) for text, _ in documents)
    say(f"setup: {len(servers):,} servers x 8 GPUs in burn-in, {len(documents):,} distinct documents "
        f"({size / 1e3:.1f} kB median) in {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    warmup = delivery_in_burn_in(8, "WARM", site=site, vendor=vendor, model=model, actor=actor, rng=rng)
    deliveries = [delivery_in_burn_in(args.delivery_gpus, f"D{i}X", site=site, vendor=vendor, model=model,
                                      actor=actor, rng=rng) for i in range(2 * args.deliveries)]
    gate_deliveries, page_deliveries = deliveries[:args.deliveries], deliveries[args.deliveries:]
    say(f"setup: {len(deliveries)} deliveries of {args.delivery_gpus:,} GPUs through burn-in (2 level-3 runs per "
        f"GPU) in {time.perf_counter() - started:.1f} s")
    viewer = get_user_model().objects.create_user(username="bench-viewer", password="bench-only")  # noqa: S106
    user_set_role(viewer, "viewer")
    client = Client()
    client.force_login(viewer)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    gc.collect()
    gc.freeze()
    say(loadavg())
    figures: dict[str, float] = {}

    # 1. Parsing alone, then the whole ingest of every document (distinct hosts, serials, values).
    with Timing() as timing:
        for text, _ in documents:
            parse_diag(text)
    figures["parse_docs_per_s"] = round(len(documents) / timing.seconds, 1)
    case("parse", timing, len(documents), "doc")
    with Timing() as timing:
        for text, server in documents:
            services.diag_ingest(document=text, server=server, level=None, source="bench", actor=actor)
    figures.update({
        "diag_docs_per_s": round(len(documents) / timing.seconds, 1),
        "diag_gpus_per_s": round(8 * len(documents) / timing.seconds),
        "diag_cpu_ms_per_doc": round(1000 * (timing.cpu + timing.backend) / len(documents), 2),
        "diag_cpu_ms_per_doc_here": round(1000 * timing.cpu / len(documents), 2),
        "diag_cpu_ms_per_doc_backend": round(1000 * timing.backend / len(documents), 2)})
    case("diag ingest", timing, len(documents), "doc", f"({8 * len(documents):,} GPUs)")

    # 2. The gate of each gate delivery, judged once as a group; then one of them GPU by GPU (the lifecycle's way).
    gate_runs = []
    for pk in gate_deliveries:
        with Timing() as timing:
            statuses = gate.evaluate_many(selectors.delivery_gpus(delivery_id=pk))
        met = sum(s.met for s in statuses.values())
        gate_runs.append(timing)
        case(f"gate of delivery {pk}", timing, len(statuses), "GPU", f"({met:,} met, "
             f"{sum(s.failed for s in statuses.values()):,} failed)")
    mid = sorted(gate_runs, key=lambda t: t.seconds)[len(gate_runs) // 2]
    figures.update({"gate_delivery_s": round(mid.seconds, 3), "gate_delivery_cpu_s": round(mid.cpu + mid.backend, 3),
                    "gate_delivery_cpu_s_here": round(mid.cpu, 3),
                    "gate_delivery_cpu_s_backend": round(mid.backend, 3)})
    gpus = selectors.delivery_gpus(delivery_id=gate_deliveries[0])
    with Timing() as timing:
        for gpu in gpus:
            gate.evaluate(gpu)
    figures.update({"gate_per_gpu_path_s": round(timing.seconds, 3),
                    "gate_per_gpu_path_cpu_s": round(timing.cpu + timing.backend, 3)})
    case("gate GPU by GPU (after the group pass)", timing, len(gpus), "GPU")

    # 3. The progress page: the process's first request on the warm-up delivery, then each page delivery once.
    with CaptureQueriesContext(connection) as queries, Timing() as timing:
        first = client.get(f"/acceptance/deliveries/{warmup}/")
    assert first.status_code == 200, first.status_code
    figures.update({"progress_first_request_ms": round(timing.seconds * 1000, 1),
                    "progress_queries": len(queries)})
    case("progress page, first request of the process (8 GPUs)", timing, 1, "request", f"({len(queries)} queries)")
    page_runs = []
    for pk in page_deliveries:
        with Timing() as timing:
            page = client.get(f"/acceptance/deliveries/{pk}/")
        assert page.status_code == 200 and b"passed" in page.content, page.status_code
        page_runs.append(timing)
        case(f"progress page of delivery {pk}", timing, 1, "request", f"({len(page.content) / 1e3:.0f} kB)")
    mid = sorted(page_runs, key=lambda t: t.seconds)[len(page_runs) // 2]
    figures.update({"progress_ms": round(mid.seconds * 1000, 1),
                    "progress_cpu_ms": round((mid.cpu + mid.backend) * 1000, 1),
                    "progress_cpu_ms_here": round(mid.cpu * 1000, 1),
                    "progress_cpu_ms_backend": round(mid.backend * 1000, 1)})

    figures.update({"docs": len(documents), "delivery_gpus": args.delivery_gpus, "deliveries": args.deliveries})
    say(loadavg())
    for key, value in figures.items():
        say(f"{key} {value}")
    say(json.dumps(figures))


if __name__ == "__main__":
    main()
