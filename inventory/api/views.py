"""ViewSets for locations, catalog, servers, history, audit events and jobs.

Writes go through ``inventory.services`` (audited, with the request's user as actor); reads come from
``inventory.selectors`` with every related object the representation shows already joined.
"""

from __future__ import annotations

from django.db.models import QuerySet

from fleet.api import AuditedModelViewSet, NewestFirstCursorPagination, ReadOnlyViewSet
from inventory import selectors, services
from inventory.api import filters
from inventory.api import serializers as s
from inventory.filters import ServerFilter
from inventory.models import FirmwareObservation, GpuModel, GpuStateChange, Site


class RecordViewSet(AuditedModelViewSet):
    """Locations, catalog entries and servers: plain records, audited create/update/delete."""

    create_service = services.record_create
    update_service = services.record_update
    delete_service = services.record_delete


class SiteViewSet(RecordViewSet):
    queryset = Site.objects.order_by("id")
    serializer_class = s.SiteSerializer
    filterset_fields = ["code"]


class HallViewSet(RecordViewSet):
    serializer_class = s.HallSerializer
    filterset_class = filters.HallFilter

    def get_queryset(self) -> QuerySet:
        return selectors.hall_list()


class RowViewSet(RecordViewSet):
    serializer_class = s.RowSerializer
    filterset_class = filters.RowFilter

    def get_queryset(self) -> QuerySet:
        return selectors.row_list()


class RackViewSet(RecordViewSet):
    serializer_class = s.RackSerializer
    filterset_class = filters.RackFilter

    def get_queryset(self) -> QuerySet:
        return selectors.rack_list()


class PowerFeedViewSet(RecordViewSet):
    serializer_class = s.PowerFeedSerializer
    filterset_class = filters.PowerFeedFilter

    def get_queryset(self) -> QuerySet:
        return selectors.power_feed_list()


class NvlinkDomainViewSet(RecordViewSet):
    serializer_class = s.NvlinkDomainSerializer
    filterset_class = filters.NvlinkDomainFilter

    def get_queryset(self) -> QuerySet:
        return selectors.nvlink_domain_list()


class GpuModelViewSet(RecordViewSet):
    queryset = GpuModel.objects.order_by("id")
    serializer_class = s.GpuModelSerializer
    filterset_fields = ["sku", "name", "architecture"]


class PlatformViewSet(RecordViewSet):
    serializer_class = s.PlatformSerializer
    filterset_fields = ["name", "vendor", "gpu_model"]

    def get_queryset(self) -> QuerySet:
        return selectors.platform_list()


class ServerViewSet(RecordViewSet):
    serializer_class = s.ServerSerializer
    filterset_class = ServerFilter

    def get_queryset(self) -> QuerySet:
        return selectors.server_list()


# --- history: written only by the lifecycle, placement and import services ----------------------------


class GpuStateChangeViewSet(ReadOnlyViewSet):
    """Lifecycle history, newest first."""

    queryset = GpuStateChange.objects.order_by("-id")
    serializer_class = s.GpuStateChangeSerializer
    filterset_class = filters.GpuStateChangeFilter
    pagination_class = NewestFirstCursorPagination


class GpuMoveViewSet(ReadOnlyViewSet):
    """Placement history, newest first."""

    serializer_class = s.GpuMoveSerializer
    filterset_class = filters.GpuMoveFilter
    pagination_class = NewestFirstCursorPagination

    def get_queryset(self) -> QuerySet:
        return selectors.gpu_move_list()


class FirmwareObservationViewSet(ReadOnlyViewSet):
    queryset = FirmwareObservation.objects.order_by("id")
    serializer_class = s.FirmwareObservationSerializer
    filterset_class = filters.FirmwareObservationFilter
