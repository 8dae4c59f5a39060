"""Procurement endpoints under ``/api/v1/procurement/``; composed into the ``api`` namespace by ``fleet.api_urls``."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from procurement.api import views

router = DefaultRouter()
router.include_root_view = False
router.register("procurement/vendors", views.VendorViewSet, basename="vendor")
router.register("procurement/orders", views.PurchaseOrderViewSet, basename="purchaseorder")
router.register("procurement/deliveries", views.DeliveryViewSet, basename="delivery")
router.register("procurement/warranty", views.WarrantyViewSet, basename="warranty")
router.register("procurement/failures", views.FailureViewSet, basename="failure")
router.register("procurement/rma-cases", views.RmaCaseViewSet, basename="rmacase")
router.register("procurement/pools", views.SparesPoolViewSet, basename="sparespool")
router.register("procurement/forecast-runs", views.ForecastRunViewSet, basename="forecastrun")
router.register("procurement/forecasts", views.ForecastViewSet, basename="forecast")

urlpatterns = [
    *router.urls,
    path("procurement/backtest/", views.BacktestView.as_view(), name="procurement-backtest"),
]
