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
from django.template.loader import get_template
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from decommission import forms, lifecycle, selectors, services
from decommission.files import certificate_filename, certificate_json
from decommission.models import Certificate, MediaType, RequestState
from decommission.pdf import certificate_pdf, certificate_pdf_filename
from decommission.policy import METHODS, at_least, minimum_level, required_level
from decommission.scheduler_gate import asset_waits
from decommission.services.agent import agent_media, agent_media_done, agent_script, agent_token_issue
from decommission.services.certificates import certificate_verify
from fleet.http import attachment_response
from fleet.pagination import keyset_page
from fleet.roles import has_role
from fleet.views import HtmxHttpRequest, operator_required, query_params, render_page, viewer_required
from inventory import scheduler

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
            count = obj.assets.count()
            messages.success(request, f"{obj} requested: {count} item{'s' if count != 1 else ''}, level {obj.level}.")
            return redirect("decommission:request-detail", obj.pk)
    data = request.POST if request.method == "POST" else request.GET
    preview = _preview(data.get("category", "moderate"), data.get("destination", "resale"), data.get("level", ""))
    return render_page(request, "decommission/request_form.html", "preview", {
        "section": "decommission-new", "form": form, "preview": preview})


# What a request in each state waits for, and the next step (the page says it above the actions).
WAITING = {
    RequestState.REQUESTED: "Waiting for an approver to approve the request.",
    RequestState.APPROVED: "Approved. Next: drain the servers (no workload left), then mark them drained.",
    RequestState.DRAINED: "Drained. Next: record the media (Fleet reads every drive, flash and TPM by serial "
                          "from the BMCs before anything is wiped).",
    RequestState.INVENTORIED: "Media recorded. Next: start sanitizing.",
    RequestState.SANITIZING: "Sanitizing: the BMC steps run by themselves; the host agent steps wait for the "
                             "agent to run on each server (below).",
    RequestState.SANITIZE_FAILED: "A medium could not be sanitized. Next: start sanitizing again (a retry), or "
                                  "escalate to physical destruction.",
    RequestState.ESCALATED_DESTROY: "Waiting for the destruction record: the facility's certificate of "
                                    "destruction number, method and facility.",
    RequestState.VERIFYING: "Every medium is done. Waiting for an approver to validate the evidence.",
    RequestState.VALIDATED: "Validated. Next: issue the certificates.",
    RequestState.CERTIFIED: "Certified. Waiting for an approver to release the hardware.",
    RequestState.RELEASED: "Released. Next: hand it off to the carrier (record the custody hand-off).",
    RequestState.IN_TRANSIT: "In transit. Next: record the disposal when the processor confirms it.",
    RequestState.DISPOSED: "Disposed. Waiting for an approver to close the request.",
    RequestState.ON_HOLD: "On legal hold: nothing moves until an approver releases the hold.",
}
# Actions that are never the primary button: they stop, hold or destroy.
DESTRUCTIVE = {"cancel", "escalate", "hold"}
AGENT_WAIT_SHOWN = 50


def _agent_waits(obj: Any, media: list[Any]) -> list[dict[str, Any]]:
    """Servers of a sanitizing request whose host agent has not done its part yet."""
    if obj.state != RequestState.SANITIZING:
        return []
    by_asset: dict[int, list[Any]] = {}
    for medium in media:
        by_asset.setdefault(medium.asset_id, []).append(medium)
    waits = []
    for asset in obj.assets.select_related("server").filter(server__isnull=False).order_by("label", "id")[
            :AGENT_WAIT_SHOWN]:
        own = by_asset.get(asset.pk, [])
        if not agent_media(asset, own) or agent_media_done(asset, own):
            continue
        waits.append({"asset": asset, "media": agent_media(asset, own)})
    return waits


def _detail_context(request: HtmxHttpRequest, obj: Any) -> dict[str, Any]:
    actions = [a for a in lifecycle.available(obj.state, obj.held_from)
               if not a.worker and has_role(request.user, a.role)]
    primary = next((a.name for a in actions if a.name not in DESTRUCTIVE), None)
    media = list(selectors.media_for(request=obj)[:400])
    certs = list(selectors.certificates_for(request=obj).filter(kind="bundle")) if obj.state in (
        RequestState.CERTIFIED, RequestState.RELEASED, RequestState.IN_TRANSIT, RequestState.DISPOSED,
        RequestState.CLOSED) else []
    return {"section": "decommission-detail", "obj": obj, "actions": actions, "primary": primary,
            "destructive": DESTRUCTIVE, "waiting": WAITING.get(obj.state, ""),
            "agent_waits": _agent_waits(obj, media), "can_operate": has_role(request.user, "operator"),
            "assets": selectors.asset_progress(request=obj)[:200],
            "scheduler_waits": asset_waits(obj), "scheduler": scheduler.configured(),
            "media": media,
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
def agent_token_new(request: HtmxHttpRequest, pk: int, asset_pk: int) -> HttpResponse:
    """Issue a one-time host agent token for one server of the request, and show it once with the command to
    run on the host (the page is rendered, not redirected to: the raw token is never stored)."""
    obj = get_object_or_404(selectors.request_list(), pk=pk)
    asset = get_object_or_404(obj.assets.select_related("server"), pk=asset_pk)
    try:
        token, raw = agent_token_issue(asset=asset, actor=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("decommission:request-detail", pk)
    script_url = request.build_absolute_uri(reverse("decommission:agent-script"))
    hostname = asset.server.hostname
    issued = {"asset": asset, "token": raw, "expires_at": token.expires_at, "script_url": script_url,
              "command": f'curl -fsS -H "Authorization: AgentToken {raw}" "{script_url}?server={hostname}" | sudo sh'}
    return render(request, "decommission/request_detail.html", {**_detail_context(request, obj), "issued": issued})


@viewer_required
def agent_script_source(request: HtmxHttpRequest) -> HttpResponse:
    """The host agent script's source as a person reads it (no token: nothing is filled in or claimed)."""
    return HttpResponse(get_template("decommission/agent.sh").template.source,
                        content_type="text/plain; charset=utf-8")


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
    certificates = sorted(selectors.certificates_for(request=obj), key=lambda c: (
        c.asset.label if c.asset_id else "", c.kind != "bundle", c.medium.get_media_type_display() if c.medium_id
        else "", c.medium.serial if c.medium_id else "", str(c.pk)))
    return render(request, "decommission/certificate_list.html", {
        "section": "decommission-detail", "obj": obj, "certificates": certificates})


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
