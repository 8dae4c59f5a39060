"""Inventory endpoints under ``/api/v1/``; composed into the ``api`` namespace by ``fleet.api_urls``."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from fleet.auth_views import TokenObtainView
from inventory import api

router = DefaultRouter()
router.include_root_view = False  # the /api/v1/ root is fleet.api_urls'
router.register("sites", api.SiteViewSet, basename="site")
router.register("halls", api.HallViewSet, basename="hall")
router.register("rows", api.RowViewSet, basename="row")
router.register("racks", api.RackViewSet, basename="rack")
router.register("power-feeds", api.PowerFeedViewSet, basename="powerfeed")
router.register("nvlink-domains", api.NvlinkDomainViewSet, basename="nvlinkdomain")
router.register("gpu-models", api.GpuModelViewSet, basename="gpumodel")
router.register("platforms", api.PlatformViewSet, basename="platform")
router.register("servers", api.ServerViewSet, basename="server")
router.register("gpus", api.GpuViewSet, basename="gpu")
router.register("gpu-state-changes", api.GpuStateChangeViewSet, basename="gpustatechange")
router.register("gpu-moves", api.GpuMoveViewSet, basename="gpumove")
router.register("firmware-observations", api.FirmwareObservationViewSet, basename="firmwareobservation")
router.register("imports", api.ImportViewSet, basename="import")

urlpatterns = [
    path("auth/token/", TokenObtainView.as_view(), name="token"),
    *router.urls,
]
