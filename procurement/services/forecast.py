"""The spares forecast and its backtest against the fleet's own history.

``history_load`` reads the engine's arrays with SQL that only returns rows before ``as_of`` (a removal or failure
on or after it reads as "not yet"); ``forecast_compute`` runs every scope (each site and model, each pool and
model, each model fleet-wide) and stores the run with its inputs; ``backtest_run`` rolls the forecast monthly.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Avg, F, Sum
from django.utils import timezone

from fleet.audit import Actor, actor_fields, audit_write
from fleet.models import AuditAction
from inventory.models import GpuModel, Site
from procurement.forecasting import backtest as bt
from procurement.forecasting.engine import METHODS, NEVER, History, Method, cell_stats, scope_forecast
from procurement.models import (
    Delivery,
    Forecast,
    ForecastRun,
    GpuAsset,
    LeadTime,
    OrderLine,
    OrderStatus,
    RmaCase,
    ScopeKind,
    SparesPool,
)

EPOCH = dt.date(1970, 1, 1)
DEFAULT_LEAD_DAYS = 90


def target_fill_rate() -> float:
    return float(getattr(settings, "PROCUREMENT_TARGET_FILL_RATE", 0.95))


# Days since 1970-01-01 of a date column, and the earlier of two nullable dates, in the database's dialect: the
# history reads are two set-based queries (100,000 boards in a fraction of a second, docs/procurement.md) that
# also run on the embedded SQLite of ``make run``.
_DAYS = {"postgresql": "({} - DATE '1970-01-01')", "sqlite": "CAST(julianday({}) - 2440587.5 AS INTEGER)"}
_EARLIER = {"postgresql": "LEAST({0}, {1})", "sqlite": "MIN(COALESCE({0}, {1}), COALESCE({1}, {0}))"}

_GPUS_SQL = """
SELECT COALESCE(a.site_id, 0), a.model_id, a.batch, {start},
       COALESCE({end}, -1)
FROM procurement_gpuasset a
LEFT JOIN (SELECT gpu_id, MIN(failed_on) AS first_failed FROM procurement_failure WHERE failed_on < %(t)s
           GROUP BY gpu_id) f ON f.gpu_id = a.gpu_id
WHERE a.in_service_on < %(t)s {scope}
"""
_FAILURES_SQL = """
SELECT COALESCE(f.site_id, a.site_id, 0), f.model_id, f.batch, {day}, {start}
FROM procurement_failure f LEFT JOIN procurement_gpuasset a ON a.gpu_id = f.gpu_id
WHERE f.failed_on < %(t)s {scope}
"""


def _history_sql(vendor: str, model_ids: list[int] | None) -> tuple[str, str, dict[str, Any]]:
    days, earlier = _DAYS.get(vendor, _DAYS["postgresql"]).format, _EARLIER.get(vendor, _EARLIER["postgresql"]).format
    params: dict[str, Any] = {}
    scope_g = scope_f = ""
    if model_ids:
        params = {f"m{i}": int(m) for i, m in enumerate(model_ids)}
        listed = ", ".join(f"%({name})s" for name in params)
        scope_g, scope_f = f"AND a.model_id IN ({listed})", f"AND f.model_id IN ({listed})"
    gpus = _GPUS_SQL.format(start=days("a.in_service_on"), scope=scope_g, end=days(
        earlier("CASE WHEN a.removed_on < %(t)s THEN a.removed_on END", "f.first_failed")))
    fails = _FAILURES_SQL.format(day=days("f.failed_on"), start=days("COALESCE(a.in_service_on, f.failed_on)"),
                                 scope=scope_f)
    return gpus, fails, params


def _columns(rows: list[tuple[Any, ...]], n: int) -> list[np.ndarray]:
    if not rows:
        return [np.empty(0, dtype=object) for _ in range(n)]
    return [np.asarray(col) for col in zip(*rows, strict=True)]


def history_load(*, as_of: dt.date, model_ids: list[int] | None = None) -> History:
    """The engine's arrays from the rows before ``as_of`` only (cells are (site id, model id); a removal or
    failure on or after ``as_of`` reads as "still in service")."""
    gpus_sql, fails_sql, params = _history_sql(connection.vendor, model_ids)
    params["t"] = as_of
    with connection.cursor() as cur:
        cur.execute(gpus_sql, params)
        gpus = cur.fetchall()
        cur.execute(fails_sql, params)
        fails = cur.fetchall()
    g_site, g_model, g_batch, g_start, g_end = _columns(gpus, 5)
    f_site, f_model, f_batch, f_day, f_start = _columns(fails, 5)
    n_g = len(gpus)
    keys = np.concatenate([g_site.astype(np.int64) * 2 ** 32 + g_model.astype(np.int64),
                           f_site.astype(np.int64) * 2 ** 32 + f_model.astype(np.int64)])
    cell_keys, cell = np.unique(keys, return_inverse=True)
    names, batch = np.unique(np.concatenate([g_batch.astype(str), f_batch.astype(str)]), return_inverse=True)
    has_blank = len(names) and names[0] == ""
    batch = batch - 1 if has_blank else batch  # "" (no batch) is -1
    cells = [(int(k >> 32) or None, int(k & (2 ** 32 - 1))) for k in cell_keys]
    end = g_end.astype(float)
    end[end < 0] = NEVER
    return History(g_start.astype(float), end, cell[:n_g], batch[:n_g], f_day.astype(float), cell[n_g:],
                   batch[n_g:], f_start.astype(float), cells, [str(n) for n in (names[1:] if has_blank else names)])


def spares_by_cell(*, as_of: dt.date) -> dict[tuple[Any, Any], int]:
    """GPUs in ``spare`` per (home site, model): now, or from the state history for a past date."""
    home = "COALESCE(a.site_id, g.site_id)"
    if as_of > timezone.localdate():
        sql = (f"SELECT {home}, g.model_id, COUNT(*) FROM inventory_gpu g LEFT JOIN procurement_gpuasset a "  # noqa: S608
               "ON a.gpu_id = g.id WHERE g.state = 'spare' GROUP BY 1, 2")
        params: list[Any] = []
    else:
        latest = ("SELECT DISTINCT ON (gpu_id) gpu_id, to_state FROM inventory_gpustatechange WHERE at < %s "
                  "ORDER BY gpu_id, at DESC, id DESC") if connection.vendor == "postgresql" else (
                  "SELECT gpu_id, to_state FROM (SELECT gpu_id, to_state, ROW_NUMBER() OVER (PARTITION BY gpu_id "
                  "ORDER BY at DESC, id DESC) AS n FROM inventory_gpustatechange WHERE at < %s) WHERE n = 1")
        sql = (f"SELECT {home}, g.model_id, COUNT(*) FROM ({latest}) s "  # noqa: S608
               "JOIN inventory_gpu g ON g.id = s.gpu_id LEFT JOIN procurement_gpuasset a ON a.gpu_id = g.id "
               "WHERE s.to_state = 'spare' GROUP BY 1, 2")
        params = [dt.datetime.combine(as_of, dt.time(), tzinfo=dt.UTC)]
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return {(site, model): n for site, model, n in cur.fetchall()}


@dataclass(frozen=True)
class Lead:
    days: int
    source: str


def lead_times() -> dict[int, Lead]:
    """Per model: configured, else observed from deliveries (received - ordered), else RMA turnaround."""
    out: dict[int, Lead] = {}
    for lt in LeadTime.objects.order_by("vendor_id", "id"):
        out.setdefault(lt.gpu_model_id, Lead(lt.days, "configured"))
    observed = (Delivery.objects.filter(gpus__isnull=False).values("gpus__model_id")
                .annotate(days=Avg(F("received_on") - F("order__ordered_on"))))
    for row in observed:
        days = row["days"]
        if row["gpus__model_id"] not in out and days is not None:
            out[row["gpus__model_id"]] = Lead(max(int(getattr(days, "days", days)), 1), "observed")
    rma = (RmaCase.objects.filter(replaced_on__isnull=False).values("gpu__model_id")
           .annotate(days=Avg(F("replaced_on") - F("opened_on"))))
    for row in rma:
        days = row["days"]
        if row["gpu__model_id"] not in out and days is not None:
            out[row["gpu__model_id"]] = Lead(max(int(getattr(days, "days", days)), 1), "rma")
    return out


def on_order_by_model() -> dict[int, int]:
    """Open quantity (ordered, not yet received) of approved GPU order lines, per model."""
    lines = (OrderLine.objects.filter(order__status=OrderStatus.APPROVED, gpu_model__isnull=False)
             .values("gpu_model_id").annotate(q=Sum("quantity")))
    received = dict(GpuAsset.objects.filter(order_line__order__status=OrderStatus.APPROVED)
                    .values("model_id").annotate(n=Sum(1)).values_list("model_id", "n"))
    return {r["gpu_model_id"]: max(r["q"] - received.get(r["gpu_model_id"], 0), 0) for r in lines}


@transaction.atomic
def forecast_compute(*, as_of: dt.date | None = None, method: str = "adaptive", lead_days: int | None = None,
                     actor: Actor) -> ForecastRun:
    """Forecast every scope as of ``as_of`` (default: today, i.e. all history up to yesterday) and store it."""
    started = time.perf_counter()
    as_of = as_of or timezone.localdate() + dt.timedelta(days=1)
    m: Method = METHODS[method]
    history = history_load(as_of=as_of)
    spares = spares_by_cell(as_of=as_of)
    leads = lead_times()
    on_order = on_order_by_model() if as_of > timezone.localdate() else {}
    pools = list(SparesPool.objects.prefetch_related("sites"))
    model_names = dict(GpuModel.objects.values_list("id", "name"))
    site_ids = [c[0] for c in history.cells]
    model_ids = np.array([c[1] for c in history.cells])
    run = ForecastRun.objects.create(as_of=as_of, method=method, actor_name=actor_fields(actor)["actor_name"],
                                     params={"method": m.name, "buckets": m.buckets,
                                             "half_life": m.half_life if math.isfinite(m.half_life) else None,
                                             "lead_days": lead_days})
    stats_by_lead: dict[int, Any] = {}
    rows: list[Forecast] = []
    for model_id in sorted({c[1] for c in history.cells}):
        lead = Lead(lead_days, "given") if lead_days else leads.get(model_id, Lead(DEFAULT_LEAD_DAYS, "default"))
        if lead.days not in stats_by_lead:
            stats_by_lead[lead.days] = cell_stats(history, as_of=(as_of - EPOCH).days, lead_days=lead.days, method=m)
        stats = stats_by_lead[lead.days]
        of_model = model_ids == model_id
        scopes: list[tuple[str, Any, Any, np.ndarray, float]] = []
        for i, site_id in enumerate(site_ids):
            if of_model[i] and site_id is not None:
                scopes.append((ScopeKind.SITE, site_id, None, np.arange(len(site_ids)) == i, target_fill_rate()))
        for pool in pools:
            members = {s.pk for s in pool.sites.all()}
            mask = of_model & np.array([s in members for s in site_ids])
            if mask.any():
                scopes.append((ScopeKind.POOL, None, pool, mask, float(pool.target_fill_rate)))
        scopes.append((ScopeKind.MODEL, None, None, of_model, target_fill_rate()))
        for kind, site_id, pool, mask, target in scopes:
            f = scope_forecast(stats, mask, target=target, method=m)
            held = sum(n for (s, mo), n in spares.items() if mo == model_id and (
                (kind == ScopeKind.SITE and s == site_id) or (kind == ScopeKind.POOL and mask[site_ids.index(s)]
                                                                if s in site_ids else False)
                or kind == ScopeKind.MODEL))
            shortfall = max(f.recommended - held, 0)
            ordered = on_order.get(model_id, 0) if kind == ScopeKind.MODEL else 0
            demand = f.demand
            rows.append(Forecast(
                run=run, scope=kind, gpu_model_id=model_id, site_id=site_id, pool=pool, installed=f.installed,
                failures=f.failures, exposure_years=round(f.exposure_years, 3), rate=f.rate, rate_lo=f.rate_lo,
                rate_hi=f.rate_hi if math.isfinite(f.rate_hi) else None, vmr=f.vmr, lead_days=lead.days, lead_source=lead.source,
                demand_mean=f.demand_mean, demand_p05=demand.quantile(0.05), demand_p95=demand.quantile(0.95),
                target_fill_rate=target, recommended=f.recommended, fill_rate=f.fill_rate,
                service_level=f.service_level, spares=held, spares_fill_rate=demand.fill_rate(held),
                shortfall=shortfall, on_order=ordered, reorder=max(shortfall - ordered, 0), beta=f.beta,
                alert=f.alert[:500], inputs={
                    "model": model_names.get(model_id, ""), "window_start": (EPOCH + dt.timedelta(
                        days=int(stats.edges[0]))).isoformat(), "monthly_counts": f.monthly_counts,
                    "monthly_exposure": f.monthly_exposure, "demand_var": f.demand_var,
                    "recent_rate": f.recent_rate, "change_p": f.change_p, "beta_p": f.beta_p}))
    Forecast.objects.bulk_create(rows)
    run.duration_s = time.perf_counter() - started
    run.save(update_fields=["duration_s"])
    audit_write(actor=actor, action=AuditAction.CREATE, obj=run, changes={"forecasts": [None, len(rows)]},
                message=f"spares forecast as of {as_of}")
    return run


def backtest_run(*, date_from: dt.date, date_to: dt.date, lead_days: int = DEFAULT_LEAD_DAYS,
                 fill_rate: float | None = None, model: GpuModel | None = None, site: Site | None = None,
                 pool: SparesPool | None = None, method: str = "adaptive") -> dict[str, Any]:
    """Roll the forecast monthly from ``date_from`` to ``date_to`` over the stored history (per model, pooled
    fleet-wide unless a site or pool is given) and score it and the fixed rules."""
    target = fill_rate if fill_rate is not None else (float(pool.target_fill_rate) if pool else target_fill_rate())
    origins = bt.month_starts(date_from, date_to)
    history = history_load(as_of=dt.date(9999, 1, 1), model_ids=[model.pk] if model else None)
    names = dict(GpuModel.objects.values_list("id", "name"))
    site_ids = [c[0] for c in history.cells]
    members = {s.pk for s in pool.sites.all()} if pool else None
    results, all_rows = [], []
    for model_id in sorted({c[1] for c in history.cells}):
        mask = np.array([c[1] == model_id for c in history.cells])
        if site is not None:
            mask &= np.array([s == site.pk for s in site_ids])
        if members is not None:
            mask &= np.array([s in members for s in site_ids])
        if not mask.any():
            continue
        label = {"model": names.get(model_id, str(model_id)), "site": site.code if site else None}
        if pool:
            label["pool"] = pool.name
        result = bt.backtest(history, mask, origins=origins, lead_days=lead_days, target=target,
                             method=METHODS[method], label=label)
        results.append(result)
        all_rows.extend(result.origins)
    stock = np.array([r["recommended"] for r in all_rows], float)
    demand = np.array([r["demand"] for r in all_rows], float)
    policy = bt.score(stock, demand)
    rules = {}
    for k in bt.RULES:
        rules[f"{k}%"] = bt.score(np.array([r["rules"][f"{k}%"] for r in all_rows], float), demand).as_dict()
    return {"origins": all_rows, "fill_rate": round(policy.fill_rate, 4), "mean_stock": round(policy.mean_stock, 2),
            "stockout_windows": policy.stockout_windows, "target_fill_rate": target, "lead_days": lead_days,
            "method": method, "rules": rules}
