from django.urls import path

from inventory.telemetry import views

urlpatterns = [
    path("telemetry/heatmap/", views.heatmap, name="telemetry-heatmap"),
    path("telemetry/health/", views.health_list, name="health-list"),
    path("telemetry/sources/", views.source_list, name="telemetry-sources"),
]
