from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("api/v1/", include("fleet.api_urls")),
    path("", include("fleet.web_urls")),
    path("", include("inventory.urls")),
    path("", include("inventory.telemetry.urls")),
    path("", include("firmware.urls")),
    path("", include("procurement.urls")),
    path("", include("decommission.urls")),
]

# Under /api/, Django's own 404 and 500 (a URL no route matches, such as a non-numeric id) answer JSON.
handler404 = "fleet.api_errors.not_found"
handler500 = "fleet.api_errors.server_error"
