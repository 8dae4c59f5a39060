from django.urls import path

from telemetry import views, views_sources

urlpatterns = [
    path("telemetry/heatmap/", views.heatmap, name="telemetry-heatmap"),
    path("telemetry/heatmap/gpu/<int:pk>/", views.heatmap_gpu, name="telemetry-heatmap-gpu"),
    path("telemetry/heatmap/rack/<int:pk>/", views.heatmap_rack, name="telemetry-heatmap-rack"),
    path("telemetry/store-coverage/<str:scope>/<int:pk>/", views.store_coverage, name="telemetry-store-coverage"),
    path("telemetry/health/", views.health_list, name="health-list"),
    path("telemetry/health/<int:pk>/<str:action>/", views.health_flag_action, name="health-flag-action"),
    path("telemetry/sources/", views_sources.source_list, name="telemetry-sources"),
    path("telemetry/sources/<int:pk>/toggle/", views_sources.source_toggle, name="telemetry-source-toggle"),
]
