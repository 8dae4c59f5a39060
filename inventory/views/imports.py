"""Import from files: upload, a dry-run preview of every row, then an explicit confirm."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from fleet.views import HtmxHttpRequest, operator_required
from inventory.forms import ImportUploadForm
from inventory.imports import gpus_import
from inventory.models import ImportRun

# Rows kept in the preview summary (the counts cover every row; the page lists this many).
PREVIEW_ROWS = 2000


def _summary(result: Any) -> dict[str, Any]:
    """An ImportResult as JSON for ``ImportRun.summary``: counts, errors, and the first rows."""
    summary = result.as_dict()
    summary["row_count"] = len(summary["rows"])
    summary["rows"] = summary["rows"][:PREVIEW_ROWS]
    return json.loads(json.dumps(summary, cls=DjangoJSONEncoder))


def _run_import(run: ImportRun, *, actor: Any, dry_run: bool) -> dict[str, Any]:
    return _summary(gpus_import(content=bytes(run.content), filename=run.filename, fmt=run.fmt,
                                server_hint=run.server_hint, actor=actor, dry_run=dry_run))


@operator_required
def import_upload(request: HtmxHttpRequest) -> HttpResponse:
    form = ImportUploadForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data["file"]
        # The upload waits in ImportRun until confirmed; the import itself (a service) audits what it changes.
        run = ImportRun.objects.create(filename=upload.name[:255], fmt=form.cleaned_data["fmt"],
                                       server_hint=form.cleaned_data["server_hint"].strip(),
                                       content=upload.read(), created_by=request.user)
        run.summary = _run_import(run, actor=request.user, dry_run=True)
        run.save(update_fields=["summary"])
        return redirect("import-preview", pk=run.pk)
    recent = ImportRun.objects.select_related("created_by").defer("content")[:10]
    return render(request, "inventory/import_upload.html",
                  {"form": form, "recent": recent, "max_bytes": settings.FLEET_IMPORT_MAX_BYTES})


@transaction.atomic
def _confirm(request: HtmxHttpRequest, pk: int) -> None:
    """Apply a previewed upload once: the row lock makes a double-clicked confirm wait, then see it applied."""
    run = ImportRun.objects.select_for_update().get(pk=pk)
    if run.status != ImportRun.Status.PREVIEW:
        messages.error(request, "This import was already confirmed.")
        return
    if run.summary.get("errors"):
        messages.error(request, "The preview found errors: fix the file and upload it again.")
        return
    summary = _run_import(run, actor=request.user, dry_run=False)
    run.summary = summary
    run.status = ImportRun.Status.APPLIED if summary["applied"] else ImportRun.Status.FAILED
    run.save(update_fields=["summary", "status"])
    if summary["applied"]:
        messages.success(request, f"Imported {run.filename}: {summary['created']} created, "
                                  f"{summary['updated']} updated, {summary['moved']} moved.")
    else:
        messages.error(request, "The import was refused (see the errors below); nothing was changed.")


@operator_required
def import_preview(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """GET: what the import would do. POST: do it (refused when the preview found errors)."""
    run = get_object_or_404(ImportRun.objects.select_related("created_by").defer("content"), pk=pk)
    if request.method == "POST":
        _confirm(request, run.pk)
        return redirect("import-preview", pk=run.pk)
    summary = run.summary
    context = {
        "run": run,
        "summary": summary,
        "rows": [row for row in summary.get("rows", []) if row.get("action") != "unchanged"],
        "can_confirm": run.status == ImportRun.Status.PREVIEW and not summary.get("errors"),
    }
    return render(request, "inventory/import_preview.html", context)
