"""Import from files: upload, a dry-run preview of every row, then an explicit confirm."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Q
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from fleet.views import HtmxHttpRequest, operator_required
from inventory.forms import ImportUploadForm
from inventory.imports import import_run_confirm, import_run_confirm_refusal, import_run_preview
from inventory.models import Gpu, GpuState, ImportRun, Server

LINKED_GPUS = 500  # new GPUs linked by name on an applied import's page


@operator_required
def import_upload(request: HtmxHttpRequest) -> HttpResponse:
    form = ImportUploadForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data["file"]
        run = import_run_preview(content=upload.read(), filename=upload.name, fmt=form.cleaned_data["fmt"],
                                 server_hint=form.cleaned_data["server_hint"], actor=request.user,
                                 new_state=form.cleaned_data["new_state"] or GpuState.RECEIVED)
        return redirect("import-preview", pk=run.pk)
    recent = ImportRun.objects.select_related("created_by").defer("content")[:10]
    return render(request, "inventory/import_upload.html",
                  {"form": form, "recent": recent, "max_bytes": settings.FLEET_IMPORT_MAX_BYTES})


@operator_required
def import_preview(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """GET: what the import would do. POST: do it (refused when the preview found errors)."""
    run = get_object_or_404(ImportRun.objects.select_related("created_by").defer("content"), pk=pk)
    if request.method == "POST":
        try:
            run = import_run_confirm(run_id=run.pk, actor=request.user)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
            return redirect("import-preview", pk=run.pk)
        summary = run.summary
        if summary["applied"]:
            messages.success(request, f"Imported {run.filename}: {summary['created']} created, "
                                      f"{summary['updated']} updated, {summary['moved']} moved.")
        else:
            messages.error(request, "The import was refused (see the errors below); nothing was changed.")
        return redirect("import-preview", pk=run.pk)
    summary = run.summary
    created_servers, created_gpus = [], []
    if run.status == ImportRun.Status.APPLIED:
        created_servers = list(Server.objects.filter(hostname__in=summary.get("servers_created", [])[:200])
                               .order_by("hostname"))
        identities = [row["identity"] for row in summary.get("rows", [])
                      if row.get("action") in ("create", "created") and row.get("identity")][:LINKED_GPUS]
        created_gpus = list(Gpu.objects.select_related("server").filter(Q(serial__in=identities) | Q(uuid__in=identities))
                            .order_by("id"))
    new_state = summary.get("new_state", GpuState.RECEIVED)
    context = {
        "created_servers": created_servers,
        "created_gpus": created_gpus,
        "new_state_label": GpuState(new_state).label if new_state in GpuState.values else new_state,
        "run": run,
        "summary": summary,
        "rows": [row for row in summary.get("rows", []) if row.get("action") != "unchanged"],
        "can_confirm": import_run_confirm_refusal(run) is None,
    }
    return render(request, "inventory/import_preview.html", context)
