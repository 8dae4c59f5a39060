"""HTML pages of the firmware catalog, baselines, pools, windows and the drift report.

Viewers read everything; operators create releases, bundles, pools, windows and propose baselines; approvers
approve baselines and move releases between channels (the API enforces the same matrix)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from firmware.forms import COMPONENT_CHOICES, BaselineForm, BundleForm, PoolForm, ReleaseForm, WindowForm
from firmware.models import Baseline, Bundle, Channel, ComplianceState, Release
from firmware.selectors import catalog as selectors
from firmware.selectors import drift as drift_selectors
from firmware.services import catalog as services
from firmware.services.catalog import PER_GPU
from fleet.pagination import keyset_page, keyset_page_ordered
from fleet.roles import APPROVER, OPERATOR, has_role
from fleet.views import (
    HtmxHttpRequest,
    operator_required,
    query_params,
    query_with,
    query_without,
    render_page,
    role_required,
)
from inventory.models import FirmwareComponent, ServerPlatform

approver_required = role_required(APPROVER)
viewer_required = role_required("viewer")


def _errors_to_form(form: forms.Form, exc: ValidationError) -> None:
    """A service's ValidationError next to the form's fields (unknown field names go to the form)."""
    for name, errors in (exc.message_dict.items() if hasattr(exc, "error_dict") else [(None, exc.messages)]):
        form.add_error(name if name in form.fields else None, errors)


def _form_create(request: HtmxHttpRequest, form: forms.Form, create: Callable[..., Any], created: str) -> Any:
    """A POSTed form's data to the service ``create(actor=user, **cleaned_data)``. Returns what it created (and
    adds the message ``created.format(obj)``), or None: the form is invalid or has the service's errors."""
    if not form.is_valid():
        return None
    try:
        obj = create(actor=request.user, **form.cleaned_data)
    except ValidationError as exc:
        _errors_to_form(form, exc)
        return None
    messages.success(request, created.format(obj))
    return obj


def _page(request: HtmxHttpRequest, qs: QuerySet[Any], name: str) -> dict[str, Any]:
    """One keyset page of a catalog list (in the selector's order) as ``name``, with the pager's context."""
    page = keyset_page_ordered(qs, after=request.GET.get("after"), size=settings.FLEET_PAGE_SIZE)
    return {name: page.items, "page": page, "first_query": query_without(request.GET, "after"),
            "next_query": query_with(request.GET, after=page.next_after) if page.has_next else None}


def _list_with_create_form(request: HtmxHttpRequest, template: str, partial: str, context: dict[str, Any],
                           form: forms.Form, create: Callable[..., Any], created: str) -> HttpResponse:
    """A list page with a create form: an operator's POST goes through :func:`_form_create` and back to the
    list; a form with errors renders with the list, status 400. htmx's pager asks for the ``partial`` table."""
    if request.method == "POST":
        if not has_role(request.user, OPERATOR):
            return render(request, "403.html", status=403)
        if _form_create(request, form, create, created) is not None:
            return redirect(request.path)
    return render_page(request, template, partial, {**context, "form": form}, status=400 if form.errors else 200)


# --- home ------------------------------------------------------------------------------------------------

@viewer_required
def firmware_home(request: HtmxHttpRequest) -> HttpResponse:
    context = {
        "summary": selectors.compliance_by_platform(),
        "computed_at": selectors.compliance_computed_at(),
        "baselines": list(selectors.baselines_in_force()),
        "specs": list(selectors.component_spec_list()),
    }
    return render(request, "firmware/home.html", context)


# --- releases --------------------------------------------------------------------------------------------

@viewer_required
@query_params(component={v for v, _ in COMPONENT_CHOICES if v}, channel=Channel.values, platform=int)
def release_list(request: HtmxHttpRequest) -> HttpResponse:
    qs = selectors.release_list()
    component = request.GET.get("component") or ""
    if component:
        qs = qs.filter(component=component)
    channel = request.GET.get("channel") or ""
    if channel:
        qs = qs.filter(channel=channel)
    platform = request.GET.get("platform") or ""
    if platform.isdigit():  # releases for that platform, and those for any platform (no platform named)
        qs = qs.filter(Q(platforms=int(platform)) | Q(platforms__isnull=True)).distinct()
    context = {**_page(request, qs, "releases"), "components": COMPONENT_CHOICES, "channels": Channel.choices,
               "component": component, "channel": channel, "platform": platform,
               "platforms": ServerPlatform.objects.order_by("name")}
    return render_page(request, "firmware/release_list.html", "release-table", context)


@operator_required
def release_create(request: HtmxHttpRequest) -> HttpResponse:
    form = ReleaseForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and (release := _form_create(request, form, services.release_create,
                                                             "Release {} created.")):
        return redirect("firmware-release-detail", pk=release.pk)
    return render(request, "firmware/release_form.html", {"form": form}, status=400 if form.errors else 200)


@viewer_required
def release_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    try:
        release = selectors.release_detail(pk=pk)
    except Release.DoesNotExist:
        raise Http404("No such release.") from None
    platforms = list(release.platforms.order_by("name")) or list(ServerPlatform.objects.order_by("name"))
    context = {"release": release, "bundles": selectors.release_bundles(release=release), "channels": Channel.choices,
               "rollout_platforms": platforms}
    return render(request, "firmware/release_detail.html", context)


@operator_required
@require_POST
def release_rollout(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Start the rollout wizard from one release: its one-release bundle for the chosen platform is made (or
    found) for the person, and the wizard opens with it."""
    release = get_object_or_404(Release, pk=pk)
    platform = ServerPlatform.objects.filter(pk=request.POST.get("platform") or 0).first()
    if platform is None:
        messages.error(request, "Pick the platform the release goes to.")
        return redirect("firmware-release-detail", pk=pk)
    try:
        bundle = services.bundle_for_release(release=release, platform=platform, actor=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("firmware-release-detail", pk=pk)
    query = urlencode({"bundle": bundle.pk, "name": f"{release} on {platform}"[:120]})
    return redirect(f"{reverse('rollout-create')}?{query}")


@approver_required
@require_POST
def release_channel(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    release = Release.objects.filter(pk=pk).first()
    if release is None:
        raise Http404("No such release.")
    try:
        services.release_set_channel(release=release, channel=request.POST.get("channel", ""), actor=request.user,
                                     reason=request.POST.get("reason", ""))
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"{release} is now {request.POST.get('channel')}.")
    return redirect("firmware-release-detail", pk=pk)


# --- bundles ---------------------------------------------------------------------------------------------

@viewer_required
@query_params(platform=int)
def bundle_list(request: HtmxHttpRequest) -> HttpResponse:
    qs = selectors.bundle_list()
    platform = request.GET.get("platform") or ""
    if platform.isdigit():
        qs = qs.filter(platform_id=int(platform))
    return render_page(request, "firmware/bundle_list.html", "bundle-table",
                       {**_page(request, qs, "bundles"), "platform": platform,
                        "platforms": ServerPlatform.objects.order_by("name")})


@operator_required
def bundle_create(request: HtmxHttpRequest) -> HttpResponse:
    platform = request.POST.get("platform") or request.GET.get("platform") or ""
    form = BundleForm(request.POST or None, initial={"platform": platform} if platform.isdigit() else None)
    if platform.isdigit():  # only the releases for that platform (or for any): not the whole catalog
        field = form.fields["releases"]
        field.queryset = field.queryset.filter(Q(platforms=int(platform)) | Q(platforms__isnull=True)).distinct()
    if request.method == "POST" and (bundle := _form_create(request, form, services.bundle_create,
                                                            "Bundle {} created.")):
        return redirect("firmware-bundle-detail", pk=bundle.pk)
    return render(request, "firmware/bundle_form.html",
                  {"form": form, "platform": platform, "platforms": ServerPlatform.objects.order_by("name")},
                  status=400 if form.errors else 200)


@viewer_required
def bundle_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    try:
        bundle = selectors.bundle_detail(pk=pk)
    except Bundle.DoesNotExist:
        raise Http404("No such bundle.") from None
    baselines = selectors.baseline_list().filter(bundle=bundle)
    return render(request, "firmware/bundle_detail.html", {"bundle": bundle, "baselines": baselines})


# --- baselines, pools, windows ----------------------------------------------------------------------------

@viewer_required
@query_params()
def baseline_list(request: HtmxHttpRequest) -> HttpResponse:
    return _list_with_create_form(request, "firmware/baseline_list.html", "baseline-table",
                                  _page(request, selectors.baseline_list(), "baselines"),
                                  BaselineForm(request.POST or None),
                                  services.baseline_create, "Baseline #{.pk} proposed; an approver puts it in force.")


@approver_required
@require_POST
def baseline_action(request: HtmxHttpRequest, pk: int, action: str) -> HttpResponse:
    baseline = Baseline.objects.filter(pk=pk).first()
    if baseline is None or action not in {"approve", "end"}:
        raise Http404("No such baseline or action.")
    try:
        if action == "approve":
            services.baseline_approve(baseline=baseline, actor=request.user)
        else:
            services.baseline_end(baseline=baseline, actor=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"Baseline #{pk}: {'approved' if action == 'approve' else 'ended'}.")
    return redirect("firmware-baseline-list")


@viewer_required
@query_params()
def pool_list(request: HtmxHttpRequest) -> HttpResponse:
    return _list_with_create_form(request, "firmware/pool_list.html", "pool-table",
                                  _page(request, selectors.pool_list(), "pools"),
                                  PoolForm(request.POST or None), services.pool_create, "Pool {} created.")


@viewer_required
@query_params()
def window_list(request: HtmxHttpRequest) -> HttpResponse:
    return _list_with_create_form(request, "firmware/window_list.html", "window-table",
                                  _page(request, selectors.window_list(), "windows"),
                                  WindowForm(request.POST or None), services.window_create, "Window {} created.")


# --- drift -----------------------------------------------------------------------------------------------

@viewer_required
@query_params(site=None, platform=int, component=FirmwareComponent.values,
              status=ComplianceState.values, server=int)
def drift_report(request: HtmxHttpRequest) -> HttpResponse:
    """Counts by site, platform and component; the mixed-firmware findings; the drill-down (keyset): the GPUs
    for a per-GPU component, else the non-compliant rows (a per-GPU row is a server's group of GPUs)."""
    filters: dict[str, Any] = {
        "site": request.GET.get("site") or None,
        "platform": int(p) if (p := request.GET.get("platform", "")).isdigit() else None,
        "component": request.GET.get("component") or None,
        "status": request.GET.get("status") or None,
        "server": int(s) if (s := request.GET.get("server", "")).isdigit() else None,
    }
    drilled = any(filters.values())
    gpus = filters["component"] in PER_GPU
    rows = drift_selectors.drift_gpus(**filters) if gpus else drift_selectors.drift_devices(**filters)
    page = keyset_page(rows, after=request.GET.get("after"), size=settings.FLEET_PAGE_SIZE) if drilled else None
    context = {
        "filters": filters, "drilled": drilled, "page": page, "gpus": gpus,
        "component_label": dict(FirmwareComponent.choices).get(filters["component"] or "", ""),
        "next_query": query_with(request.GET, after=page.next_after) if page and page.has_next else None,
        "first_query": query_without(request.GET, "after"),
        "computed_at": selectors.compliance_computed_at(),
        "states": ComplianceState,
    }
    if request.htmx and drilled:
        return render_page(request, "firmware/drift.html", "drift-devices", context)
    context.update(counts=drift_selectors.drift_counts(), domains=drift_selectors.mixed_nvlink_domains(),
                   pools=drift_selectors.mixed_pools(), exceptions=drift_selectors.rollout_exceptions())
    return render(request, "firmware/drift.html", context)



