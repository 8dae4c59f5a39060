"""``/api/v1/telemetry/health-flags/``: composed into the ``api`` namespace by ``fleet.api_urls``."""

from rest_framework.routers import SimpleRouter

from telemetry.api_health import HealthFlagViewSet

router = SimpleRouter()
router.register("telemetry/health-flags", HealthFlagViewSet, basename="healthflag")

urlpatterns = router.urls
