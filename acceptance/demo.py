"""Demo data for ``make run`` (``bootstrap --demo-gpus``): burn-in policies and check thresholds per model, the
newest delivery's GPUs in burn-in (most with two passing level-3 runs a day apart, two failed, two still waiting),
NCCL all-reduce results, and a level-2 run on one placed server. Called after procurement's demo (deliveries)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django.apps import apps
from django.utils import timezone

from acceptance import services
from acceptance.models import BurnInPolicy, CheckThreshold
from fleet.audit import Actor
from inventory.models import Gpu, GpuModel, GpuState, Server

TESTS = {2: ("software", "pcie", "memory", "diagnostic"),
         3: ("software", "pcie", "memory", "diagnostic", "targeted_stress", "targeted_power", "memory_bandwidth")}


def _document(statuses: dict[int, str], serials: dict[int, str], level: int) -> str:
    def result(i: int, test: str) -> dict[str, Any]:
        status = statuses[i] if test == "memory" else "Pass"
        out: dict[str, Any] = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": i, "status": status}
        if status == "Fail":
            out["warnings"] = [{"error_category": 3, "error_id": 95, "error_severity": 2,
                                "warning": f"A memory mismatch was detected on GPU {i}, but no error was reported "
                                           "by CUDA or NVML."}]
        return out
    return json.dumps({
        "DCGM Diagnostic": {"test_categories": [{"category": "Tests", "tests": [
            {"name": t, "results": [result(i, t) for i in sorted(statuses)]} for t in TESTS[level]]}]},
        "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1, "entities": [
            {"entity_id": i, "serial_num": s} for i, s in serials.items()]}],
        "metadata": {"version": "4.2.3", "Driver Version Detected": "570.124.06"}})


def acceptance_demo_seed(*, actor: Actor) -> dict[str, int]:
    now = timezone.now()
    BurnInPolicy.objects.get_or_create(gpu_model=None, defaults={"min_level": 3, "required_runs": 2,
                                                                 "min_hours": 24, "infant_days": 90})
    for model in GpuModel.objects.filter(gpus__isnull=False).distinct():
        CheckThreshold.objects.get_or_create(gpu_model=model, name="nccl_allreduce_busbw",
                                             defaults={"min_value": 350.0, "unit": "GB/s"})
    out = {"burn_in": 0, "failed": 0, "runs": 0}
    try:
        asset = apps.get_model("procurement", "GpuAsset")
        delivery = apps.get_model("procurement", "Delivery").objects.order_by("-received_on", "-id").first()
    except LookupError:
        delivery = None
    if delivery is not None:
        ids = list(asset.objects.filter(delivery=delivery).values_list("gpu_id", flat=True))
        gpus = list(Gpu.objects.filter(pk__in=ids, state=GpuState.RECEIVED).order_by("id"))
        if gpus:
            services.burn_in_start(gpus=gpus, actor=actor, reason="demo: burn-in of the new delivery")
            # The demo's burn-in started 30 hours ago, so the 24-hour policy can be met by its runs.
            Gpu.objects.filter(pk__in=[g.pk for g in gpus]).update(state_changed_at=now - dt.timedelta(hours=30))
            tested, waiting = gpus[:-2], gpus[-2:]
            serials = {i: g.serial for i, g in enumerate(tested)}
            for hours_ago in (28, 2):
                statuses = {i: "Fail" if hours_ago == 2 and i in (3, 11) else "Pass" for i in serials}
                services.diag_ingest(document=_document(statuses, serials, 3), server=None, level=3, source="demo",
                                     ran_at=now - dt.timedelta(hours=hours_ago), actor=actor)
                out["runs"] += 1
            for g in tested:
                g.refresh_from_db()
                if g.state == GpuState.BURN_IN:
                    services.check_record(gpu=g, name="nccl_allreduce_busbw", value=372.4, unit="GB/s",
                                          details="nccl-tests all_reduce_perf, 8 GPUs, 8 GiB", actor=actor)
            out["burn_in"] = len(waiting) + sum(1 for g in tested if g.state == GpuState.BURN_IN)
            out["failed"] = Gpu.objects.filter(pk__in=ids, state=GpuState.BURN_IN_FAILED).count()
    server = Server.objects.filter(gpus__state=GpuState.IN_SERVICE).order_by("hostname").first()
    if server is not None:
        serials = {i: g.serial for i, g in enumerate(server.gpus.filter(serial__isnull=False).order_by("pci_bus_id"))}
        if serials:
            services.diag_ingest(document=_document(dict.fromkeys(serials, "Pass"), serials, 2), server=server,
                                 level=2, source="demo", ran_at=now - dt.timedelta(hours=6), actor=actor)
            out["runs"] += 1
    return out
