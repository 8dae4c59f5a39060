"""Acceptance endpoints under ``/api/v1/acceptance/``; composed into the ``api`` namespace by ``fleet.api_urls``."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from acceptance import api

router = DefaultRouter()
router.include_root_view = False
router.register("acceptance/diag-runs", api.DiagRunViewSet, basename="diagrun")
router.register("acceptance/checks", api.CheckViewSet, basename="acceptancecheck")

urlpatterns = [
    *router.urls,
    path("acceptance/gate/<int:gpu_id>/", api.GateView.as_view(), name="acceptance-gate"),
    path("acceptance/deliveries/<int:pk>/burn-in/", api.DeliveryBurnInView.as_view(), name="acceptance-delivery"),
    path("acceptance/infant-mortality/", api.InfantMortalityView.as_view(), name="acceptance-infant-mortality"),
]
