"""Reads of the firmware catalog, ready to render: joins, deterministic order."""

from __future__ import annotations

from django.db.models import Count, Prefetch, Q, QuerySet
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


def component_spec_list() -> QuerySet[ComponentSpec]:
    return ComponentSpec.objects.order_by("apply_order", "component", "id")


def release_list() -> QuerySet[Release]:
    """Newest version first within a component (by version key, not text)."""
    return Release.objects.prefetch_related("platforms", "gpu_models").order_by("component", "-version_key", "-id")


def release_detail(pk: int) -> Release:
    return Release.objects.prefetch_related("platforms", "gpu_models").get(pk=pk)


def release_bundles(release: Release) -> QuerySet[Bundle]:
    return Bundle.objects.filter(items__release=release).select_related("platform").order_by("name", "id")


def _items() -> Prefetch:
    return Prefetch("items", queryset=BundleItem.objects.select_related("release").order_by("order", "id"))


def bundle_list() -> QuerySet[Bundle]:
    return Bundle.objects.select_related("platform", "created_by").prefetch_related(_items()).order_by("name", "id")


def bundle_detail(pk: int) -> Bundle:
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


def pool_detail(pk: int) -> Pool:
    return Pool.objects.annotate(server_count=Count("servers")).get(pk=pk)


def window_list() -> QuerySet[MaintenanceWindow]:
    return MaintenanceWindow.objects.select_related("site", "pool").order_by("kind", "name", "id")


def compliance_by_platform() -> list[dict]:
    """Per platform: servers and GPUs compliant / drift / unknown (a server drifts when any of its rows do).
    Two grouped queries over ComplianceStatus."""
    servers = (ComplianceStatus.objects.values("server_id", "server__platform__name", "server__platform_id")
               .annotate(drift=Count("id", filter=Q(status="drift")), unknown=Count("id", filter=Q(status="unknown")))
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
    gpus = (ComplianceStatus.objects.filter(gpu__isnull=False).values("server__platform_id")
            .annotate(gpus=Count("gpu_id", distinct=True),
                      drift=Count("gpu_id", distinct=True, filter=Q(status="drift")),
                      unknown=Count("gpu_id", distinct=True, filter=Q(status="unknown"))).order_by())
    for row in gpus:
        entry = summary.get(row["server__platform_id"])
        if entry is not None:
            entry.update(gpus=row["gpus"], gpus_drift=row["drift"], gpus_unknown=row["unknown"])
    for entry in summary.values():
        entry["percent"] = round(100 * entry["servers_compliant"] / entry["servers"], 1) if entry["servers"] else 0
    return sorted(summary.values(), key=lambda e: e["platform"] or "")


def compliance_computed_at() -> str | None:
    row = ComplianceStatus.objects.order_by().values_list("computed_at", flat=True)[:1]
    return row[0] if row else None
