"""The inventory REST API (``/api/v1/``): serializers, filters and ViewSets, routed in ``inventory.api_urls``."""

from inventory.api.gpus import GpuViewSet
from inventory.api.imports import ImportViewSet
from inventory.api.views import (
    FirmwareObservationViewSet,
    GpuModelViewSet,
    GpuMoveViewSet,
    GpuStateChangeViewSet,
    HallViewSet,
    NvlinkDomainViewSet,
    PlatformViewSet,
    PowerFeedViewSet,
    RackViewSet,
    RowViewSet,
    ServerViewSet,
    SiteViewSet,
)

__all__ = [
    "FirmwareObservationViewSet", "GpuModelViewSet", "GpuMoveViewSet", "GpuStateChangeViewSet",
    "GpuViewSet", "HallViewSet", "ImportViewSet", "NvlinkDomainViewSet", "PlatformViewSet",
    "PowerFeedViewSet", "RackViewSet", "RowViewSet", "ServerViewSet", "SiteViewSet",
]
