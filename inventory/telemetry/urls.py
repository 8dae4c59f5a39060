from django.urls import path

from inventory.telemetry import views, views_sources

urlpatterns = [
    path("telemetry/heatmap/", views.heatmap, name="telemetry-heatmap"),
    path("telemetry/health/", views.health_list, name="health-list"),
    path("telemetry/sources/", views_sources.source_list, name="telemetry-sources"),
    path("telemetry/sources/<int:pk>/toggle/", views_sources.source_toggle, name="telemetry-source-toggle"),
]
