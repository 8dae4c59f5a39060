"""Acceptance pages: runs, a run's per-GPU results, burn-in progress per delivery and per rack (with the group
actions), the server page's upload, and infant mortality."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from acceptance import selectors, services, stats
from acceptance.forms import BurnInActionForm, DiagUploadForm
from fleet.views import operator_required, viewer_required
from inventory.models import Rack, Server


@viewer_required
def home(request) -> HttpResponse:  # type: ignore[no-untyped-def]
    return render(request, "acceptance/home.html", {
        "deliveries": selectors.deliveries_in_burn_in(), "runs": selectors.run_list()[:20]})


@viewer_required
def run_detail(request, pk: int) -> HttpResponse:  # type: ignore[no-untyped-def]
    try:
        context = selectors.run_detail(pk=pk)
    except selectors.DiagnosticRun.DoesNotExist as exc:
        raise Http404("No such run.") from exc
    return render(request, "acceptance/run_detail.html", context)


def _progress_page(request, *, title: str, gpus, action_url: str, back: str) -> HttpResponse:  # type: ignore[no-untyped-def]
    progress = selectors.progress(title=title, gpus=gpus)
    return render(request, "acceptance/progress.html", {"progress": progress, "action_url": action_url,
                                                        "back": back, "form": BurnInActionForm()})


def _act(request, gpus) -> None:  # type: ignore[no-untyped-def]
    form = BurnInActionForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose an action.")
        return
    act = services.burn_in_start if form.cleaned_data["action"] == "start" else services.burn_in_complete
    try:
        result = act(gpus=gpus, actor=request.user, reason=form.cleaned_data["reason"])
    except ValidationError as exc:
        for message in exc.messages:
            messages.error(request, message)
        return
    verb = "into burn-in" if form.cleaned_data["action"] == "start" else "into service"
    if result.job is not None:
        messages.success(request, f"{len(result.queued)} GPUs are being moved {verb} by background job "
                                  f"#{result.job}; this page shows them as they move.")
    else:
        messages.success(request, f"{len(result.moved)} GPU{'s' if len(result.moved) != 1 else ''} moved {verb}.")
    for held in result.held[:20]:
        messages.warning(request, f"{held['identity']} stays: {held['reason']}")


@viewer_required
def delivery_progress(request, pk: int) -> HttpResponse:  # type: ignore[no-untyped-def]
    try:
        title = selectors.delivery_title(delivery_id=pk)
    except (LookupError, Exception) as exc:  # procurement absent, or no such delivery
        raise Http404("No such delivery.") from exc
    return _progress_page(request, title=title, gpus=selectors.delivery_gpus(delivery_id=pk),
                          action_url=request.path + "action/", back="acceptance-home")


@operator_required
@require_POST
def delivery_action(request, pk: int) -> HttpResponse:  # type: ignore[no-untyped-def]
    _act(request, selectors.delivery_gpus(delivery_id=pk))
    return redirect("acceptance-delivery", pk=pk)


@viewer_required
def rack_progress(request, pk: int) -> HttpResponse:  # type: ignore[no-untyped-def]
    rack = get_object_or_404(Rack, pk=pk)
    return _progress_page(request, title=f"Rack {rack}", gpus=selectors.rack_gpus(rack=rack),
                          action_url=request.path + "action/", back="acceptance-home")


@operator_required
@require_POST
def rack_action(request, pk: int) -> HttpResponse:  # type: ignore[no-untyped-def]
    rack = get_object_or_404(Rack, pk=pk)
    _act(request, selectors.rack_gpus(rack=rack))
    return redirect("acceptance-rack", pk=pk)


@operator_required
@require_POST
def server_upload(request, pk: int) -> HttpResponse:  # type: ignore[no-untyped-def]
    server = get_object_or_404(Server, pk=pk)
    form = DiagUploadForm(request.POST, request.FILES)
    if form.is_valid():
        try:
            run = services.diag_ingest(document=form.cleaned_data["file"].read(), server=server,
                                       level=form.cleaned_data["level"], source="upload", actor=request.user)
        except ValidationError as exc:
            for message in exc.messages:
                messages.error(request, message)
        else:
            messages.success(request, f"Diagnostic run #{run.pk} recorded (level {run.level}).")
            return redirect("acceptance-run", pk=run.pk)
    else:
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, error)
    return redirect("server-detail", pk=server.pk)


@viewer_required
def infant_mortality(request) -> HttpResponse:  # type: ignore[no-untyped-def]
    report = stats.infant_mortality_report()
    return render(request, "acceptance/infant_mortality.html", {"report": report})
