"""Reads of the firmware catalog, ready to render: joins, deterministic order."""

from __future__ import annotations

from django.db.models import Count, Prefetch, Q, QuerySet, Sum
from django.utils import timezone

from firmware.models import (
    Baseline,
    Bundle,
    BundleItem,
    ComplianceStatus,
    ComponentSpec,
    MaintenanceWindow,
    Pool,
    Release,
)
from firmware.services.catalog import PER_GPU


def component_spec_list() -> QuerySet[ComponentSpec]:
    return ComponentSpec.objects.order_by("apply_order", "component", "id")


def release_list() -> QuerySet[Release]:
    """Newest version first within a component (by version key, not text)."""
    return Release.objects.prefetch_related("platforms", "gpu_models").order_by("component", "-version_key", "-id")


def release_detail(*, pk: int) -> Release:
    return Release.objects.prefetch_related("platforms", "gpu_models").get(pk=pk)


def release_bundles(*, release: Release) -> QuerySet[Bundle]:
    return Bundle.objects.filter(items__release=release).select_related("platform").order_by("name", "id")


def _items() -> Prefetch:
    return Prefetch("items", queryset=BundleItem.objects.select_related("release").order_by("order", "id"))


def bundle_list() -> QuerySet[Bundle]:
    return Bundle.objects.select_related("platform", "created_by").prefetch_related(_items()).order_by("name", "id")


def bundle_detail(*, pk: int) -> Bundle:
    return Bundle.objects.select_related("platform", "created_by").prefetch_related(_items()).get(pk=pk)


def baseline_list() -> QuerySet[Baseline]:
    return Baseline.objects.select_related("bundle", "platform", "pool", "approved_by").order_by(
        "platform__name", "pool__name", "-valid_from", "id")


def baselines_in_force() -> QuerySet[Baseline]:
    now = timezone.now()
    return baseline_list().filter(Q(valid_to__isnull=True) | Q(valid_to__gt=now), approved_by__isnull=False,
                                  valid_from__lte=now)


def pool_list() -> QuerySet[Pool]:
    return Pool.objects.annotate(server_count=Count("servers")).order_by("name", "id")


def pool_detail(*, pk: int) -> Pool:
    return Pool.objects.annotate(server_count=Count("servers")).get(pk=pk)


def window_list() -> QuerySet[MaintenanceWindow]:
    return MaintenanceWindow.objects.select_related("site", "pool").order_by("kind", "name", "id")


def compliance_by_platform() -> list[dict]:
    """Per platform: servers and GPUs compliant / drift / unknown (a server drifts when any of its rows do).

    One grouped query over ComplianceStatus, one row per server. The per-GPU components are stored as
    (server, version) groups with a GPU count, so a server's GPUs in a state are counted by the per-GPU
    component with the most GPUs in that state: exact when a GPU's components drift together (they are
    flashed together), a lower bound when one GPU drifts on VBIOS and another on InfoROM."""
    per_gpu = sorted(PER_GPU)
    gpu_sums = {}
    for i, component in enumerate(per_gpu):
        on = Q(component=component)
        gpu_sums |= {f"g{i}": Sum("gpu_count", filter=on, default=0),
                     f"g{i}_drift": Sum("gpu_count", filter=on & Q(status="drift"), default=0),
                     f"g{i}_unknown": Sum("gpu_count", filter=on & Q(status="unknown"), default=0)}
    servers = (ComplianceStatus.objects.values("server_id", "server__platform__name", "server__platform_id")
               .annotate(drift=Count("id", filter=Q(status="drift")), unknown=Count("id", filter=Q(status="unknown")),
                         **gpu_sums)
               .order_by())
    summary: dict[int, dict] = {}
    for row in servers:
        entry = summary.setdefault(row["server__platform_id"], {
            "platform_id": row["server__platform_id"], "platform": row["server__platform__name"],
            "servers": 0, "servers_compliant": 0, "servers_drift": 0, "servers_unknown": 0,
            "gpus": 0, "gpus_drift": 0, "gpus_unknown": 0})
        entry["servers"] += 1
        key = "servers_drift" if row["drift"] else "servers_unknown" if row["unknown"] else "servers_compliant"
        entry[key] += 1
        for suffix in ("", "_drift", "_unknown"):
            entry[f"gpus{suffix}"] += max((row[f"g{i}{suffix}"] for i in range(len(per_gpu))), default=0)
    for entry in summary.values():
        entry["percent"] = round(100 * entry["servers_compliant"] / entry["servers"], 1) if entry["servers"] else 0
    return sorted(summary.values(), key=lambda e: e["platform"] or "")


def compliance_computed_at() -> str | None:
    row = ComplianceStatus.objects.order_by().values_list("computed_at", flat=True)[:1]
    return row[0] if row else None
