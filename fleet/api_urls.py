"""``/api/v1/``: every app's endpoints in one ``api`` namespace (``api:gpu-list``, ``api:rollout-detail``), so
they never shadow the HTML pages' names. The project package composes them; apps do not know each other."""

from firmware import api_urls as firmware_api
from inventory import api_urls as inventory_api
from inventory.telemetry import api_health_urls as health_api
from inventory.telemetry import api_urls as telemetry_api

app_name = "api"

urlpatterns = [*inventory_api.urlpatterns, *telemetry_api.urlpatterns, *health_api.urlpatterns, *firmware_api.urlpatterns]
