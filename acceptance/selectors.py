"""Reads for the acceptance pages and API: a GPU's evidence, a host's runs, burn-in progress per delivery or rack."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.db.models import QuerySet

from acceptance.gate import Evidence, GateStatus, evaluate, evaluate_many, evidence_covers, policy_for
from acceptance.models import AcceptanceCheck, DiagnosticRun, RunGpu
from fleet.kept import KeptRead
from inventory.models import Gpu, GpuState, GpuStateChange, Rack, Server

EVIDENCE_SHOWN = 20  # verdicts and checks on the GPU page

# Read on every view of a GPU page: the statements are kept (fleet.kept).
_gpu_verdicts = KeptRead(lambda gpu_id: RunGpu.objects.filter(gpu_id=gpu_id).select_related("run", "run__server")
                         .order_by("-run__ran_at", "-id")[:EVIDENCE_SHOWN])
_gpu_checks = KeptRead(lambda gpu_id: AcceptanceCheck.objects.filter(gpu_id=gpu_id).order_by("-measured_at", "-id")
                       [:EVIDENCE_SHOWN])


def gpu_evidence(*, gpu: Gpu) -> dict[str, Any]:
    verdicts = _gpu_verdicts(gpu.pk)
    checks = _gpu_checks(gpu.pk)
    policy = policy_for(gpu.model_id)  # shown, and the gate judges by it: read once
    status = None
    if gpu.state in (GpuState.BURN_IN, GpuState.DRAINED):
        # The gate judges by the verdicts and checks shown when they hold its whole window (they usually do).
        covered = evidence_covers(gpu, verdicts=verdicts, checks=checks, limit=EVIDENCE_SHOWN)
        status = evaluate(gpu, policy=policy, evidence=Evidence(verdicts, checks) if covered else None)
    return {"gpu": gpu, "verdicts": verdicts, "checks": checks, "gate": status, "policy": policy}


def server_runs(*, server: Server, limit: int = 10) -> list[DiagnosticRun]:
    return list(DiagnosticRun.objects.filter(server=server).prefetch_related("gpus").order_by("-ran_at", "-id")[:limit])


def run_list() -> QuerySet[DiagnosticRun]:
    return DiagnosticRun.objects.select_related("server").order_by("-ran_at", "-id")


def run_detail(*, pk: int) -> dict[str, Any]:
    run = DiagnosticRun.objects.select_related("server").get(pk=pk)
    verdicts = list(run.gpus.select_related("gpu", "gpu__server").order_by("entity_id", "id"))
    results = list(run.results.order_by("gpu_id", "id"))
    by_gpu: dict[int, list[Any]] = {}
    for r in results:
        by_gpu.setdefault(r.gpu_id, []).append(r)
    return {"run": run, "rows": [(v, by_gpu.get(v.gpu_id, [])) for v in verdicts]}


@dataclass
class Progress:
    title: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


BURNED_IN = "passed"


def _outcome(gpu: Gpu, ever_failed: set[int], gate: dict[int, GateStatus]) -> tuple[str, str]:
    """passed / failed / pending, and why, for one GPU of a group going through burn-in."""
    if gpu.state == GpuState.BURN_IN_FAILED:
        return "failed", "; ".join(gate[gpu.pk].reasons)
    if gpu.state == GpuState.RMA and gpu.pk in ever_failed:
        return "failed", "sent to RMA after a failed burn-in"
    if gpu.state == GpuState.IN_SERVICE:
        return BURNED_IN, "in service"
    if gpu.state == GpuState.BURN_IN:
        status = gate[gpu.pk]
        if status.met:
            return BURNED_IN, "policy met: ready for service"
        return "pending", "; ".join(status.reasons)
    return "pending", f"{gpu.get_state_display().lower()}: burn-in not started" if gpu.state == GpuState.RECEIVED \
        else gpu.get_state_display().lower()


def progress(*, title: str, gpus: list[Gpu]) -> Progress:
    """A group's burn-in: a fixed number of queries whatever its size (the gate reads every GPU's evidence at
    once)."""
    ever_failed = set(GpuStateChange.objects.filter(gpu__in=gpus, to_state=GpuState.BURN_IN_FAILED)
                      .values_list("gpu_id", flat=True))
    gate = evaluate_many([g for g in gpus if g.state in (GpuState.BURN_IN, GpuState.BURN_IN_FAILED)])
    out = Progress(title=title, counts={"passed": 0, "failed": 0, "pending": 0})
    for gpu in gpus:
        outcome, reason = _outcome(gpu, ever_failed, gate)
        out.counts[outcome] += 1
        out.rows.append({"gpu": gpu, "outcome": outcome, "reason": reason})
    return out


def delivery_gpus(*, delivery_id: int) -> list[Gpu]:
    """The GPUs procurement received in a delivery (read by label: acceptance does not import procurement).
    Raises ``LookupError`` when procurement is not installed."""
    asset = apps.get_model("procurement", "GpuAsset")
    ids = asset.objects.filter(delivery_id=delivery_id).values_list("gpu_id", flat=True)
    return list(Gpu.objects.filter(pk__in=list(ids)).select_related("model", "server").order_by("id"))


def delivery_title(*, delivery_id: int) -> str:
    delivery = apps.get_model("procurement", "Delivery").objects.select_related("order").get(pk=delivery_id)
    return f"Delivery {delivery.order.reference} received {delivery.received_on}"


def deliveries_in_burn_in(limit: int = 50) -> list[dict[str, Any]]:
    """Deliveries with GPUs not yet in service, newest first, with counts (the acceptance home page)."""
    try:
        delivery = apps.get_model("procurement", "Delivery")
        asset = apps.get_model("procurement", "GpuAsset")
    except LookupError:
        return []
    out = []
    for d in delivery.objects.select_related("order").order_by("-received_on", "-id")[:limit]:
        states = list(Gpu.objects.filter(pk__in=asset.objects.filter(delivery=d).values("gpu_id"))
                      .values_list("state", flat=True))
        if not states:
            continue
        out.append({"delivery": d, "total": len(states),
                    "received": states.count(GpuState.RECEIVED), "burn_in": states.count(GpuState.BURN_IN),
                    "failed": states.count(GpuState.BURN_IN_FAILED),
                    "in_service": states.count(GpuState.IN_SERVICE)})
    return out


def rack_gpus(*, rack: Rack) -> list[Gpu]:
    return list(Gpu.objects.filter(rack=rack).select_related("model", "server").order_by("server__hostname",
                                                                                        "module_id", "id"))
