"""API of the firmware catalog, baselines, compliance, drift and scheduler labels.

Roles: viewers read; operators create and edit releases, bundles, pools, windows and propose baselines;
approvers approve baselines and move releases between channels; admins nothing more here (no deletes:
releases and bundles are history once used)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, renderers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from firmware.api import catalog_serializers as s
from firmware.filters import ComplianceFilter, ReleaseFilter
from firmware.models import (
    Baseline,
)
from firmware.selectors import catalog as selectors
from firmware.selectors import drift as drift_selectors
from firmware.selectors import labels as label_selectors
from firmware.services import catalog as services
from firmware.services.compliance import compliance_recompute
from fleet.api import FleetAutoSchema
from fleet.filters import reject_unknown_params
from fleet.roles import APPROVER, OPERATOR


class _Base(viewsets.GenericViewSet):
    schema = FleetAutoSchema()


class ComponentSpecViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, _Base):
    serializer_class = s.ComponentSpecSerializer

    def get_queryset(self) -> QuerySet:
        return selectors.component_spec_list()


class ReleaseViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                     mixins.UpdateModelMixin, _Base):
    serializer_class = s.ReleaseSerializer
    filterset_class = ReleaseFilter
    http_method_names = ["get", "post", "patch", "head", "options"]
    required_roles = {"channel": APPROVER}

    def get_queryset(self) -> QuerySet:
        return selectors.release_list()

    def perform_create(self, serializer: s.ReleaseSerializer) -> None:
        serializer.instance = services.release_create(actor=self.request.user, **serializer.validated_data)

    def perform_update(self, serializer: s.ReleaseSerializer) -> None:
        services.release_update(release=serializer.instance, actor=self.request.user, **serializer.validated_data)

    @extend_schema(request=s.ChannelSerializer, responses=s.ReleaseSerializer)
    @action(detail=True, methods=["post"])
    def channel(self, request: Request, pk: str | None = None) -> Response:
        """Move the release to testing, stable or revoked (a reason is required to revoke). Approver."""
        body = s.ChannelSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        release = services.release_set_channel(release=self.get_object(), actor=request.user, **body.validated_data)
        return Response(s.ReleaseSerializer(selectors.release_detail(pk=release.pk), context={"request": request}).data)


class BundleViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, _Base):
    serializer_class = s.BundleSerializer
    filterset_fields = ["platform"]

    def get_queryset(self) -> QuerySet:
        return selectors.bundle_list()

    def perform_create(self, serializer: s.BundleSerializer) -> None:
        bundle = services.bundle_create(actor=self.request.user, **serializer.validated_data)
        serializer.instance = selectors.bundle_detail(pk=bundle.pk)


class BaselineViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, _Base):
    serializer_class = s.BaselineSerializer
    filterset_fields = ["platform", "pool", "bundle"]
    required_roles = {"approve": APPROVER, "end": APPROVER}

    def get_queryset(self) -> QuerySet:
        return selectors.baseline_list()

    def perform_create(self, serializer: s.BaselineSerializer) -> None:
        serializer.instance = services.baseline_create(actor=self.request.user, **serializer.validated_data)

    @extend_schema(request=None, responses=s.BaselineSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        """Put the baseline in force. Approver."""
        baseline = services.baseline_approve(baseline=self.get_object(), actor=request.user)
        return Response(s.BaselineSerializer(Baseline.objects.get(pk=baseline.pk)).data)

    @extend_schema(request=s.BaselineEndSerializer, responses=s.BaselineSerializer)
    @action(detail=True, methods=["post"])
    def end(self, request: Request, pk: str | None = None) -> Response:
        """Close the baseline's validity window (default: now), so a successor can start. Approver."""
        body = s.BaselineEndSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        baseline = services.baseline_end(baseline=self.get_object(), actor=request.user, **body.validated_data)
        return Response(s.BaselineSerializer(baseline).data)


class PoolViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                  mixins.UpdateModelMixin, _Base):
    serializer_class = s.PoolSerializer
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self) -> QuerySet:
        return selectors.pool_list().prefetch_related("servers")

    def perform_create(self, serializer: s.PoolSerializer) -> None:
        pool = services.pool_create(actor=self.request.user, **serializer.validated_data)
        serializer.instance = selectors.pool_detail(pk=pool.pk)

    def perform_update(self, serializer: s.PoolSerializer) -> None:
        services.pool_update(pool=serializer.instance, actor=self.request.user, **serializer.validated_data)
        serializer.instance = selectors.pool_detail(pk=serializer.instance.pk)


class MaintenanceWindowViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, _Base):
    serializer_class = s.MaintenanceWindowSerializer
    filterset_fields = ["kind", "site", "pool", "enabled"]

    def get_queryset(self) -> QuerySet:
        return selectors.window_list()

    def perform_create(self, serializer: s.MaintenanceWindowSerializer) -> None:
        data: dict[str, Any] = dict(serializer.validated_data)
        data["timezone_name"] = data.pop("timezone", "UTC")
        serializer.instance = services.window_create(actor=self.request.user, **data)


class ComplianceViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, _Base):
    """One row per expected component of a server, as of the last recompute; a per-GPU component (VBIOS,
    InfoROM) has one row per version the server's GPUs report, with ``gpu_count``."""

    serializer_class = s.ComplianceStatusSerializer
    filterset_class = ComplianceFilter
    required_roles = {"recompute": OPERATOR}

    def get_queryset(self) -> QuerySet:
        return drift_selectors.compliance_list()

    @extend_schema(request=None, responses=s.RecomputeSerializer)
    @action(detail=False, methods=["post"])
    def recompute(self, request: Request) -> Response:
        """Recompute compliance now (the beat does it every 10 minutes). Operator."""
        return Response(compliance_recompute())


class DriftReportView(APIView):
    """Non-compliant servers and GPUs by site, platform, component and status, and the mixed-firmware findings
    (NVLink domains and scheduler pools whose servers do not share one firmware tuple)."""

    schema = FleetAutoSchema()

    @extend_schema(responses=s.DriftReportSerializer)
    def get(self, request: Request) -> Response:
        reject_unknown_params(request.query_params.keys(), ("format",))
        data = {"computed_at": selectors.compliance_computed_at(), "counts": drift_selectors.drift_counts(),
                "mixed_nvlink_domains": drift_selectors.mixed_nvlink_domains(),
                "mixed_pools": drift_selectors.mixed_pools(),
                "rollout_exceptions": drift_selectors.rollout_exceptions()}
        return Response(s.DriftReportSerializer(data).data)


class _PlainText(renderers.BaseRenderer):
    media_type = "text/plain"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        return data if isinstance(data, bytes) else str(data).encode()


class SlurmRenderer(_PlainText):
    format = "slurm"


class KubernetesRenderer(_PlainText):
    format = "kubernetes"


class LabelsView(APIView):
    """Each node's firmware tuple as scheduler labels, streamed as text/plain: ``?format=slurm`` (node
    features, the default) or ``?format=kubernetes`` (``kubectl label`` commands)."""

    schema = FleetAutoSchema()
    renderer_classes = [SlurmRenderer, KubernetesRenderer]

    @extend_schema(parameters=[OpenApiParameter("format", OpenApiTypes.STR, enum=list(label_selectors.FORMATS))],
                   responses={(200, "text/plain"): OpenApiResponse(OpenApiTypes.STR, description="One line per node")})
    def get(self, request: Request) -> StreamingHttpResponse:
        reject_unknown_params(request.query_params.keys(), ("format",))
        fmt = "kubernetes" if request.accepted_renderer.format == "kubernetes" else "slurm"
        response = StreamingHttpResponse(label_selectors.label_lines(fmt), content_type="text/plain; charset=utf-8",
                                         status=status.HTTP_200_OK)
        response["Content-Disposition"] = f'attachment; filename="fleet-firmware-{fmt}.txt"'
        return response
