"""The dashboard and the location pages: servers, racks (elevation), rows and sites."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.conf import settings
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, render

from fleet import selectors as fleet_selectors
from fleet.filters import strict_html_filter
from fleet.pagination import keyset_page
from fleet.views import (
    HtmxHttpRequest,
    audit_query_for,
    audit_rows,
    compact_choices,
    query_with,
    query_without,
    render_page,
    viewer_required,
)
from inventory import selectors
from inventory.filters import ServerFilter
from inventory.models import GpuState, Rack, Row, Server, Site
from inventory.panels import panels_context

ATTENTION_SHOWN = 10


@viewer_required
def dashboard(request: HtmxHttpRequest) -> HttpResponse:
    counts = selectors.dashboard_counts()
    skus = selectors.gpu_model_skus()
    attention = {name: list(qs[: ATTENTION_SHOWN + 1]) for name, qs in selectors.gpus_needing_attention().items()}
    context = {
        "counts": counts,
        "by_model": [{**row, "sku": skus.get(row["model__name"])} for row in counts["by_model"]],
        "attention": {name: rows[:ATTENTION_SHOWN] for name, rows in attention.items()},
        "attention_more": {name: len(rows) > ATTENTION_SHOWN for name, rows in attention.items()},
        "by_state_max": max((n for _, _, n in counts["by_state"]), default=0) or 1,
    }
    return render(request, "inventory/dashboard.html", context)


# --- servers --------------------------------------------------------------------------------------------

SERVER_SORTS = {"hostname": "Hostname", "id": "Oldest first", "-id": "Newest first"}
_TYPED_SERVER_FILTERS = {"row": "row id", "rack": "rack id", "nvlink_domain": "domain id", "q": "hostname prefix"}


def server_filter(params: Any) -> ServerFilter:
    filterset = ServerFilter(params, queryset=selectors.server_list())
    for name, placeholder in _TYPED_SERVER_FILTERS.items():
        filterset.form.fields[name].widget = forms.TextInput(attrs={"placeholder": placeholder})
    filterset.form.fields["q"].widget.input_type = "search"
    compact_choices(filterset.form.fields, site="Any site", platform="Any platform")
    return filterset


@viewer_required
def server_list(request: HtmxHttpRequest) -> HttpResponse:
    filterset = server_filter(request.GET)
    known = strict_html_filter(filterset, request.GET)
    queryset = filterset.qs if filterset.is_valid() else Server.objects.none()
    page = keyset_page(queryset, after=request.GET.get("after"), size=settings.FLEET_PAGE_SIZE,
                       sort=request.GET.get("sort", "hostname"), allowed=SERVER_SORTS)
    context = {
        "filter": filterset,
        "page": page,
        "sorts": SERVER_SORTS,
        "next_query": query_with(request.GET, after=page.next_after) if page.has_next else None,
        "first_query": query_without(request.GET, "after"),
    }
    return render_page(request, "inventory/server_list.html", "server-table", context, status=200 if known else 400)


@viewer_required
def server_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    try:
        server = selectors.server_detail(pk=pk)
    except Server.DoesNotExist:
        raise Http404("No such server.") from None
    gpus = list(selectors.server_gpus(server=server))
    context = {
        "server": server,
        "gpus": gpus,
        **panels_context("server", server=server, gpus=gpus),
        "audit": audit_rows(fleet_selectors.audit_for(server)[:50]),
        "audit_query": audit_query_for(server),
    }
    return render(request, "inventory/server_detail.html", context)


# --- racks, rows, sites --------------------------------------------------------------------------------

@dataclass
class ElevationUnit:
    unit: int
    server: Server | None = None
    span: int = 1  # rack units the server cell covers (a rowspan)
    covered: bool = False  # under the top unit of a taller server: no cell of its own


@dataclass
class Elevation:
    units: list[ElevationUnit]
    unpositioned: list[Server] = field(default_factory=list)  # in the rack without a usable unit
    overlapping: list[Server] = field(default_factory=list)  # claim units another server holds


def rack_elevation(rack: Rack, servers: list[Server]) -> Elevation:
    """Rack units top first, each empty or holding (the top of) a server; servers arrive top first."""
    units = {u: ElevationUnit(u) for u in range(rack.height_u, 0, -1)}
    elevation = Elevation(units=list(units.values()))
    for server in servers:
        bottom = server.rack_unit
        height = max(server.platform.height_u if server.platform else 1, 1)
        if bottom is None or bottom not in units:
            elevation.unpositioned.append(server)
            continue
        span = range(bottom, min(bottom + height, rack.height_u + 1))
        if any(units[u].server or units[u].covered for u in span):
            elevation.overlapping.append(server)
            continue
        top = span[-1]
        units[top].server, units[top].span = server, len(span)
        for u in span[:-1]:
            units[u].covered = True
    return elevation


@viewer_required
def rack_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    try:
        rack = selectors.rack_detail(pk=pk)
    except Rack.DoesNotExist:
        raise Http404("No such rack.") from None
    servers = list(selectors.rack_servers(rack=rack))
    context = {
        "rack": rack,
        "servers": servers,
        "elevation": rack_elevation(rack, servers),
        "gpu_total": sum(s.gpu_count for s in servers),
        "power_feeds": rack.power_feeds.order_by("name"),
        **panels_context("rack", rack=rack),
    }
    return render(request, "inventory/rack_detail.html", context)


@viewer_required
def row_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    try:
        row = selectors.row_detail(pk=pk)
    except Row.DoesNotExist:
        raise Http404("No such row.") from None
    context = {
        "row": row,
        "racks": selectors.row_racks(row=row),
        **panels_context("row", row=row),
    }
    return render(request, "inventory/row_detail.html", context)


@viewer_required
def site_list(request: HtmxHttpRequest) -> HttpResponse:
    return render(request, "inventory/site_list.html", {"sites": selectors.site_list()})


@viewer_required
def site_detail(request: HtmxHttpRequest, code: str) -> HttpResponse:
    site = get_object_or_404(Site, code=code)
    overview = selectors.site_overview(site=site)
    by_state: dict[str, int] = overview["gpus_by_state"]  # type: ignore[assignment]
    skus = selectors.gpu_model_skus()
    context = {
        "site": site,
        "overview": overview,
        "by_state": [(s.value, s.label, by_state.get(s.value, 0)) for s in GpuState if by_state.get(s.value)],
        "by_model": [{**row, "sku": skus.get(row["model__name"])} for row in overview["gpus_by_model"]],  # type: ignore[attr-defined]
        "gpu_total": sum(by_state.values()),
    }
    return render(request, "inventory/site_detail.html", context)
