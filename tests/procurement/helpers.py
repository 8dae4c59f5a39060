"""Procurement test data built through the services."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from fleet.audit import SYSTEM
from procurement.models import OrderLine, Vendor
from procurement.services import orders
from tests import factories


def vendor(name: str = "Supermicro") -> Vendor:
    return Vendor.objects.get_or_create(name=name)[0]


def order(quantity: int = 4, price: str = "30000", reference: str = "PO-1", actor=SYSTEM, ordered_on=None):
    ordered_on = ordered_on or dt.date(2026, 1, 5)
    return orders.order_create(vendor=vendor(), reference=reference, ordered_on=ordered_on,
                               promised_on=ordered_on + dt.timedelta(days=60), actor=actor,
                               lines=[{"gpu_model": factories.gpu_model(), "quantity": quantity,
                                       "unit_price": Decimal(price), "warranty_months": 36}])


def line(po) -> OrderLine:
    return po.lines.get()
