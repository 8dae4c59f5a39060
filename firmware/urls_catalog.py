from django.urls import path

from firmware.views import catalog

urlpatterns = [
    path("firmware/", catalog.firmware_home, name="firmware-home"),
    path("firmware/releases/", catalog.release_list, name="firmware-release-list"),
    path("firmware/releases/new/", catalog.release_create, name="firmware-release-create"),
    path("firmware/releases/<int:pk>/rollout/", catalog.release_rollout, name="firmware-release-rollout"),
    path("firmware/releases/<int:pk>/", catalog.release_detail, name="firmware-release-detail"),
    path("firmware/releases/<int:pk>/channel/", catalog.release_channel, name="firmware-release-channel"),
    path("firmware/bundles/", catalog.bundle_list, name="firmware-bundle-list"),
    path("firmware/bundles/new/", catalog.bundle_create, name="firmware-bundle-create"),
    path("firmware/bundles/<int:pk>/", catalog.bundle_detail, name="firmware-bundle-detail"),
    path("firmware/baselines/", catalog.baseline_list, name="firmware-baseline-list"),
    path("firmware/baselines/<int:pk>/<slug:action>/", catalog.baseline_action, name="firmware-baseline-action"),
    path("firmware/pools/", catalog.pool_list, name="firmware-pool-list"),
    path("firmware/windows/", catalog.window_list, name="firmware-window-list"),
    path("firmware/drift/", catalog.drift_report, name="firmware-drift"),
]
