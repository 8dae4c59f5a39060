"""``/api/v1/``: every app's endpoints in one ``api`` namespace (``api:gpu-list``, ``api:rollout-detail``), so
they never shadow the HTML pages' names. The project package composes them; apps do not know each other."""

from django.urls import path
from rest_framework.routers import DefaultRouter
from rest_framework.urlpatterns import format_suffix_patterns

from acceptance import api_urls as acceptance_api
from decommission import api_urls as decommission_api
from firmware import api_urls as firmware_api
from fleet import api
from inventory import api_urls as inventory_api
from procurement import api_urls as procurement_api
from telemetry import api_health_urls as health_api
from telemetry import api_urls as telemetry_api

app_name = "api"

# fleet's own resources: the audit trail and background jobs.
router = DefaultRouter()
router.include_root_view = False
router.register("audit-events", api.AuditEventViewSet, basename="auditevent")
router.register("jobs", api.JobViewSet, basename="job")

# The browsable root lists the routed resources: inventory's, then fleet's.
root = DefaultRouter.APIRootView.as_view(api_root_dict={
    prefix: f"{basename}-list" for prefix, _viewset, basename in [*inventory_api.router.registry, *router.registry]})

urlpatterns = [*inventory_api.urlpatterns, *router.urls, *format_suffix_patterns([path("", root, name="api-root")]),
               *telemetry_api.urlpatterns, *health_api.urlpatterns, *firmware_api.urlpatterns,
               *procurement_api.urlpatterns, *decommission_api.urlpatterns,
               *acceptance_api.urlpatterns]
