"""A GPU returns to service only after its health checks pass: with a workload scheduler configured, a GPU with an
open drain or RMA health flag may not enter ``in_service`` (its node stays drained; Fleet resumes the node when the
GPU returns). A return check of inventory.scheduler.gpus, registered in ``TelemetryConfig.ready``: it runs only
with a scheduler configured, so without one nothing changes."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from inventory.models import Gpu
from telemetry.models import HealthFlag, HealthSeverity


def gpu_health_passed(gpu: Gpu) -> None:
    flag = (HealthFlag.objects.filter(gpu=gpu, cleared_at__isnull=True,
                                      severity__in=(HealthSeverity.RMA, HealthSeverity.DRAIN))
            .order_by("-raised_at", "-id").first())
    if flag is not None:
        raise ValidationError(f"GPU {gpu.serial or gpu.pk} cannot return to service: its health checks have not "
                              f"passed (open flag #{flag.pk}: {flag.get_kind_display()}, raised "
                              f"{flag.raised_at:%Y-%m-%d %H:%M}). Its node stays drained.", code="health_not_passed")
