from django.urls import path

from firmware.views import rollouts

urlpatterns = [
    path("firmware/rollouts/", rollouts.rollout_list, name="rollout-list"),
    path("firmware/rollouts/new/", rollouts.rollout_create, name="rollout-create"),
    path("firmware/rollouts/preview/", rollouts.rollout_preview, name="rollout-preview"),
    path("firmware/rollouts/<int:pk>/", rollouts.rollout_detail, name="rollout-detail"),
    path("firmware/rollouts/<int:pk>/progress/", rollouts.rollout_progress, name="rollout-progress"),
    path("firmware/rollouts/<int:pk>/targets/<int:target_pk>/resolve/", rollouts.rollout_target_resolve,
         name="rollout-target-resolve"),
    path("firmware/rollouts/<int:pk>/<slug:action>/", rollouts.rollout_action, name="rollout-action"),
]
