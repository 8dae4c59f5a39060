"""Rollouts under ``/api/v1/`` (the ``api`` namespace: ``api:rollout-list``, ``api:rollout-detail``,
``api:rollout-preview``, ``api:rollout-approve``, ``api:rollout-progress``, ``api:rollout-target-list``)."""

from rest_framework.routers import DefaultRouter

from firmware.api import rollouts as api

router = DefaultRouter()
router.include_root_view = False
router.register("rollouts", api.RolloutViewSet, basename="rollout")
router.register(r"rollouts/(?P<rollout_pk>\d+)/targets", api.RolloutTargetViewSet, basename="rollout-target")

urlpatterns = router.urls
