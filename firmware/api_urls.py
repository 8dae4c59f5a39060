"""Firmware endpoints under ``/api/v1/``; composed into the ``api`` namespace by ``fleet.api_urls``."""

from firmware.api import catalog_urls, rollout_urls

urlpatterns = [*catalog_urls.urlpatterns, *rollout_urls.urlpatterns]
