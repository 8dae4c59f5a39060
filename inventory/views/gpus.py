"""GPU pages: the filtered list (htmx table swaps, keyset pages, bulk transition, CSV export) and the
GPU page with its transition form."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models.signals import post_delete, post_save
from django.http import Http404, HttpResponse, QueryDict, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.choices import BaseChoiceIterator
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_POST

from fleet import selectors as fleet_selectors
from fleet.filters import HTML_COMMON_PARAMS, strict_html_filter
from fleet.fragments import fragment
from fleet.http import streaming_csv_response, url_prefix
from fleet.models import Job
from fleet.pagination import keyset_page
from fleet.roles import OPERATOR, has_role
from fleet.views import (
    HtmxHttpRequest,
    audit_query_for,
    audit_rows,
    operator_required,
    query_with,
    query_without,
    render_page,
    viewer_required,
)
from inventory import selectors, services
from inventory.filters import GpuFilter, filter_has_criteria, gpu_filter, gpu_ids_matching
from inventory.forms import BulkTransitionForm, GpuTransitionForm
from inventory.importers import gpu_csv_rows
from inventory.lifecycle import allowed_targets
from inventory.models import Gpu, GpuModel, GpuState, Site
from inventory.panels import panel_related, panels_context

GPU_SORTS = {"id": "Oldest first", "-id": "Newest first", "serial": "Serial", "state": "State"}

# Filters over large tables are typed, not picked from a <select> of thousands of options.
# The site and model <select>s list rows that change a few times a year; reading them on every page cost two
# queries (~1.3 ms, server-side cursors). Each process keeps them this long, and forgets them at once when it
# saves or deletes a site or a model itself; validation of a submitted filter still reads the table.
CHOICES_TTL = 30.0
_choices: dict[str, tuple[float, list]] = {}


# The filter fields' HTML depends only on the query string (the values typed and ticked) and those choices:
# rendered once per query string (~2.5 ms: 11 widgets) and kept as long as the choices.
_FIELDS_KEPT = 256
_fields_html: dict[str, tuple[float, SafeString]] = {}


def filter_choices_forget(**_: Any) -> None:
    _choices.clear()
    _fields_html.clear()


def _filter_fields(params: QueryDict, context: Callable[[], dict[str, Any]]) -> SafeString:
    key = query_without(params, "after")
    now = time.monotonic()
    hit = _fields_html.get(key)
    if hit is None or now - hit[0] > CHOICES_TTL:
        if len(_fields_html) >= _FIELDS_KEPT:
            _fields_html.clear()
        hit = _fields_html[key] = (now, mark_safe(render_to_string("inventory/gpu_filter_fields.html", context())))  # noqa: S308
    return hit[1]


for _model in (Site, GpuModel):
    post_save.connect(filter_choices_forget, sender=_model, dispatch_uid=f"gpu-list-choices-save-{_model.__name__}")
    post_delete.connect(filter_choices_forget, sender=_model, dispatch_uid=f"gpu-list-choices-del-{_model.__name__}")


class _CachedChoices(BaseChoiceIterator):
    """A <select>'s choices, read (without a COUNT) when the widget renders, then kept for CHOICES_TTL."""

    def __init__(self, name: str, source: Iterable) -> None:
        self.name, self.source = name, source

    def __iter__(self) -> Iterator:
        now = time.monotonic()
        hit = _choices.get(self.name)
        if hit is None or now - hit[0] > CHOICES_TTL:
            hit = _choices[self.name] = (now, [choice for choice in self.source])  # noqa: C416 - no len()
        return iter(hit[1])


def _cached_choices(fields: dict[str, Any], *names: str) -> None:
    for name in names:  # what the <select> shows; the field still validates by query
        fields[name].widget.choices = _CachedChoices(name, fields[name].widget.choices)


def _list_url(filter_query: str) -> str:
    return f"{reverse('gpu-list')}?{filter_query}" if filter_query else reverse("gpu-list")


def _gpu_filter(params: QueryDict) -> GpuFilter:
    filterset = gpu_filter(params, queryset=selectors.gpu_table_rows())
    _cached_choices(filterset.form.fields, "site", "model")
    return filterset


@viewer_required
def gpu_list(request: HtmxHttpRequest) -> HttpResponse:
    params = request.GET
    if HTML_COMMON_PARAMS.issuperset(params.keys()):
        # No filter asked for (the whole list, its pages, a sort): the filter form is built only when its
        # fields' HTML is not kept yet (~2 ms of CPU per page).
        filterset: GpuFilter | None = None
        known, filter_set, queryset = True, False, selectors.gpu_table_rows()
    else:
        filterset = _gpu_filter(params)
        # An invalid filter (unknown site, bad rack id) or an unknown parameter (?serial= on an old link) shows
        # nothing rather than silently showing everything.
        known = strict_html_filter(filterset, params)
        queryset = filterset.qs if filterset.is_valid() else selectors.gpu_table_rows().none()
        filter_set = filter_has_criteria(filterset)
    page = keyset_page(queryset, after=params.get("after"), size=settings.FLEET_PAGE_SIZE,
                       sort=params.get("sort", "id"), allowed=GPU_SORTS)
    selectors.gpu_table_label(rows=page.items)
    filter_query = query_without(params, "after", "sort")
    bulk = has_role(request.user, OPERATOR)
    links = {name: url_prefix(f"{name}-detail") for name in ("gpu", "server", "site", "rack")}

    def filter_fields() -> SafeString:
        return _filter_fields(params, lambda: {"filter": filterset or _gpu_filter(params), "sorts": GPU_SORTS,
                                               "page": page})

    context = {
        "filter_errors": filterset.errors if filterset is not None else {},
        "page": page,
        "sorts": GPU_SORTS,
        "filter_query": filter_query,
        "filter_set": filter_set,
        "next_query": query_with(params, after=page.next_after) if page.has_next else None,
        "first_query": query_without(params, "after"),
        "bulk_form": BulkTransitionForm(initial={"filter": filter_query}) if bulk else None,
        # A callable: the template renders it only for the whole page, not for the htmx table partial.
        "filter_fields": filter_fields,
        "rows_html": fragment("inventory/gpu_rows.jinja", {"rows": page.items, "bulk": bulk, "links": links,
                                                           "filter_set": filter_set}),
    }
    return render_page(request, "inventory/gpu_list.html", "gpu-table", context, status=200 if known else 400)


@viewer_required
def gpu_export(request: HtmxHttpRequest) -> StreamingHttpResponse:
    """The GPUs of the current filter as CSV (the importer's own column format), streamed row by row."""
    filterset = GpuFilter(request.GET, queryset=selectors.gpu_list())
    if not strict_html_filter(filterset, request.GET):
        return HttpResponse("\n".join(f"{name}: {' '.join(errors)}" for name, errors in filterset.errors.items()),
                            status=400, content_type="text/plain; charset=utf-8")
    queryset = filterset.qs if filterset.is_valid() else Gpu.objects.none()
    return streaming_csv_response(gpu_csv_rows(queryset), name="fleet-gpus")


@operator_required
@require_POST
def gpu_bulk_transition(request: HtmxHttpRequest) -> HttpResponse:
    """Move the ticked GPUs, or every GPU of the filter, to one state: now when few, as a job when many."""
    form = BulkTransitionForm(request.POST)
    back = _list_url(request.POST.get("filter", ""))
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, error)
        return redirect(back)
    data = form.cleaned_data
    if data["scope"] == BulkTransitionForm.FILTER:
        try:
            gpu_ids = gpu_ids_matching(QueryDict(data["filter"]))
        except ValidationError:
            messages.error(request, "Set a valid filter first: a bulk change of the whole fleet is not offered here.")
            return redirect(back)
    else:
        gpu_ids = data["gpu"]
    label = GpuState(data["to_state"]).label
    try:
        result = services.gpu_bulk_transition(gpu_ids=gpu_ids, to_state=data["to_state"], actor=request.user,
                                              reason=data["reason"])
    except ValidationError as exc:
        messages.error(request, f"Nothing was changed: not every GPU may move to {label}.")
        for message in exc.messages:
            messages.error(request, message)
        return redirect(back)
    if isinstance(result, Job):
        messages.info(request, f"Moving {result.total} GPUs to {label} in the background.")
        return redirect("job-detail", pk=result.pk)
    messages.success(request, f"{result.done} GPU{'s' if result.done != 1 else ''} moved to {label}.")
    return redirect(back)


def _gpu_or_404(pk: int) -> Gpu:
    try:
        return selectors.gpu_detail(pk=pk, related=panel_related("gpu"))
    except Gpu.DoesNotExist:
        raise Http404("No such GPU.") from None


def _gpu_page(request: HtmxHttpRequest, gpu: Gpu, form: GpuTransitionForm | None = None) -> HttpResponse:
    if form is None and has_role(request.user, OPERATOR) and allowed_targets(gpu.state):
        form = GpuTransitionForm(gpu=gpu)
    context: dict[str, Any] = {
        "gpu": gpu,
        "form": form,
        "history": selectors.gpu_state_history(gpu=gpu),
        "moves": selectors.gpu_moves(gpu=gpu),
        "firmware": selectors.gpu_firmware(gpu=gpu),
        "audit": audit_rows(fleet_selectors.audit_latest(gpu), objects=False),
        "audit_query": audit_query_for(gpu),
        **panels_context("gpu", gpu=gpu),
    }
    return render(request, "inventory/gpu_detail.html", context)


@viewer_required
def gpu_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    return _gpu_page(request, _gpu_or_404(pk))


@operator_required
@require_POST
def gpu_transition(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    gpu = _gpu_or_404(pk)
    form = GpuTransitionForm(request.POST, gpu=gpu)
    if form.is_valid():
        before = gpu.get_state_display()
        try:
            services.gpu_transition(gpu=gpu, to_state=form.cleaned_data["to_state"], actor=request.user,
                                    reason=form.cleaned_data["reason"])
        except ValidationError as exc:
            form.add_error("to_state", exc.messages)
        else:
            messages.success(request, f"{gpu.identity}: {before} → {gpu.get_state_display()}.")
            return redirect("gpu-detail", pk=gpu.pk)
    return _gpu_page(request, gpu, form)
