"""Health flags in the API: ``GET /api/v1/telemetry/health-flags/`` (filters, cursor pages, newest first) and the
one-click actions ``POST .../{id}/drain/`` and ``.../{id}/rma/``, each a call to ``health_flag_act`` (the
inventory's ``gpu_transition``: audited, the lifecycle table decides what is legal)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from fleet.api import NewestFirstCursorPagination, ReadOnlyViewSet, ValidationErrorSerializer
from telemetry.filters import HealthFlagFilter
from telemetry.health import evidence_text, health_flag_act
from telemetry.health_selectors import health_flag_list
from telemetry.models import HealthFlag


class FlagGpuSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    identity = serializers.CharField()
    serial = serializers.CharField(allow_null=True)
    uuid = serializers.CharField(allow_null=True)
    state = serializers.CharField()
    model = serializers.CharField(source="model.name")
    hostname = serializers.SerializerMethodField()
    slot = serializers.IntegerField(source="module_id", allow_null=True)
    site = serializers.SerializerMethodField()
    rack = serializers.SerializerMethodField()

    def get_hostname(self, gpu: Any) -> str | None:
        return gpu.server.hostname if gpu.server_id else None

    def get_site(self, gpu: Any) -> str | None:
        return gpu.site.code if gpu.site_id else None

    @extend_schema_field({"type": "object", "nullable": True,
                          "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}})
    def get_rack(self, gpu: Any) -> dict[str, Any] | None:
        return {"id": gpu.rack_id, "name": gpu.rack.name} if gpu.rack_id else None


class HealthFlagSerializer(serializers.ModelSerializer):
    gpu = FlagGpuSerializer(read_only=True)
    evidence_text = serializers.SerializerMethodField(help_text="The evidence in words")

    class Meta:
        model = HealthFlag
        fields = ["id", "gpu", "kind", "severity", "evidence", "evidence_text", "raised_at", "last_seen_at",
                  "cleared_at"]
        read_only_fields = fields

    def get_evidence_text(self, flag: HealthFlag) -> str:
        return evidence_text(flag.kind, flag.evidence)


_ACTION_DOC = ("Calls the inventory's gpu_transition with a reason quoting the flag's evidence (audited). The "
               "lifecycle decides what is legal: an illegal transition is a 400 naming both states (an in-service "
               "GPU must be drained before it can go to RMA).")


class HealthFlagViewSet(ReadOnlyViewSet):
    """GPUs flagged by the health evaluation, with the evidence."""

    serializer_class = HealthFlagSerializer
    filterset_class = HealthFlagFilter
    pagination_class = NewestFirstCursorPagination

    def get_queryset(self) -> QuerySet[HealthFlag]:
        return health_flag_list(open_only=False)

    def _act(self, request: Request, name: str) -> Response:
        flag = self.get_object()
        health_flag_act(flag=flag, action=name, actor=request.user)
        return Response(self.get_serializer(flag).data)

    @extend_schema(summary="Drain the flagged GPU", request=None, description=_ACTION_DOC,
                   responses={200: HealthFlagSerializer,
                              400: OpenApiResponse(ValidationErrorSerializer, description="Illegal transition")})
    @action(detail=True, methods=["post"])
    def drain(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, "drain")

    @extend_schema(summary="Send the flagged GPU to RMA", request=None, description=_ACTION_DOC,
                   responses={200: HealthFlagSerializer,
                              400: OpenApiResponse(ValidationErrorSerializer, description="Illegal transition")})
    @action(detail=True, methods=["post"])
    def rma(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, "rma")
