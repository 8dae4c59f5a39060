"""Decommission pages: the request list and wizard (policy and media shown before anything is written), the
request page (live progress per server and medium, evidence timeline, actions by role, certificates with download
and verify, custody log), and the host agent's script. Every action is a POST calling one service; a refused one
is a message on the page."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from decommission import forms, lifecycle, selectors, services
from decommission.files import certificate_filename, certificate_json
from decommission.models import Certificate, MediaType, RequestState
from decommission.pdf import certificate_pdf, certificate_pdf_filename
from decommission.policy import METHODS, at_least, minimum_level, required_level
from decommission.services.agent import agent_script
from decommission.services.certificates import certificate_verify
from fleet.http import attachment_response
from fleet.pagination import keyset_page
from fleet.roles import has_role
from fleet.views import HtmxHttpRequest, operator_required, query_params, render_page, viewer_required

LIVE_STATES = {RequestState.DRAINED, RequestState.SANITIZING}
SERVER_MEDIA = (MediaType.NVME, MediaType.BMC_FLASH, MediaType.HMC_FLASH, MediaType.UEFI_NVRAM, MediaType.TPM,
                MediaType.DPU, MediaType.GPU_HBM, MediaType.GPU_INFOROM)


@viewer_required
@query_params(state=RequestState.values)
def request_list(request: HtmxHttpRequest) -> HttpResponse:
    state = request.GET.get("state", "")
    page = keyset_page(selectors.request_list(state=state), after=request.GET.get("after"),
                       size=settings.FLEET_PAGE_SIZE, sort="-id", allowed=("-id",))
    return render_page(request, "decommission/request_list.html", "request-table", {
        "section": "decommission-list", "page": page, "state": state, "states": RequestState.choices,
        "policy": selectors.policy_table()})


def _preview(category: str, destination: str, level: str) -> dict[str, Any]:
    try:
        minimum = minimum_level(category=category, destination=destination)
    except ValidationError:
        return {}
    chosen = level or minimum
    return {"minimum": minimum, "level": chosen, "below": bool(level) and not at_least(level, minimum),
            "media": [{"type": MediaType(t).label, "required": required_level(t, chosen), "method": METHODS[t][1],
                       "where": METHODS[t][2]} for t in SERVER_MEDIA]}


@operator_required
def request_new(request: HtmxHttpRequest) -> HttpResponse:
    form = forms.RequestForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        try:
            obj = services.request_create(servers=d["server_objs"], gpus=d["gpu_objs"], reason=d["reason"],
                                          category=d["category"], destination=d["destination"], level=d["level"],
                                          location=d["location"], actor=request.user)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            messages.success(request, f"{obj} requested: {obj.assets.count()} items, level {obj.level}.")
            return redirect("decommission:request-detail", obj.pk)
    data = request.POST if request.method == "POST" else request.GET
    preview = _preview(data.get("category", "moderate"), data.get("destination", "resale"), data.get("level", ""))
    return render_page(request, "decommission/request_form.html", "preview", {
        "section": "decommission-new", "form": form, "preview": preview})


def _detail_context(request: HtmxHttpRequest, obj: Any) -> dict[str, Any]:
    actions = [a for a in lifecycle.available(obj.state, obj.held_from)
               if not a.worker and has_role(request.user, a.role)]
    certs = list(selectors.certificates_for(request=obj).filter(kind="bundle")) if obj.state in (
        RequestState.CERTIFIED, RequestState.RELEASED, RequestState.IN_TRANSIT, RequestState.DISPOSED,
        RequestState.CLOSED) else []
    return {"section": "decommission-detail", "obj": obj, "actions": actions,
            "assets": selectors.asset_progress(request=obj)[:200],
            "media": selectors.media_for(request=obj)[:400],
            "events": list(selectors.events_for(request=obj).order_by("-id")[:100]),
            "bundles": certs, "custody": selectors.custody_for(request=obj), "live": obj.state in LIVE_STATES,
            "custody_form": forms.CustodyForm(initial={"count": obj.assets.count()}),
            "can_custody": has_role(request.user, "operator") and obj.state in (
                RequestState.RELEASED, RequestState.IN_TRANSIT, RequestState.DISPOSED)}


@viewer_required
def request_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    obj = get_object_or_404(selectors.request_list(), pk=pk)
    return render_page(request, "decommission/request_detail.html", "live", _detail_context(request, obj))


ACTION_CALLS = {
    "approve": lambda r, u, d: services.request_approve(request=r, actor=u),
    "drain": lambda r, u, d: services.request_drain(request=r, actor=u),
    "inventory": lambda r, u, d: services.request_inventory_start(request=r, actor=u),
    "sanitize": lambda r, u, d: services.request_start_sanitizing(request=r, actor=u),
    "validate": lambda r, u, d: services.request_validate(request=r, actor=u),
    "certify": lambda r, u, d: services.request_certify(request=r, actor=u),
    "release": lambda r, u, d: services.request_release(request=r, actor=u),
    "close": lambda r, u, d: services.request_close(request=r, actor=u),
    "release_hold": lambda r, u, d: services.request_release_hold(request=r, actor=u),
    "hold": lambda r, u, d: services.request_hold(request=r, reason=d.get("reason", ""), actor=u),
    "cancel": lambda r, u, d: services.request_cancel(request=r, reason=d.get("reason", ""), actor=u),
    "escalate": lambda r, u, d: services.request_escalate(request=r, reason=d.get("reason", ""), actor=u),
    "dispose": lambda r, u, d: services.request_dispose(request=r, outcome=d.get("outcome", ""), actor=u),
    "destroyed": lambda r, u, d: services.request_record_destruction(
        request=r, reference=d.get("reference", ""), method=d.get("method", ""), facility=d.get("facility", ""),
        actor=u),
}


@require_POST
@operator_required
def request_action(request: HtmxHttpRequest, pk: int, name: str) -> HttpResponse:
    obj = get_object_or_404(selectors.request_list(), pk=pk)
    act = lifecycle.ACTIONS.get(name)
    if act is None or name not in ACTION_CALLS:
        raise PermissionDenied("Unknown action.")
    if not has_role(request.user, act.role):
        raise PermissionDenied(f"'{act.label}' needs the {act.role} role.")
    try:
        ACTION_CALLS[name](obj, request.user, {k: v.strip() for k, v in request.POST.items()})
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"{act.label}: done.")
    return redirect("decommission:request-detail", pk)


@require_POST
@operator_required
def custody_add(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    obj = get_object_or_404(selectors.request_list(), pk=pk)
    form = forms.CustodyForm(request.POST)
    if form.is_valid():
        try:
            services.custody_record(request=obj, actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            messages.error(request, " ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items()))
        else:
            messages.success(request, "Custody record added.")
    else:
        messages.error(request, " ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
    return redirect("decommission:request-detail", pk)


@viewer_required
def certificate_list(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    obj = get_object_or_404(selectors.request_list(), pk=pk)
    return render(request, "decommission/certificate_list.html", {
        "section": "decommission-detail", "obj": obj, "certificates": selectors.certificates_for(request=obj)})


@viewer_required
def certificate_download(request: HtmxHttpRequest, cert_id: str) -> HttpResponse:
    cert = get_object_or_404(Certificate.objects.select_related("asset", "medium"), pk=cert_id)
    return attachment_response(certificate_json(cert), content_type="application/json",
                               filename=certificate_filename(cert))


@viewer_required
def certificate_pdf_download(request: HtmxHttpRequest, cert_id: str) -> HttpResponse:
    """The PDF rendering (id and the JSON file's SHA-256 on top); the JSON download is the record."""
    cert = get_object_or_404(Certificate.objects.select_related("asset", "medium"), pk=cert_id)
    return attachment_response(certificate_pdf(cert), content_type="application/pdf",
                               filename=certificate_pdf_filename(cert))


@require_POST
@viewer_required
def certificate_check(request: HtmxHttpRequest, cert_id: str) -> HttpResponse:
    cert = get_object_or_404(Certificate.objects.select_related("request"), pk=cert_id)
    chain = services.chain_verify(request=cert.request)
    problems = certificate_verify(document=cert.document, stored_sha256=cert.sha256, chain_ok=chain.ok)
    return render(request, "decommission/certificate_list.html#verdict", {"cert": cert, "problems": problems,
                                                                          "checked": True})


@csrf_exempt
@require_GET
def agent_script_view(request: HtmxHttpRequest) -> HttpResponse:
    """The host agent's script: ``Authorization: AgentToken <token>`` (or ``?token=``) and ``?server=<hostname>``."""
    header = request.headers.get("Authorization", "")
    raw = header.split(" ", 1)[1] if header.startswith("AgentToken ") else request.GET.get("token", "")
    try:
        script = agent_script(raw_token=raw, server=request.GET.get("server", ""),
                              upload_url=request.build_absolute_uri(reverse("api:decommission-agent-results")))
    except PermissionDenied as exc:
        return HttpResponse(f"refused: {exc}\n", status=403, content_type="text/plain")
    return HttpResponse(script, content_type="text/x-shellscript")
