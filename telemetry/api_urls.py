"""Telemetry endpoints under ``/api/v1/``; composed into the ``api`` namespace by ``fleet.api_urls``."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from telemetry import api

router = SimpleRouter()
router.register("telemetry/sources", api.IngestSourceViewSet, basename="telemetry-source")
router.register("telemetry/xid-events", api.XidEventViewSet, basename="xid-event")

urlpatterns = [
    path("telemetry/prometheus", api.PrometheusPushView.as_view(), name="telemetry-prometheus"),
    path("telemetry/ingest", api.IngestView.as_view(), name="telemetry-ingest"),
    path("telemetry/history/", api.HistoryView.as_view(), name="telemetry-history"),
    path("telemetry/heatmap/", api.HeatmapView.as_view(), name="telemetry-heatmap"),
    path("telemetry/heatmap/frames/", api.HeatmapFramesView.as_view(), name="telemetry-heatmap-frames"),
    *router.urls,
]
