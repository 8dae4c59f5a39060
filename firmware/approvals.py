"""Firmware's items in the approvers' list (``fleet.approvals``): rollouts and baselines awaiting approval."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from firmware.models import Baseline, Rollout, RolloutState
from fleet.approvals import Waiting, approval_source_register


def _rollouts(user: Any, limit: int) -> list[Waiting]:
    qs = (Rollout.objects.filter(state=RolloutState.AWAITING_APPROVAL).select_related("created_by", "bundle")
          .order_by("id")[:limit])
    return [Waiting("Rollouts", f"{r.name} ({r.bundle.name})", reverse("rollout-detail", args=[r.pk]),
                    since=r.created_at, by=r.created_by.get_username() if r.created_by_id else "",
                    note="approve, or approve and start", yours=r.created_by_id == getattr(user, "pk", None))
            for r in qs]


def _baselines(user: Any, limit: int) -> list[Waiting]:
    qs = (Baseline.objects.filter(approved_by__isnull=True, valid_to__isnull=True)
          .select_related("created_by", "bundle", "platform", "pool").order_by("id")[:limit])
    return [Waiting("Baselines", str(b), reverse("firmware-baseline-list"), since=b.valid_from,
                    by=b.created_by.get_username() if b.created_by_id else "", note="approve to put it in force",
                    yours=b.created_by_id == getattr(user, "pk", None)) for b in qs]


def approvals_register() -> None:
    approval_source_register("Rollouts", _rollouts)
    approval_source_register("Baselines", _baselines)
