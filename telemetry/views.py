"""Telemetry pages: the fleet heatmap (canvas, data from the heatmap API) with its drill-down side panels, and
the flagged-GPU page with its one-click drain / RMA. The ingest sources page lives in ``views_sources``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from fleet.filters import strict_html_filter
from fleet.pagination import keyset_page
from fleet.views import (
    HtmxHttpRequest,
    compact_choices,
    operator_required,
    query_with,
    query_without,
    render_page,
    viewer_required,
)
from inventory import selectors as inventory_selectors
from inventory.lifecycle import allowed_targets
from inventory.models import Gpu, GpuState, Rack
from telemetry import charts, selectors, series_selectors
from telemetry.filters import health_filter
from telemetry.health import ACTIONS, evidence_text, health_flag_act
from telemetry.health_selectors import FLAG_RELATED, gpu_open_flags
from telemetry.models import HealthFlag
from telemetry.promql import StoreUnavailable

# The page's metric menu: these telemetry metrics, then every registered layer (selectors.HEATMAP_LAYERS).
PAGE_METRICS = ("gpu_temp", "power")


# --- heatmap ------------------------------------------------------------------------------------------------

@viewer_required
def heatmap(request: HtmxHttpRequest) -> HttpResponse:
    labels = selectors.heatmap_labels()
    metrics = {name: labels[name] for name in (*PAGE_METRICS, *selectors.HEATMAP_LAYERS)}
    metric = request.GET.get("metric", "gpu_temp")
    if metric not in metrics:
        metric = "gpu_temp"
    context = {
        "metric": metric,
        "metrics": metrics,
        "layers": list(selectors.HEATMAP_LAYERS),  # categorical, "now" only: no playback
        "data_url": reverse("api:telemetry-heatmap"),
        "frames_url": reverse("api:telemetry-heatmap-frames"),
        "gpu_panel_url": reverse("telemetry-heatmap-gpu", args=[0]).removesuffix("0/"),
        "rack_panel_url": reverse("telemetry-heatmap-rack", args=[0]).removesuffix("0/"),
    }
    return render_page(request, "telemetry/heatmap.html", "heatmap-body", context)


@viewer_required
def heatmap_gpu(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The side panel of one GPU (htmx), or a page of its own on a direct visit."""
    try:
        gpu = inventory_selectors.gpu_detail(pk=pk, related=("latest",))  # the chart's current values
    except Gpu.DoesNotExist:
        raise Http404("No such GPU.") from None
    context = {"gpu": gpu, "chart": charts.gpu_chart(gpu), "flags": gpu_open_flags(gpu_id=gpu.pk),
               "store_backend": settings.FLEET_TELEMETRY_BACKEND == "prometheus"}
    return render_page(request, "telemetry/heatmap_panel.html", "gpu-panel", context)


@viewer_required
def heatmap_rack(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    rack = get_object_or_404(Rack.objects.select_related("row", "site"), pk=pk)
    context = {"rack": rack, "chart": charts.group_chart("rack", rack.pk, f"Rack {rack.name}"),
               "store_backend": settings.FLEET_TELEMETRY_BACKEND == "prometheus"}
    return render_page(request, "telemetry/heatmap_panel.html", "rack-panel", context)


@viewer_required
def store_coverage(request: HtmxHttpRequest, scope: str, pk: int) -> HttpResponse:
    """What the history store lacks for a GPU or a rack (prometheus backend; one /api/v1/series request): a
    fragment the side panels load after they are shown, so a slow store never holds a panel up."""
    if scope not in ("gpu", "rack"):
        raise Http404("No such scope.")
    try:
        context = {"coverage": series_selectors.store_coverage(scope=scope, scope_id=pk)}
    except StoreUnavailable as exc:
        context = {"coverage_error": f"Telemetry history is unavailable: {exc}"}
    return render(request, "telemetry/includes/store_coverage.html", context)


# --- flagged GPUs -------------------------------------------------------------------------------------------

def _flag_row(flag: HealthFlag) -> dict[str, Any]:
    targets = set(allowed_targets(flag.gpu.state))
    return {
        "flag": flag,
        "text": evidence_text(flag.kind, flag.evidence),
        "can": {name: state in targets for name, state in ACTIONS.items()},
        "open": flag.cleared_at is None,
    }


@viewer_required
def health_list(request: HtmxHttpRequest) -> HttpResponse:
    filterset = health_filter(request.GET)
    compact_choices(filterset.form.fields, site="Any site", model="Any model")
    known = strict_html_filter(filterset, request.GET)
    queryset = filterset.qs if filterset.is_valid() else HealthFlag.objects.none()
    page = keyset_page(queryset, after=request.GET.get("after"), size=settings.FLEET_PAGE_SIZE,
                       sort="-id", allowed=("-id",))
    context = {
        "filter": filterset,
        "page": page,
        "rows": [_flag_row(flag) for flag in page.items],
        "back": request.get_full_path(),
        "next_query": query_with(request.GET, after=page.next_after) if page.has_next else None,
        "first_query": query_without(request.GET, "after"),
    }
    return render_page(request, "telemetry/health_list.html", "health-table", context, status=200 if known else 400)


@operator_required
@require_POST
def health_flag_action(request: HtmxHttpRequest, pk: int, action: str) -> HttpResponse:
    """Drain or RMA the flagged GPU (one click). htmx: the row comes back with the outcome; otherwise a
    redirect to the list (``next``) with a message."""
    if action not in ACTIONS:
        raise Http404("No such action.")
    flag = get_object_or_404(HealthFlag.objects.select_related(*FLAG_RELATED), pk=pk)
    label = GpuState(ACTIONS[action]).label
    before = flag.gpu.get_state_display()
    try:
        health_flag_act(flag=flag, action=action, actor=request.user)
    except ValidationError as exc:
        level, notice = messages.ERROR, f"{flag.gpu.identity} was not moved to {label}: {' '.join(exc.messages)}"
    else:
        level, notice = messages.SUCCESS, f"{flag.gpu.identity}: {before} → {flag.gpu.get_state_display()}."
    if request.htmx:
        row = _flag_row(flag) | {"notice": notice, "notice_level": "success" if level == messages.SUCCESS else "error"}
        back = request.htmx.current_url_abs_path or reverse("health-list")
        return render_page(request, "telemetry/health_list.html", "flag-row", {"row": row, "back": back})
    messages.add_message(request, level, notice)
    back = request.POST.get("next", "")
    return redirect(back if back.startswith("/") and not back.startswith("//") else reverse("health-list"))

