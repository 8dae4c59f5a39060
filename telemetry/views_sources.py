"""The ingest status page: every telemetry source, how its last ingest went, unknown GPUs, rejected values.
Operators add a scrape source and enable or disable one."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.http import require_POST

from fleet.roles import OPERATOR, has_role
from fleet.views import HtmxHttpRequest, operator_required, render_page, viewer_required
from telemetry import promql, selectors, series_selectors, services
from telemetry.forms import ScrapeSourceForm
from telemetry.models import IngestKind, IngestSource


def _store() -> dict[str, Any] | None:
    """With the prometheus backend: the store's URL (no credentials), its UUID label and the label check."""
    if settings.FLEET_TELEMETRY_BACKEND != "prometheus":
        return None
    parts = urlsplit(settings.FLEET_PROMETHEUS_URL)
    host = parts.hostname or ""
    url = urlunsplit(parts._replace(netloc=f"{host}:{parts.port}" if parts.port else host))  # no user:password@
    store: dict[str, Any] = {"url": url, "label": promql.labels()["uuid"]}
    try:
        store["check"] = series_selectors.store_label_check()
    except promql.StoreUnavailable as exc:
        store["error"] = f"Telemetry history is unavailable: {exc}"
    return store


def _page(request: HtmxHttpRequest, form: ScrapeSourceForm, status: int = 200) -> HttpResponse:
    context = {"sources": selectors.ingest_sources(), "form": form, "store": _store(),
               "can_edit": has_role(request.user, OPERATOR)}
    return render_page(request, "telemetry/source_list.html", "source-table", context, status=status)


@viewer_required
def source_list(request: HtmxHttpRequest) -> HttpResponse:
    if request.method == "POST":
        if not has_role(request.user, OPERATOR):
            raise PermissionDenied("Adding a source needs the operator role.")
        form = ScrapeSourceForm(request.POST)
        if not form.is_valid():
            return _page(request, form, status=400)
        source = services.ingest_source_create(actor=request.user, kind=IngestKind.SCRAPE, **form.cleaned_data)
        messages.success(request, f"Scrape source {source.name} added; it is scraped every {source.interval_s} s.")
        return HttpResponseRedirect(reverse("telemetry-sources"))
    return _page(request, ScrapeSourceForm())


@require_POST
@operator_required
def source_toggle(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    source = get_object_or_404(IngestSource, pk=pk)
    services.ingest_source_update(source=source, actor=request.user, enabled=not source.enabled)
    messages.success(request, f"{source.name} {'enabled' if source.enabled else 'disabled'}.")
    return HttpResponseRedirect(reverse("telemetry-sources"))
