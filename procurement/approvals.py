"""Procurement's items in the approvers' list (``fleet.approvals``): purchase orders awaiting approval."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from fleet.approvals import Waiting, approval_source_register
from procurement.models import OrderStatus, PurchaseOrder


def _orders(user: Any, limit: int) -> list[Waiting]:
    qs = (PurchaseOrder.objects.filter(status=OrderStatus.AWAITING_APPROVAL).select_related("vendor", "created_by")
          .order_by("id")[:limit])
    return [Waiting("Purchase orders", f"{o.reference} ({o.vendor})", reverse("procurement-order", args=[o.pk]),
                    since=o.ordered_on, by=o.created_by.get_username() if o.created_by_id else "",
                    note="approve or reject with a reason") for o in qs]


def approvals_register() -> None:
    approval_source_register("Purchase orders", _orders)
