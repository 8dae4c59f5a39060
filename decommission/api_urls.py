"""Decommission endpoints under ``/api/v1/``; composed into the ``api`` namespace by ``fleet.api_urls``."""

urlpatterns = []
