"""Decommission's items in the approvers' list (``fleet.approvals``): requests at an approver's step."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from decommission.models import DecommissionRequest, RequestState
from fleet.approvals import Waiting, approval_source_register

# States whose next step is an approver's, and what it is.
APPROVER_STEPS = {
    RequestState.REQUESTED: "approve the request",
    RequestState.VERIFYING: "validate the evidence",
    RequestState.CERTIFIED: "release the hardware",
    RequestState.DISPOSED: "close the request",
}


def _requests(user: Any, limit: int) -> list[Waiting]:
    qs = (DecommissionRequest.objects.filter(state__in=list(APPROVER_STEPS)).select_related("requested_by")
          .order_by("id")[:limit])
    return [Waiting("Decommission requests", f"{r}: {r.reason}"[:120],
                    reverse("decommission:request-detail", args=[r.pk]),
                    by=r.requested_by.get_username() if r.requested_by_id else "", note=APPROVER_STEPS[r.state],
                    yours=r.state == RequestState.REQUESTED and r.requested_by_id == getattr(user, "pk", None))
            for r in qs]


def approvals_register() -> None:
    approval_source_register("Decommission requests", _requests)
