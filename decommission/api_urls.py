"""Decommission endpoints under ``/api/v1/decommission/``; composed into the ``api`` namespace by ``fleet.api_urls``
(``api:decommission-request-list``, ``api:decommission-certificate-download``, ``api:decommission-agent-results``)."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from decommission.api import views

router = DefaultRouter()
router.include_root_view = False
router.register("decommission/requests", views.RequestViewSet, basename="decommission-request")
router.register("decommission/events", views.EventViewSet, basename="decommission-event")
router.register("decommission/certificates", views.CertificateViewSet, basename="decommission-certificate")
router.register("decommission/processors", views.ProcessorViewSet, basename="decommission-processor")
router.register("decommission/policy", views.PolicyViewSet, basename="decommission-policy")
router.register("decommission/assets", views.AssetTokenViewSet, basename="decommission-asset")

urlpatterns = [
    path("decommission/agent/results/", views.AgentResultsViewSet.as_view({"post": "create"}),
         name="decommission-agent-results"),
    path("decommission/keys/", views.KeysView.as_view(), name="decommission-key-list"),
    *router.urls,
]
