"""GPUs: the list (the UI's filters, one SQL query per page), edits of identity and asset fields, and the
explicit lifecycle and placement actions, each a call to one service."""

from __future__ import annotations

from typing import Any

import django_filters
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.http import QueryDict, StreamingHttpResponse
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from fleet.api import AuditedModelViewSet, JobSerializer, validation_detail
from fleet.http import streaming_csv_response
from fleet.models import Job
from fleet.roles import OPERATOR
from inventory import selectors, services
from inventory.api.serializers import GPU_COLUMNS, GpuSerializer, gpu_document
from inventory.filters import GpuFilter, gpu_ids_matching
from inventory.identity import normalize_pci_bus_id
from inventory.importers import gpu_csv_rows
from inventory.models import Gpu, GpuState, Server

# --- action payloads -------------------------------------------------------------------------------------


class TransitionSerializer(serializers.Serializer):
    to_state = serializers.ChoiceField(choices=GpuState.choices)
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class GpuSelectionField(serializers.Field):
    """A list of GPU ids, or a filter: an object of the GPU list's query parameters
    (``{"site": "fra1", "state": ["in_service"]}``). Validated into a sorted list of GPU ids."""

    default_error_messages = {
        "invalid": "Give a list of GPU ids or a filter object.",
        "unknown_keys": "Unknown filter {keys}; filters are {allowed}.",
        "unknown_ids": "No GPU has id {ids}.",
    }

    def to_internal_value(self, data: Any) -> list[int]:
        if isinstance(data, list):
            return self._ids(data)
        if isinstance(data, dict):
            return self._filtered(data)
        self.fail("invalid")

    def to_representation(self, value: Any) -> Any:
        return value

    def _ids(self, data: list[Any]) -> list[int]:
        try:
            ids = sorted({int(v) for v in data})
        except (TypeError, ValueError):
            raise serializers.ValidationError("GPU ids must be integers.") from None
        missing = set(ids) - set(Gpu.objects.filter(id__in=ids).values_list("id", flat=True))
        if missing:
            self.fail("unknown_ids", ids=", ".join(map(str, sorted(missing)[:20])))
        return ids

    def _filtered(self, data: dict[str, Any]) -> list[int]:
        unknown = set(data) - set(GpuFilter.base_filters)
        if unknown:  # a misspelt filter must not widen the selection to the whole fleet
            self.fail("unknown_keys", keys=", ".join(sorted(unknown)), allowed=", ".join(GpuFilter.base_filters))
        params = QueryDict(mutable=True)
        for name, value in data.items():
            values = value if isinstance(value, list) else [value]
            params.setlist(name, [str(v) for v in values if v is not None and v != ""])
        try:
            return gpu_ids_matching(params)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(validation_detail(exc)) from None


def _filter_schema(name: str, f: django_filters.Filter) -> dict[str, Any]:
    if isinstance(f, django_filters.BooleanFilter):
        return {"type": "boolean", "description": str(f.label or name)}
    if isinstance(f, django_filters.MultipleChoiceFilter):
        return {"type": "array", "items": {"type": "string", "enum": [c for c, _ in f.extra["choices"]]}}
    if isinstance(f, django_filters.ModelChoiceFilter):
        key = f.extra.get("to_field_name")
        return {"type": "string", "description": f"{name} {key}"} if key else {"type": "integer",
                                                                             "description": f"{name} id"}
    return {"type": "string", "description": str(f.label or name)}


class _GpuSelectionSchema(OpenApiSerializerFieldExtension):
    target_class = GpuSelectionField

    def map_serializer_field(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        properties = {name: _filter_schema(name, f) for name, f in GpuFilter.base_filters.items()}
        return {"oneOf": [
            {"type": "array", "items": {"type": "integer"}, "description": "GPU ids"},
            {"type": "object", "properties": properties, "additionalProperties": False,
             "description": "The GPU list's filters (query parameters of GET /api/v1/gpus/)"},
        ]}


class BulkTransitionSerializer(serializers.Serializer):
    gpus = GpuSelectionField()
    to_state = serializers.ChoiceField(choices=GpuState.choices)
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class BulkTransitionResultSerializer(serializers.Serializer):
    done = serializers.IntegerField(help_text="GPUs transitioned")
    to_state = serializers.ChoiceField(choices=GpuState.choices)


@extend_schema_field({"oneOf": [{"type": "integer"}, {"type": "string"}], "nullable": True,
                      "description": "Server id or hostname; null takes the GPU out of its server"})
class ServerLookupField(serializers.Field):
    def to_internal_value(self, data: Any) -> Server:
        value = str(data).strip().lower()
        lookup = {"pk": int(value)} if value.isdigit() else {"hostname": value}
        try:
            return Server.objects.get(**lookup)
        except Server.DoesNotExist:
            raise serializers.ValidationError(f"No server '{data}'.") from None

    def to_representation(self, value: Server) -> str:
        return value.hostname


class MoveSerializer(serializers.Serializer):
    server = ServerLookupField(allow_null=True)
    pci_bus_id = serializers.CharField(max_length=40, required=False, allow_blank=True, default="",
                                       help_text="For example 00000000:18:00.0")
    module_id = serializers.IntegerField(min_value=0, max_value=32767, required=False, allow_null=True,
                                         default=None, help_text="Slot (module id)")
    to_spares = serializers.BooleanField(required=False, default=False,
                                         help_text="Out of the server into the spares pool (server must be null)")
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")

    def validate_pci_bus_id(self, value: str) -> str:
        try:
            return normalize_pci_bus_id(value)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None



# The service names the target fields ``to_*``; the request calls them by their plain names.
_MOVE_FIELDS = {"to_server": "server", "to_pci_bus_id": "pci_bus_id", "to_module_id": "module_id"}


# --- the viewset -----------------------------------------------------------------------------------------


class GpuViewSet(AuditedModelViewSet):
    """GPUs. ``state`` and placement are read-only here: use the transition and move actions."""

    serializer_class = GpuSerializer
    filterset_class = GpuFilter
    create_service = services.record_create
    update_service = services.record_update
    delete_service = services.record_delete
    required_roles = {**AuditedModelViewSet.required_roles, "transition": OPERATOR, "bulk_transition": OPERATOR,
                      "move": OPERATOR}

    def get_queryset(self) -> QuerySet[Gpu]:
        return selectors.gpu_list()

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """One query, no model instances: the page's rows come from ``.values()`` into the same document."""
        rows = self.paginate_queryset(self.filter_queryset(selectors.gpu_rows(GPU_COLUMNS)))
        return self.get_paginated_response([gpu_document(row) for row in rows])

    @extend_schema(
        summary="Export GPUs as CSV",
        description="The GPUs of the list's filters in Fleet's CSV format (the import format), streamed. "
                    "Importing the file back changes nothing.",
        responses={(200, "text/csv"): OpenApiTypes.STR},
    )
    @action(detail=False, methods=["get"], pagination_class=None)
    def export(self, request: Request) -> StreamingHttpResponse:
        return streaming_csv_response(gpu_csv_rows(self.filter_queryset(self.get_queryset())), name="fleet-gpus")

    @extend_schema(
        summary="Move a GPU to another lifecycle state",
        request=TransitionSerializer,
        responses={200: GpuSerializer},
        description="An illegal transition is a 400 naming the current and the requested state.",
    )
    @action(detail=True, methods=["post"])
    def transition(self, request: Request, pk: str | None = None) -> Response:
        gpu = self.get_object()
        payload = TransitionSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        services.gpu_transition(gpu=gpu, actor=request.user, **payload.validated_data)
        return Response(self.get_serializer(gpu).data)

    @extend_schema(
        summary="Transition many GPUs",
        request=BulkTransitionSerializer,
        responses={
            200: OpenApiResponse(BulkTransitionResultSerializer,
                                 description="Done now (up to FLEET_BULK_SYNC_LIMIT GPUs, all or nothing)"),
            202: OpenApiResponse(JobSerializer, description="Queued as a background job: poll its url"),
        },
    )
    @action(detail=False, methods=["post"], url_path="bulk-transition")
    def bulk_transition(self, request: Request) -> Response:
        payload = BulkTransitionSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        result = services.gpu_bulk_transition(gpu_ids=data["gpus"], to_state=data["to_state"],
                                              actor=request.user, reason=data["reason"])
        if isinstance(result, Job):
            body = JobSerializer(result, context=self.get_serializer_context()).data
            return Response(body, status=status.HTTP_202_ACCEPTED, headers={"Location": body["url"]})
        return Response({"done": result.done, "to_state": data["to_state"]})

    @extend_schema(summary="Move a GPU to a server slot, out of its server, or into spares",
                   request=MoveSerializer, responses={200: GpuSerializer})
    @action(detail=True, methods=["post"])
    def move(self, request: Request, pk: str | None = None) -> Response:
        gpu = self.get_object()
        payload = MoveSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        try:
            services.gpu_move(gpu=gpu, to_server=data["server"], to_pci_bus_id=data["pci_bus_id"],
                              to_module_id=data["module_id"], to_spares=data["to_spares"], actor=request.user,
                              reason=data["reason"])
        except DjangoValidationError as exc:
            detail = validation_detail(exc)
            raise serializers.ValidationError({_MOVE_FIELDS.get(k, k): v for k, v in detail.items()}) from exc
        return Response(self.get_serializer(self.get_queryset().get(pk=gpu.pk)).data)
