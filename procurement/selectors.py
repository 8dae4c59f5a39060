"""Every read a procurement page or endpoint needs, ready to render (joins done, deterministic order)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from django.db.models import Avg, Count, F, Min, Q, QuerySet, Sum

from inventory.models import GpuModel, GpuState
from procurement.models import (
    Delivery,
    DemandPoint,
    Failure,
    Forecast,
    ForecastRun,
    GpuAsset,
    ModelEconomics,
    OrderLine,
    OrderStatus,
    PurchaseOrder,
    RmaCase,
    ServerAsset,
    SparesPool,
    Vendor,
)


def vendor_list() -> QuerySet[Vendor]:
    return Vendor.objects.order_by("name", "id")


def order_list() -> QuerySet[PurchaseOrder]:
    return (PurchaseOrder.objects.select_related("vendor", "created_by", "approved_by")
            .prefetch_related("lines__gpu_model", "lines__platform").order_by("-ordered_on", "-id"))


def order_lines(*, order: PurchaseOrder) -> list[dict[str, Any]]:
    """Each line with its received and open quantity."""
    received = dict(GpuAsset.objects.filter(order_line__order=order).values("order_line")
                    .annotate(n=Count("id")).values_list("order_line", "n"))
    received_srv = dict(OrderLine.objects.filter(order=order).annotate(n=Count("servers"))
                        .values_list("id", "n"))
    out = []
    for line in order.lines.select_related("gpu_model", "platform").order_by("id"):
        got = received.get(line.pk, 0) + received_srv.get(line.pk, 0)
        out.append({"line": line, "received": got, "open": max(line.quantity - got, 0)})
    return out


def delivery_list(*, order: PurchaseOrder | None = None) -> QuerySet[Delivery]:
    qs = Delivery.objects.select_related("order__vendor", "site").annotate(gpu_count=Count("gpus", distinct=True))
    if order is not None:
        qs = qs.filter(order=order)
    return qs.order_by("-received_on", "-id")


DELIVERY_ITEMS_SHOWN = 200


def delivery_items(deliveries: QuerySet[Delivery]) -> list[Delivery]:
    """Deliveries with what each created: ``d.created_gpus`` and ``d.created_servers`` (the first
    :data:`DELIVERY_ITEMS_SHOWN` of each, by id), two queries for the lot."""
    deliveries = list(deliveries)
    ids = [d.pk for d in deliveries]
    gpus: dict[int, list[Any]] = {}
    for asset in (GpuAsset.objects.filter(delivery_id__in=ids).select_related("gpu").order_by("gpu__serial", "id")
                  [:DELIVERY_ITEMS_SHOWN * max(len(ids), 1)]):
        gpus.setdefault(asset.delivery_id, []).append(asset.gpu)
    servers: dict[int, list[Any]] = {}
    for asset in (ServerAsset.objects.filter(delivery_id__in=ids).select_related("server").order_by("id")
                  [:DELIVERY_ITEMS_SHOWN * max(len(ids), 1)]):
        servers.setdefault(asset.delivery_id, []).append(asset.server)
    for d in deliveries:
        d.created_gpus = gpus.get(d.pk, [])[:DELIVERY_ITEMS_SHOWN]  # type: ignore[attr-defined]
        d.created_servers = servers.get(d.pk, [])[:DELIVERY_ITEMS_SHOWN]  # type: ignore[attr-defined]
    return deliveries


def lead_time_observed() -> list[dict[str, Any]]:
    """Observed lead time per vendor and model: promised vs received (days from order), partial deliveries."""
    rows = (GpuAsset.objects.filter(delivery__isnull=False)
            .values("order_line__order__vendor__name", "model__name")
            .annotate(promised=Avg(F("order_line__order__promised_on") - F("order_line__order__ordered_on")),
                      received=Avg(F("delivery__received_on") - F("order_line__order__ordered_on")),
                      late=Avg(F("delivery__received_on") - F("order_line__order__promised_on")),
                      deliveries=Count("delivery", distinct=True), gpus=Count("id"))
            .order_by("order_line__order__vendor__name", "model__name"))
    return [{"vendor": r["order_line__order__vendor__name"], "model": r["model__name"],
             "promised_days": _days(r["promised"]), "received_days": _days(r["received"]),
             "late_days": _days(r["late"]), "deliveries": r["deliveries"], "gpus": r["gpus"]} for r in rows]


def _days(value: Any) -> float | None:
    if value is None:
        return None
    return round(value.total_seconds() / 86400, 1) if isinstance(value, dt.timedelta) else float(value)


def rma_list() -> QuerySet[RmaCase]:
    return (RmaCase.objects.select_related("gpu__model", "vendor", "replacement", "failure__gpu", "failure__model",
                                           "failure__site").order_by("-opened_on", "-id"))


def rma_turnaround() -> list[dict[str, Any]]:
    """Turnaround per vendor and model: days from opening to replacement, and open cases."""
    rows = (RmaCase.objects.values("vendor__name", "gpu__model__name")
            .annotate(cases=Count("id"), open=Count("id", filter=~Q(status="closed")),
                      replaced=Count("id", filter=Q(replaced_on__isnull=False)),
                      turnaround=Avg(F("replaced_on") - F("opened_on"), filter=Q(replaced_on__isnull=False)))
            .order_by("vendor__name", "gpu__model__name"))
    return [{"vendor": r["vendor__name"], "model": r["gpu__model__name"], "cases": r["cases"], "open": r["open"],
             "replaced": r["replaced"], "turnaround_days": _days(r["turnaround"])} for r in rows]


def failure_list() -> QuerySet[Failure]:
    return Failure.objects.select_related("gpu", "model", "site").order_by("-failed_on", "-id")


def warranty_list() -> QuerySet[GpuAsset]:
    return GpuAsset.objects.select_related("gpu", "model", "site").filter(removed_on__isnull=True).order_by(
        "warranty_end", "id")


def warranty_summary(*, qs: QuerySet[GpuAsset]) -> list[dict[str, Any]]:
    return list(qs.values("site__code", "model__name").annotate(gpus=Count("id"), first=Min("warranty_end"))
                .order_by("site__code", "model__name"))


def pool_list() -> QuerySet[SparesPool]:
    return SparesPool.objects.prefetch_related("sites").order_by("name", "id")


def latest_run(*, as_of: dt.date | None = None) -> ForecastRun | None:
    qs = ForecastRun.objects.order_by("-created_at", "-id")
    return (qs.filter(as_of=as_of) if as_of else qs).first()


def forecast_list(*, run: ForecastRun | None = None) -> QuerySet[Forecast]:
    qs = Forecast.objects.select_related("gpu_model", "site", "pool", "run")
    if run is not None:
        qs = qs.filter(run=run)
    return qs.order_by("gpu_model__name", "scope", "site__code", "pool__name", "id")


def forecast_history(*, forecast: Forecast, limit: int = 30) -> list[Forecast]:
    """Past runs' forecasts of the same scope, newest first: what was recommended, as it was."""
    return list(Forecast.objects.filter(scope=forecast.scope, gpu_model=forecast.gpu_model, site=forecast.site,
                                        pool=forecast.pool).select_related("run")
                .order_by("-run__created_at", "-id")[:limit])


# --- refresh and capacity ---------------------------------------------------------------------------------

HOURS_PER_YEAR = Decimal("8766")


def cost_per_gpu_year() -> list[dict[str, Any]]:
    """Per model: capex share + energy + maintenance + spares held, per GPU-year, and performance per dollar."""
    prices = dict(OrderLine.objects.filter(gpu_model__isnull=False).values("gpu_model")
                  .annotate(p=Avg("unit_price")).values_list("gpu_model", "p"))
    pue_price = GpuAsset.objects.filter(removed_on__isnull=True, site__isnull=False).aggregate(
        pue=Avg("site__pue"), kwh=Avg("site__electricity_price_kwh"))
    pue = Decimal(str(pue_price["pue"] or "1.3"))
    kwh = Decimal(str(pue_price["kwh"] or "0.10"))
    installed = dict(GpuAsset.objects.filter(removed_on__isnull=True).values("model").annotate(n=Count("id"))
                     .values_list("model", "n"))
    run = latest_run()
    spares = dict(Forecast.objects.filter(run=run, scope="model").values_list("gpu_model", "spares")) if run else {}
    out = []
    for model in GpuModel.objects.select_related("economics").order_by("name", "id"):
        econ = getattr(model, "economics", None) or ModelEconomics(gpu_model=model)
        price = econ.purchase_price or prices.get(model.pk)
        if price is None:
            continue
        allin = Decimal(price) * econ.all_in_factor
        capex = allin / econ.depreciation_years
        watts = Decimal(econ.measured_power_w or model.tdp_w or 700)
        energy = watts * econ.load_factor * pue * HOURS_PER_YEAR / 1000 * kwh
        maintenance = econ.maintenance_share * allin
        n = installed.get(model.pk, 0)
        spares_share = Decimal(spares.get(model.pk, 0)) / n if n else Decimal(0)
        spares_cost = spares_share * allin / econ.depreciation_years
        total = capex + energy + maintenance + spares_cost
        out.append({"model": model, "price": Decimal(price), "capex": capex, "energy": energy,
                    "maintenance": maintenance, "spares": spares_cost, "total": total, "installed": n,
                    "power_w": int(watts), "relative_performance": econ.relative_performance,
                    "performance_note": econ.performance_note,
                    "perf_per_kusd": econ.relative_performance / total * 1000 if total else None})
    base = out[0]["perf_per_kusd"] if out and out[0]["perf_per_kusd"] else None
    for row in out:
        row["perf_per_dollar_vs_first"] = (row["perf_per_kusd"] / base) if base and row["perf_per_kusd"] else None
    return out


def refresh_payoff(*, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each pair (older, newer) by relative performance: the year in which replacing the older model's
    capacity with the newer pays off (the newer's cost per unit of performance, capex included, against the
    older's running cost only, once its capex is sunk)."""
    out = []
    for old in rows:
        for new in rows:
            if new["relative_performance"] <= old["relative_performance"]:
                continue
            old_running = (old["energy"] + old["maintenance"]) / old["relative_performance"]
            new_full = new["total"] / new["relative_performance"]
            old_full = old["total"] / old["relative_performance"]
            if new_full < old_full and new_full < old_running:
                verdict = "now"
            elif new_full < old_full:
                verdict = "when the older generation's capex is written off"
            else:
                verdict = "not on cost: cascade the older to inference"
            out.append({"old": old["model"], "new": new["model"], "old_cost_per_perf": old_full,
                        "old_running_per_perf": old_running, "new_cost_per_perf": new_full, "verdict": verdict})
    return out


def cascade_plan(*, today: dt.date, training_years: int = 3) -> list[dict[str, Any]]:
    """GPUs in service older than ``training_years`` (cascade from training to inference) and boards with a
    failure history (keep out of large training jobs), per site and model."""
    cutoff = dt.date(today.year - training_years, today.month, min(today.day, 28))
    qs = GpuAsset.objects.filter(removed_on__isnull=True, gpu__state=GpuState.IN_SERVICE)
    rows = (qs.values("site__code", "model__name")
            .annotate(in_service=Count("id"), aged=Count("id", filter=Q(in_service_on__lt=cutoff)),
                      failed_before=Count("id", filter=Q(gpu__failures__isnull=False), distinct=True))
            .order_by("site__code", "model__name"))
    return list(rows)


def capacity_plan(*, today: dt.date, months: int = 18, warranty_retire: bool = True) -> list[dict[str, Any]]:
    """Month by month for ``months`` ahead: installed, arriving (open order lines by promised date), retiring
    (warranty ends), against the planners' demand curve."""
    live = GpuAsset.objects.filter(removed_on__isnull=True)
    installed = live.count()
    opens = []
    for order in PurchaseOrder.objects.filter(status=OrderStatus.APPROVED).prefetch_related("lines"):
        got = dict(GpuAsset.objects.filter(order_line__order=order).values("order_line")
                   .annotate(n=Count("id")).values_list("order_line", "n"))
        opens.extend((order.promised_on, max(line.quantity - got.get(line.pk, 0), 0))
                     for line in order.lines.all() if line.gpu_model_id)
    demand = {d.month.replace(day=1): d.gpus for d in DemandPoint.objects.all()}
    out, level = [], installed
    y, m = today.year, today.month
    for _ in range(months):
        start = dt.date(y, m, 1)
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
        end = dt.date(y, m, 1)
        arriving = sum(q for when, q in opens if (start <= when < end) or (when < today and start.month ==
                                                                            today.month and start.year == today.year))
        retiring = live.filter(warranty_end__gte=start, warranty_end__lt=end).count() if warranty_retire else 0
        level += arriving - retiring
        out.append({"month": start, "arriving": arriving, "retiring": retiring, "installed": level,
                    "demand": demand.get(start)})
    return out


def installed_total() -> int:
    return GpuAsset.objects.filter(removed_on__isnull=True).aggregate(n=Count("id"))["n"] or 0


def spend_by_vendor() -> list[dict[str, Any]]:
    return list(OrderLine.objects.values("order__vendor__name", "order__currency")
                .annotate(total=Sum(F("quantity") * F("unit_price"))).order_by("order__vendor__name"))
