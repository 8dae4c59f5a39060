"""Reads of health flags, ready to render: the flagged-GPU list (page and API) and a GPU's open flags."""

from __future__ import annotations

from typing import Any

from django.db.models import Case, Count, QuerySet, Value, When

from fleet.kept import KeptRead
from telemetry.health import evidence_text
from telemetry.models import HealthFlag

FLAG_RELATED = ("gpu", "gpu__model", "gpu__server", "gpu__site", "gpu__rack", "gpu__row")


def health_flag_list(*, kind: str | None = None, severity: str | None = None, site: int | None = None,
                     model: int | None = None, gpu: int | None = None, open_only: bool = True) -> QuerySet[HealthFlag]:
    """Flags, newest first (``-id``: keyset pages), with the GPU and its place joined."""
    qs = HealthFlag.objects.select_related(*FLAG_RELATED)
    if open_only:
        qs = qs.filter(cleared_at__isnull=True)
    if kind:
        qs = qs.filter(kind=kind)
    if severity:
        qs = qs.filter(severity=severity)
    if site:
        qs = qs.filter(gpu__site_id=site)
    if model:
        qs = qs.filter(gpu__model_id=model)
    if gpu:
        qs = qs.filter(gpu_id=gpu)
    return qs.order_by("-id")


# Read on every view of a GPU page or its heatmap side panel: the statement is kept (fleet.kept).
_gpu_open_flags = KeptRead(lambda gpu_id: HealthFlag.objects.filter(gpu_id=gpu_id, cleared_at__isnull=True)
                           .order_by("-id"))


def gpu_open_flags(*, gpu_id: int) -> list[dict[str, Any]]:
    """A GPU's open flags with their evidence in words (the GPU page's health box)."""
    return [{"flag": flag, "text": evidence_text(flag.kind, flag.evidence)} for flag in _gpu_open_flags(gpu_id)]


def open_flag_counts(*, gpu_ids: list[int] | None = None, rack_id: int | None = None,
                     row_id: int | None = None) -> dict[str, int]:
    """Open flags by severity among some GPUs, a rack's or a row's (the detail pages' health box)."""
    qs = HealthFlag.objects.filter(cleared_at__isnull=True)
    if gpu_ids is not None:
        qs = qs.filter(gpu_id__in=gpu_ids)
    if rack_id is not None:
        qs = qs.filter(gpu__rack_id=rack_id)
    if row_id is not None:
        qs = qs.filter(gpu__row_id=row_id)
    rows = qs.values("severity").annotate(n=Count("id")).order_by()
    return {row["severity"]: row["n"] for row in rows}



PLACE_FLAGS_SHOWN = 20


def open_flags_in(*, rack_id: int | None = None, row_id: int | None = None,
                  limit: int = PLACE_FLAGS_SHOWN) -> list[HealthFlag]:
    """A rack's or a row's open flags, worst first, with each GPU (its serial) and server (the place pages)."""
    qs = HealthFlag.objects.filter(cleared_at__isnull=True).select_related("gpu", "gpu__server")
    if rack_id is not None:
        qs = qs.filter(gpu__rack_id=rack_id)
    if row_id is not None:
        qs = qs.filter(gpu__row_id=row_id)
    worst = Case(*(When(severity=s, then=Value(n)) for n, s in enumerate(("rma", "drain", "watch"))), default=Value(9))
    return list(qs.order_by(worst, "-id")[:limit])
