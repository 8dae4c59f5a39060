"""The dashboard and the location pages: servers, racks (elevation), rows and sites."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from fleet import selectors as fleet_selectors
from fleet.filters import strict_html_filter
from fleet.pagination import keyset_page
from fleet.roles import OPERATOR, has_role
from fleet.views import (
    HtmxHttpRequest,
    audit_query_for,
    audit_rows,
    compact_choices,
    operator_required,
    query_with,
    query_without,
    render_page,
    viewer_required,
)
from inventory import scheduler, selectors, services
from inventory.filters import ServerFilter
from inventory.forms import ServerPlaceBulkForm, ServerPlaceForm
from inventory.models import GpuState, Rack, Row, SchedulerNode, Server, Site
from inventory.panels import panels_context
from inventory.place_fields import PLACE_KINDS, place_suggestions, suggestion_options

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
        "scheduler": scheduler.configured() is not None,
    }
    return render(request, "inventory/dashboard.html", context)


# --- servers --------------------------------------------------------------------------------------------

SERVER_SORTS = {"hostname": "Hostname", "id": "Oldest first", "-id": "Newest first"}
_TYPED_SERVER_FILTERS = {"nvlink_domain": "domain id", "q": "hostname prefix"}


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
    initial = {"rack": server.rack, "rack_unit": server.rack_unit} if server.rack_id else {}
    context = {
        "place_form": ServerPlaceForm(initial=initial) if has_role(request.user, OPERATOR) else None,
        "server": server,
        "gpus": gpus,
        **panels_context("server", server=server, gpus=gpus),
        "audit": audit_rows(fleet_selectors.audit_latest(server), objects=False),
        "audit_query": audit_query_for(server),
        **_scheduler_context(server),
    }
    return render(request, "inventory/server_detail.html", context)


def _node_of(server: Server) -> SchedulerNode | None:
    try:
        return server.scheduler_state
    except SchedulerNode.DoesNotExist:
        return None


def _scheduler_context(server: Server) -> dict[str, Any]:
    if scheduler.configured() is None:
        return {"scheduler": False}
    return {"scheduler": True, "sched": _node_of(server), "scheduler_node_name": scheduler.node_name(server),
            "scheduler_holds": list(selectors.server_scheduler_holds(server=server)[:10])}


@operator_required
@require_POST
def server_place(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Put one server in a rack position (rack by name, unit); its GPUs take the rack's site, row and rack."""
    server = get_object_or_404(Server.objects.select_related("platform"), pk=pk)
    form = ServerPlaceForm(request.POST)
    if form.is_valid():
        rack, unit = form.cleaned_data["rack"], form.cleaned_data["rack_unit"]
        try:
            services.servers_place(placements=[(server, rack, unit)], actor=request.user)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        else:
            messages.success(request, f"{server.hostname} placed in {rack.name} at U{unit}.")
    else:
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, error)
    return redirect("server-detail", pk=pk)


@operator_required
def server_place_bulk(request: HtmxHttpRequest) -> HttpResponse:
    """Place many servers from ``hostname,rack,unit`` lines: all of them, or none (errors name the line)."""
    form = ServerPlaceBulkForm(request.POST or None, request.FILES or None)
    placed: list[Server] = []
    if request.method == "POST" and form.is_valid():
        rows = form.cleaned_data["placements"]
        try:
            placed = services.servers_place(placements=[(s, r, u) for s, r, u, _ in rows], actor=request.user,
                                            labels=[label for *_, label in rows])
        except ValidationError as exc:
            form.add_error(None, exc.messages)
        else:
            messages.success(request, f"{len(placed)} server{'s' if len(placed) != 1 else ''} placed.")
    unplaced = list(selectors.server_list().filter(rack__isnull=True)[:50])
    return render(request, "inventory/server_place_bulk.html", {"form": form, "placed": placed, "unplaced": unplaced})


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
    for s in servers:
        s.sched = _node_of(s)
    context = {
        "scheduler": scheduler.configured() is not None,
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


@viewer_required
def place_suggest(request: HtmxHttpRequest, kind: str) -> HttpResponse:
    """``<option>``s of the places of ``kind`` whose names start with what was typed (a datalist's contents)."""
    if kind not in PLACE_KINDS:
        raise Http404("No such kind of place.")
    text = next((v for v in request.GET.values() if v), "")
    return HttpResponse(suggestion_options(place_suggestions(kind, text)))
