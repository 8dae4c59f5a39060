"""Content negotiation for the API (its own module: DRF imports it while ``rest_framework.views`` loads)."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from rest_framework import exceptions
from rest_framework.negotiation import DefaultContentNegotiation

from fleet.renderers import JSONRenderer

JSON_RENDERER = JSONRenderer()


class StrictContentNegotiation(DefaultContentNegotiation):
    """``?format=`` naming no renderer of the view is a 400 naming ``format`` (DRF answers a bare 404,
    rendered by whatever renderer came first: a Python repr as text/plain on a text endpoint). A format
    suffix in the path (``/gpus/1.xml``) naming none stays a 404: that URL names nothing."""

    suffix: str | None = None

    def select_renderer(self, request: Any, renderers: list[Any], format_suffix: str | None = None) -> Any:
        if request.method == "OPTIONS":  # the route's description is JSON, whatever its answers render as
            return JSON_RENDERER, JSON_RENDERER.media_type
        self.suffix = format_suffix
        return super().select_renderer(request, renderers, format_suffix)

    def filter_renderers(self, renderers: list[Any], format: str) -> list[Any]:  # noqa: A002 - DRF's name
        matched = [renderer for renderer in renderers if renderer.format == format]
        if not matched:
            if self.suffix:
                raise Http404
            known = ", ".join(sorted({str(renderer.format) for renderer in renderers}))
            raise exceptions.ValidationError({"format": [f"Unknown format {format!r}; one of {known}."]})
        return matched
