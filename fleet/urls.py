from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from fleet import auth_views as fleet_auth
from fleet import health

# The schema and Swagger UI are for signed-in users (SPECTACULAR_SETTINGS["SERVE_PERMISSIONS"]) unless
# FLEET_PUBLIC_SCHEMA opens them; a browser that is not signed in is sent to the login page.
swagger = SpectacularSwaggerView.as_view(url_name="schema")

urlpatterns = [
    path("login/", fleet_auth.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/", fleet_auth.account, name="account"),
    path("account/tokens/<int:pk>/revoke/", fleet_auth.account_token_revoke, name="account-token-revoke"),
    path("account/legacy-token/revoke/", fleet_auth.account_legacy_token_revoke, name="account-legacy-token-revoke"),
    path("favicon.ico", RedirectView.as_view(url=static("fleet/favicon.svg"), permanent=True)),  # pages without <head>
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.MetricsView.as_view(), name="metrics"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", swagger if settings.FLEET_PUBLIC_SCHEMA else login_required(swagger), name="swagger-ui"),
    path("api/v1/", include("fleet.api_urls")),
    path("", include("fleet.web_urls")),
    path("", include("inventory.urls")),
    path("", include("telemetry.urls")),
    path("", include("firmware.urls")),
    path("", include("procurement.urls")),
    path("", include("decommission.urls")),
    path("", include("acceptance.urls")),
]

# Under /api/, Django's own 400, 404 and 500 (too many form fields, a URL no route matches such as a
# non-numeric id) answer JSON; elsewhere the 500 page names the request id.
handler400 = "fleet.api_errors.bad_request"
handler404 = "fleet.api_errors.not_found"
handler500 = "fleet.views.server_error"
