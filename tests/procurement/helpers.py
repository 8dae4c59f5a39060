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


def expected_verdict(rows: list[dict], target: float) -> str:
    """Which won over ``rows`` (backtest origins), counted here from their stock and demand: the start of the
    sentence the page must say, with the difference in mean stock when a rule won."""
    demand = [r["demand"] for r in rows]

    def fill_and_stock(stock: list[int]) -> tuple[float, float]:
        covered = sum(min(s, d) for s, d in zip(stock, demand, strict=True))
        return (covered / sum(demand) if sum(demand) else 1.0), sum(stock) / len(stock)

    policy = fill_and_stock([r["recommended"] for r in rows])
    rules = {k: fill_and_stock([r["rules"][k] for r in rows]) for k in ("1%", "2%", "3%", "4%", "5%")}
    beaten = sorted((s, k) for k, (f, s) in rules.items() if f >= target and s < policy[1])
    if beaten:
        stock, k = beaten[0]
        return f"The {k} rule won: fill {rules[k][0]:.3f} with mean stock {stock:.1f}, {policy[1] - stock:.1f} less"
    return "The policy won" if policy[0] >= target else "Short of the target"
