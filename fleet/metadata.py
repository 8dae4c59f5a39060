"""``OPTIONS`` under ``/api/`` (DRF's metadata), safe for every view (its own module: DRF loads it from
settings while drf-spectacular, which fleet.api_errors imports, is still loading)."""

from __future__ import annotations

from typing import Any

from rest_framework import generics
from rest_framework.metadata import SimpleMetadata


class FleetMetadata(SimpleMetadata):
    """DRF's description, minus the fields of write actions for a view that declares no serializer (an action
    taking no body, such as ``POST .../agent-token/``): DRF would fail asking it for one (a 500)."""

    def determine_actions(self, request: Any, view: Any) -> dict[str, Any]:
        if isinstance(view, generics.GenericAPIView) and getattr(view, "serializer_class", None) is None and \
                type(view).get_serializer_class is generics.GenericAPIView.get_serializer_class:
            return {}
        return super().determine_actions(request, view)
