"""Catalog, baselines, compliance, drift and labels under ``/api/v1/`` (the ``api`` namespace:
``api:release-list``, ``api:firmware-drift``, ``api:firmware-labels``)."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from firmware.api import catalog as api

router = DefaultRouter()
router.include_root_view = False
router.register("firmware/components", api.ComponentSpecViewSet, basename="componentspec")
router.register("releases", api.ReleaseViewSet, basename="release")
router.register("bundles", api.BundleViewSet, basename="bundle")
router.register("baselines", api.BaselineViewSet, basename="baseline")
router.register("pools", api.PoolViewSet, basename="pool")
router.register("maintenance-windows", api.MaintenanceWindowViewSet, basename="maintenancewindow")
router.register("compliance", api.ComplianceViewSet, basename="compliance")

urlpatterns = [
    path("firmware/drift/", api.DriftReportView.as_view(), name="firmware-drift"),
    path("firmware/labels/", api.LabelsView.as_view(), name="firmware-labels"),
    *router.urls,
]
