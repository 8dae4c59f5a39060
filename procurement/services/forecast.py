"""The spares forecast and its backtest against the fleet's own history.

``history_load`` reads the engine's arrays with SQL that only returns rows before ``as_of`` (a removal or failure
on or after it reads as "not yet"); ``forecast_compute`` runs every scope (each site and model, each pool and
model, each model fleet-wide) and stores the run with its inputs; ``backtest_run`` rolls the forecast monthly.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Sum
from django.utils import timezone

from fleet.audit import Actor, actor_fields, audit_write
from fleet.models import AuditAction
from inventory.models import GpuModel, GpuStateChange, Site
from procurement.forecasting import backtest as bt
from procurement.forecasting.engine import (
    METHODS,
    NEVER,
    CellStats,
    History,
    Method,
    ScopeForecast,
    cell_stats,
    scope_forecast,
)
from procurement.models import (
    Delivery,
    Failure,
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
from procurement.services.infant import infant_rates_by_model

EPOCH = dt.date(1970, 1, 1)
DEFAULT_LEAD_DAYS = 90


def target_fill_rate() -> float:
    return float(getattr(settings, "PROCUREMENT_TARGET_FILL_RATE", 0.95))


# Days since 1970-01-01 of a date column, and the earlier of two nullable dates, in the database's dialect: the
# history reads are two set-based queries (100,000 boards in a fraction of a second, docs/procurement.md) that
# also run on the embedded SQLite of ``make run``.
_DAYS = {"postgresql": "({} - DATE '1970-01-01')", "sqlite": "CAST(julianday({}) - 2440587.5 AS INTEGER)"}
_EARLIER = {"postgresql": "LEAST({0}, {1})", "sqlite": "MIN(COALESCE({0}, {1}), COALESCE({1}, {0}))"}

# Where each GPU was as of a past instant ``%(ts)s``, from dated rows only: its last placement move before it (the
# server it went into, or the one it left for the shelf). Joined as ``p``.
_PLACED = {
    "postgresql": "SELECT DISTINCT ON (m.gpu_id) m.gpu_id, COALESCE(ts.site_id, fs.site_id) AS site_id "
                  "FROM inventory_gpumove m LEFT JOIN inventory_server ts ON ts.id = m.to_server_id "
                  "LEFT JOIN inventory_server fs ON fs.id = m.from_server_id WHERE m.at < %(ts)s "
                  "ORDER BY m.gpu_id, m.at DESC, m.id DESC",
    "sqlite": "SELECT gpu_id, site_id FROM (SELECT m.gpu_id, COALESCE(ts.site_id, fs.site_id) AS site_id, "
              "ROW_NUMBER() OVER (PARTITION BY m.gpu_id ORDER BY m.at DESC, m.id DESC) AS n "
              "FROM inventory_gpumove m LEFT JOIN inventory_server ts ON ts.id = m.to_server_id "
              "LEFT JOIN inventory_server fs ON fs.id = m.from_server_id WHERE m.at < %(ts)s) WHERE n = 1",
}
# The site of asset ``a`` as of ``%(t)s``: its last move's site, else its delivery's site (received before), else
# the site an imported history dated with the board's service (no delivery, in service before).
_DATED_SITE = ("COALESCE(p.site_id, (SELECT d.site_id FROM procurement_delivery d WHERE d.id = a.delivery_id "
               "AND d.received_on < %(t)s), CASE WHEN a.delivery_id IS NULL AND a.in_service_on < %(t)s "
               "THEN a.site_id END)")

_GPUS_SQL = """
SELECT COALESCE({site}, 0), a.model_id, a.batch, {start},
       COALESCE({end}, -1)
FROM procurement_gpuasset a
LEFT JOIN (SELECT gpu_id, MIN(failed_on) AS first_failed FROM procurement_failure WHERE failed_on < %(t)s
           GROUP BY gpu_id) f ON f.gpu_id = a.gpu_id {placed}
WHERE a.in_service_on < %(t)s {scope}
"""
_FAILURES_SQL = """
SELECT COALESCE(f.site_id, {site}, 0), f.model_id, f.batch, {day}, {start}
FROM procurement_failure f LEFT JOIN procurement_gpuasset a ON a.gpu_id = f.gpu_id {placed}
WHERE f.failed_on < %(t)s {scope}
"""


def _history_sql(vendor: str, model_ids: list[int] | None, *, dated: bool) -> tuple[str, str, dict[str, Any]]:
    days, earlier = _DAYS.get(vendor, _DAYS["postgresql"]).format, _EARLIER.get(vendor, _EARLIER["postgresql"]).format
    params: dict[str, Any] = {}
    scope_g = scope_f = ""
    if model_ids:
        params = {f"m{i}": int(m) for i, m in enumerate(model_ids)}
        listed = ", ".join(f"%({name})s" for name in params)
        scope_g, scope_f = f"AND a.model_id IN ({listed})", f"AND f.model_id IN ({listed})"
    site, placed = "a.site_id", ""
    if dated:
        site = _DATED_SITE
        placed = f"LEFT JOIN ({_PLACED.get(vendor, _PLACED['postgresql'])}) p ON p.gpu_id = a.gpu_id"
    gpus = _GPUS_SQL.format(start=days("a.in_service_on"), scope=scope_g, site=site, placed=placed, end=days(
        earlier("CASE WHEN a.removed_on < %(t)s THEN a.removed_on END", "f.first_failed")))
    fails = _FAILURES_SQL.format(day=days("f.failed_on"), start=days("COALESCE(a.in_service_on, f.failed_on)"),
                                 scope=scope_f, site=site, placed=placed)
    return gpus, fails, params


def _columns(rows: list[tuple[Any, ...]], n: int) -> list[np.ndarray]:
    if not rows:
        return [np.empty(0, dtype=object) for _ in range(n)]
    return [np.asarray(col) for col in zip(*rows, strict=True)]


def _midnight(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)


def is_current(as_of: dt.date) -> bool:
    """A forecast as of today (or later) reads where things are now; one for a past date reads dated rows only."""
    return as_of >= timezone.localdate()


def history_load(*, as_of: dt.date, model_ids: list[int] | None = None) -> History:
    """The engine's arrays from the rows before ``as_of`` only (cells are (site id, model id); a removal or
    failure on or after ``as_of`` reads as "still in service"). For a past ``as_of`` a board's site is where the
    dated rows put it then (its last move before it, its delivery, its imported history), not where it is now."""
    gpus_sql, fails_sql, params = _history_sql(connection.vendor, model_ids, dated=not is_current(as_of))
    params["t"] = as_of
    params["ts"] = _midnight(as_of)
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
    """GPUs in ``spare`` per (site, model): now (home site, else the GPU's site), or for a past date from the
    state history and the dated placement rows (a spare no dated row places counts for its model only)."""
    if is_current(as_of):
        sql = ("SELECT COALESCE(a.site_id, g.site_id), g.model_id, COUNT(*) FROM inventory_gpu g "
               "LEFT JOIN procurement_gpuasset a ON a.gpu_id = g.id WHERE g.state = 'spare' GROUP BY 1, 2")
        params: dict[str, Any] = {}
    else:
        # The latest state before the date of each GPU that had been a spare by then (the others cannot be one:
        # sorting every GPU's rows cost the benchmark's past forecast 0.1 s for 100,000 GPUs and no spare;
        # measured with other work on the machine).
        ever = ("gpu_id IN (SELECT gpu_id FROM inventory_gpustatechange WHERE to_state = 'spare' AND at < %(ts)s) "
                "AND at < %(ts)s")
        latest = (f"SELECT DISTINCT ON (gpu_id) gpu_id, to_state FROM inventory_gpustatechange WHERE {ever} "
                  "ORDER BY gpu_id, at DESC, id DESC") if connection.vendor == "postgresql" else (
                  "SELECT gpu_id, to_state FROM (SELECT gpu_id, to_state, ROW_NUMBER() OVER (PARTITION BY gpu_id "
                  f"ORDER BY at DESC, id DESC) AS n FROM inventory_gpustatechange WHERE {ever}) WHERE n = 1")
        placed = _PLACED.get(connection.vendor, _PLACED["postgresql"])
        sql = (f"SELECT {_DATED_SITE}, g.model_id, COUNT(*) FROM ({latest}) s "  # noqa: S608
               "JOIN inventory_gpu g ON g.id = s.gpu_id LEFT JOIN procurement_gpuasset a ON a.gpu_id = g.id "
               f"LEFT JOIN ({placed}) p ON p.gpu_id = g.id WHERE s.to_state = 'spare' GROUP BY 1, 2")
        params = {"t": as_of, "ts": _midnight(as_of)}
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return {(site, model): n for site, model, n in cur.fetchall()}


LEAD_PRIOR_WEIGHT = 10  # the configured (or default) lead time counts as this many deliveries
LEAD_CHANGE = 0.25  # a lead time that moves by more than this share from the last run's is flagged


@dataclass(frozen=True)
class Lead:
    days: int
    source: str  # configured, observed, rma, default, given
    prior: int = DEFAULT_LEAD_DAYS  # the configured lead time (or the default) the estimate is shrunk toward
    prior_source: str = "default"
    n: int = 0  # deliveries (or RMA replacements) it rests on
    observed: float | None = None  # their median, days
    previous: int | None = None  # the last run's lead time of the model
    note: str = ""  # set when it moved far from the last run's

    def as_dict(self) -> dict[str, Any]:
        return {"days": self.days, "source": self.source, "prior": self.prior, "prior_source": self.prior_source,
                "n": self.n, "observed": self.observed, "previous": self.previous, "note": self.note}


def lead_estimate(*, prior: int, observed: list[int]) -> int:
    """The observed median shrunk toward ``prior``: ``(w * prior + n * median) / (w + n)``, ``w`` =
    ``LEAD_PRIOR_WEIGHT``. One delivery moves a 90-day lead time at most 1/11 of the way."""
    if not observed:
        return prior
    n = len(observed)
    return max(round((LEAD_PRIOR_WEIGHT * prior + n * float(np.median(observed))) / (LEAD_PRIOR_WEIGHT + n)), 1)


def lead_times(*, as_of: dt.date, previous: dict[int, int] | None = None) -> dict[int, Lead]:
    """Per model, from rows dated before ``as_of`` only: the deliveries' lead times (received - ordered, one per
    delivery and model), else the RMA replacements' turnaround (replaced - opened), shrunk toward the configured
    lead time (else the 90-day default) by ``lead_estimate``; flagged when far from ``previous``."""
    configured: dict[int, int] = {}
    for lt in LeadTime.objects.order_by("vendor_id", "id"):
        configured.setdefault(lt.gpu_model_id, lt.days)
    seen: dict[int, list[int]] = {}
    deliveries = (Delivery.objects.filter(received_on__lt=as_of, order__ordered_on__lt=as_of, gpus__isnull=False)
                  .values_list("id", "gpus__model_id", "received_on", "order__ordered_on").distinct())
    for _, model_id, received, ordered in deliveries:
        seen.setdefault(model_id, []).append(max((received - ordered).days, 1))
    rma: dict[int, list[int]] = {}
    for model_id, opened, replaced in (RmaCase.objects.filter(replaced_on__lt=as_of, opened_on__lt=as_of)
                                       .values_list("gpu__model_id", "opened_on", "replaced_on")):
        rma.setdefault(model_id, []).append(max((replaced - opened).days, 1))
    out: dict[int, Lead] = {}
    for model_id in set(configured) | set(seen) | set(rma):
        prior = configured.get(model_id, DEFAULT_LEAD_DAYS)
        prior_source = "configured" if model_id in configured else "default"
        observed, source = (seen[model_id], "observed") if model_id in seen else (
            (rma[model_id], "rma") if model_id in rma else ([], prior_source))
        days = lead_estimate(prior=prior, observed=observed)
        before = (previous or {}).get(model_id)
        note = ""
        if before and abs(days - before) > LEAD_CHANGE * before:
            note = (f"Lead time moved from {before} to {days} days since the last forecast "
                    f"({len(observed)} {'deliveries' if source == 'observed' else 'RMA replacements'}).")
        out[model_id] = Lead(days, source, prior, prior_source, len(observed),
                             float(np.median(observed)) if observed else None, before, note)
    return out


def on_order_by_model() -> dict[int, int]:
    """Open quantity (ordered, not yet received) of approved GPU order lines, per model."""
    lines = (OrderLine.objects.filter(order__status=OrderStatus.APPROVED, gpu_model__isnull=False)
             .values("gpu_model_id").annotate(q=Sum("quantity")))
    received = dict(GpuAsset.objects.filter(order_line__order__status=OrderStatus.APPROVED)
                    .values("model_id").annotate(n=Sum(1)).values_list("model_id", "n"))
    return {r["gpu_model_id"]: max(r["q"] - received.get(r["gpu_model_id"], 0), 0) for r in lines}


def _calibration(history: History, of_model: np.ndarray, *, as_of: dt.date, lead_days: int, target: float,
                 fleet_at: Callable[[dt.date], ScopeForecast]) -> bt.Choice:
    """The sizing the model's own past errors pick as of ``as_of`` (``bt.choose``): the fleet-wide forecast
    (``fleet_at``: origin -> the model's fleet-wide forecast as of it, computed as the forecast's own row is)
    rolled over the last ``bt.CALIBRATION_MONTHS`` monthly origins whose lead time ended before ``as_of``, from
    ``history`` (already cut at ``as_of``)."""
    last = as_of - dt.timedelta(days=lead_days)
    first = dt.date(last.year - (bt.CALIBRATION_MONTHS // 12) - 1, last.month, 1)
    origins = bt.month_starts(first, last)[-bt.CALIBRATION_MONTHS:]
    if len(origins) < bt.MIN_SCORED:
        return bt.Choice("forecast", "forecast", 1.0, 0)

    def forecast_at(origin: dt.date) -> tuple[int, int, float, bool]:
        f = fleet_at(origin)
        return f.recommended, f.installed, f.rate, bool(f.alert)

    rows = bt.backtest(history, of_model, origins=origins, lead_days=lead_days, target=target, calibrate=False,
                       forecast_at=forecast_at).origins
    column = lambda key: np.array([r[key] for r in rows], float)  # noqa: E731
    return bt.choose(column("forecast"), column("installed"), column("demand"), target=target,
                     alerts=column("alert").astype(bool))


def _previous_leads(as_of: dt.date) -> dict[int, int]:
    """Each model's fleet-wide lead time in the run before this one (for the "moved far" flag): the latest run
    for a forecast of today, the latest as of an earlier date for a past one."""
    runs = ForecastRun.objects.filter(as_of__lte=as_of) if is_current(as_of) else ForecastRun.objects.filter(
        as_of__lt=as_of)
    run = runs.order_by("-as_of", "-created_at", "-id").first()
    if run is None:
        return {}
    return dict(run.forecasts.filter(scope=ScopeKind.MODEL).values_list("gpu_model_id", "lead_days"))


@transaction.atomic
def forecast_compute(*, as_of: dt.date | None = None, method: str = "adaptive", lead_days: int | None = None,
                     calibrate: bool = True, actor: Actor) -> ForecastRun:
    """Forecast every scope as of ``as_of`` (default: today) and store it.

    A forecast of a past date reads only rows dated before it (failures, service dates, placement, spares,
    deliveries and RMA cases for the lead time). A forecast of today is "as of now": it reads today's rows too,
    the spares on the shelf and the open orders as they are.
    With ``calibrate`` each model's stock is sized the way its own past errors pick (``_calibration``)."""
    started = time.perf_counter()
    as_of = as_of or timezone.localdate()
    m: Method = METHODS[method]
    cutoff = as_of + dt.timedelta(days=1) if is_current(as_of) else as_of  # rows dated before this are read
    history = history_load(as_of=cutoff).collapsed()  # read at up to 37 origins per lead time
    spares = spares_by_cell(as_of=as_of)
    leads = lead_times(as_of=cutoff, previous=_previous_leads(as_of))
    on_order = on_order_by_model() if is_current(as_of) else {}
    pools = list(SparesPool.objects.prefetch_related("sites"))
    model_names = dict(GpuModel.objects.values_list("id", "name"))
    site_ids = [c[0] for c in history.cells]
    model_ids = np.array([c[1] for c in history.cells])
    infant = infant_rates_by_model(as_of=cutoff)  # the youngest band's measured rate per model (acceptance)
    run = ForecastRun.objects.create(as_of=as_of, method=method, actor_name=actor_fields(actor)["actor_name"],
                                     params={"method": m.name, "buckets": m.buckets,
                                             "half_life": m.half_life if math.isfinite(m.half_life) else None,
                                             "lead_days": lead_days, "calibrate": calibrate})
    stats: dict[tuple[int, dt.date], CellStats] = {}  # (lead, origin): shared by the models and their calibration

    def stats_at(origin: dt.date, lead: int) -> CellStats:
        if (lead, origin) not in stats:
            stats[lead, origin] = cell_stats(history, as_of=(origin - EPOCH).days, lead_days=lead, method=m)
        return stats[lead, origin]

    rows: list[Forecast] = []
    for model_id in sorted({c[1] for c in history.cells}):
        lead = Lead(lead_days, "given", lead_days, "given") if lead_days else leads.get(
            model_id, Lead(DEFAULT_LEAD_DAYS, "default"))
        of_model = model_ids == model_id
        measured = {"infant_rate": infant.get(model_id, {}).get("rate"),
                    "infant_weight": infant.get(model_id, {}).get("k", 1.0)}

        def fleet_at(origin: dt.date, lead: int = lead.days, of_model: np.ndarray = of_model,
                     measured: dict[str, Any] = measured) -> ScopeForecast:
            return scope_forecast(stats_at(origin, lead), of_model, target=target_fill_rate(), method=m, **measured)

        choice = (_calibration(history, of_model, as_of=cutoff, lead_days=lead.days, target=target_fill_rate(),
                               fleet_at=fleet_at) if calibrate else bt.AS_IS)
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
        # The model's calibration sizes its fleet row (a rule is applied as it is there; never below the forecast
        # while it alerts, as in the backtest); every site and pool row takes the same factor over its own
        # forecast, so the scopes stay in proportion (a pool is not held to a rule sized for the whole fleet's
        # variance).
        fleet_f = fleet_at(cutoff)
        fleet_rec = int(bt.sized(choice, fleet_f.recommended, fleet_f.installed, bool(fleet_f.alert))) if (
            fleet_f.installed) else fleet_f.recommended
        factor = fleet_rec / fleet_f.recommended if fleet_f.recommended else 1.0
        for kind, site_id, pool, mask, target in scopes:
            f = fleet_f if kind == ScopeKind.MODEL else scope_forecast(
                stats_at(cutoff, lead.days), mask, target=target, method=m, **measured)
            # A pool holds what its sites hold (each site's spares of this model), the fleet everything.
            held = sum(n for (s, mo), n in spares.items() if mo == model_id and (
                kind == ScopeKind.MODEL or (kind == ScopeKind.SITE and s == site_id)
                or (kind == ScopeKind.POOL and s in {p.pk for p in pool.sites.all()})))
            demand = f.demand
            recommended = fleet_rec if kind == ScopeKind.MODEL else math.ceil(f.recommended * factor - 1e-9)
            shortfall = max(recommended - held, 0)
            ordered = on_order.get(model_id, 0) if kind == ScopeKind.MODEL else 0
            rows.append(Forecast(
                run=run, scope=kind, gpu_model_id=model_id, site_id=site_id, pool=pool, installed=f.installed,
                failures=f.failures, exposure_years=round(f.exposure_years, 3), rate=f.rate, rate_lo=f.rate_lo,
                rate_hi=f.rate_hi if math.isfinite(f.rate_hi) else None, vmr=f.vmr, lead_days=lead.days,
                lead_source=lead.source, demand_mean=f.demand_mean, demand_p05=demand.quantile(0.05),
                demand_p95=demand.quantile(0.95), target_fill_rate=target, recommended=recommended,
                fill_rate=demand.fill_rate(recommended), service_level=demand.cycle_service_level(recommended),
                spares=held, spares_fill_rate=demand.fill_rate(held), shortfall=shortfall, on_order=ordered,
                reorder=max(shortfall - ordered, 0), beta=f.beta, alert=f.alert[:500], inputs={
                    "model": model_names.get(model_id, ""), "window_start": (EPOCH + dt.timedelta(
                        days=int(stats_at(cutoff, lead.days).edges[0]))).isoformat(), "monthly_counts": f.monthly_counts,
                    "monthly_exposure": f.monthly_exposure, "demand_var": f.demand_var,
                    "recent_rate": f.recent_rate, "change_p": f.change_p, "beta_p": f.beta_p,
                    "forecast_stock": f.recommended, "calibration": choice.as_dict() | {"factor": round(factor, 4)},
                    "lead": lead.as_dict(), "infant": infant.get(model_id)}))
    Forecast.objects.bulk_create(rows)
    run.duration_s = time.perf_counter() - started
    run.save(update_fields=["duration_s"])
    audit_write(actor=actor, action=AuditAction.CREATE, obj=run, changes={"forecasts": [None, len(rows)]},
                message=f"spares forecast as of {as_of}")
    return run


class BacktestWindowError(ValueError):
    """A backtest window whose last lead time runs past the recorded data."""

    def __init__(self, *, date_to: dt.date, last: dt.date, data_end: dt.date, lead_days: int) -> None:
        self.last = last
        super().__init__(f"{date_to} runs past the data: the history ends {data_end}, so with a {lead_days}-day "
                         f"lead time the last date that can be scored is {last}.")


def data_end() -> dt.date:
    """The last day the recorded history covers: its latest dated row (failure, service start or removal,
    state change, delivery), and never today (a day is whole only once it is over)."""
    yesterday = timezone.localdate() - dt.timedelta(days=1)
    latest = [Failure.objects.aggregate(d=Max("failed_on"))["d"],
              GpuAsset.objects.aggregate(d=Max("in_service_on"))["d"],
              GpuAsset.objects.aggregate(d=Max("removed_on"))["d"],
              Delivery.objects.aggregate(d=Max("received_on"))["d"]]
    at = GpuStateChange.objects.aggregate(d=Max("at"))["d"]
    if at is not None:
        latest.append(timezone.localtime(at).date())
    days = [d for d in latest if d is not None]
    return min(max(days), yesterday) if days else yesterday


def last_scored(*, lead_days: int) -> tuple[dt.date, dt.date]:
    """(the last origin whose whole lead time lies in the data, the data's last day)."""
    end = data_end()
    return end - dt.timedelta(days=lead_days - 1), end


def backtest_run(*, date_from: dt.date, date_to: dt.date, lead_days: int = DEFAULT_LEAD_DAYS,
                 fill_rate: float | None = None, model: GpuModel | None = None, site: Site | None = None,
                 pool: SparesPool | None = None, method: str = "adaptive", calibrate: bool = True) -> dict[str, Any]:
    """Roll the forecast monthly from ``date_from`` to ``date_to`` over the stored history (per model, pooled
    fleet-wide unless a site or pool is given) and score it and the fixed rules.

    Raises ``BacktestWindowError`` when ``date_to`` + the lead time runs past the data (its demand would be
    undercounted and the fill rate inflated). For a site or pool, each origin's forecast reads the placement of
    that date (``history_load`` as of the origin); the fleet-wide one needs no placement."""
    last, end = last_scored(lead_days=lead_days)
    if date_to > last:
        raise BacktestWindowError(date_to=date_to, last=last, data_end=end, lead_days=lead_days)
    target = fill_rate if fill_rate is not None else (float(pool.target_fill_rate) if pool else target_fill_rate())
    origins = bt.month_starts(date_from, date_to)
    history = history_load(as_of=dt.date(9999, 1, 1), model_ids=[model.pk] if model else None).collapsed()
    names = dict(GpuModel.objects.values_list("id", "name"))
    site_ids = [c[0] for c in history.cells]
    members = {s.pk for s in pool.sites.all()} if pool else ({site.pk} if site else None)
    m = METHODS[method]
    results, all_rows = [], []
    # The youngest band's measured rate as of the first origin: rows dated before it are before every origin.
    infant = infant_rates_by_model(as_of=origins[0]) if origins else {}
    infant_effect: list[dict[str, Any]] = []
    for model_id in sorted({c[1] for c in history.cells}):
        mask = np.array([c[1] == model_id for c in history.cells])
        if members is not None:
            mask &= np.array([s in members for s in site_ids])
        if not mask.any():
            continue
        label = {"model": names.get(model_id, str(model_id)), "site": site.code if site else None}
        if pool:
            label["pool"] = pool.name
        forecast_at = None
        if members is not None:
            forecast_at = _scoped_forecast(model_id, members, lead_days=lead_days, target=target, method=m)
        result = bt.backtest(history, mask, origins=origins, lead_days=lead_days, target=target, method=m,
                             label=label, calibrate=calibrate, forecast_at=forecast_at,
                             infant_rate=infant.get(model_id, {}).get("rate"),
                             infant_weight=infant.get(model_id, {}).get("k", 1.0))
        if model_id in infant:  # what the measured youngest-band rate changed, against the forecast's own
            own = bt.backtest(history, mask, origins=origins, lead_days=lead_days, target=target, method=m,
                              label=label, calibrate=calibrate, forecast_at=forecast_at)
            infant_effect.append({**label, **infant[model_id], "with": {
                "fill_rate": round(result.policy.fill_rate, 4), "mean_stock": round(result.policy.mean_stock, 2)},
                "without": {"fill_rate": round(own.policy.fill_rate, 4), "mean_stock": round(own.policy.mean_stock, 2)}})
        results.append(result)
        all_rows.extend(result.origins)
    out = {"origins": all_rows, **_scores(all_rows, target), "lead_days": lead_days, "method": method,
           "last_scored": last.isoformat(),
           "calibration": {r.origins[0]["model"]: r.choice.as_dict() for r in results if r.origins},
           "infant": infant_effect}
    # Calibration sizes each model on its own history: the page says which won for each model too.
    out["models"] = {name: _scores([r for r in all_rows if r["model"] == name], target)
                     for name in sorted({r["model"] for r in all_rows})}
    return out


def _scores(rows: list[dict[str, Any]], target: float) -> dict[str, Any]:
    """Fill rate, mean stock and stock-out windows of the policy, of the forecast before calibration and of every
    fixed rule over ``rows`` (backtest origins), and the verdict (worded from the unrounded figures)."""
    demand = np.array([r["demand"] for r in rows], float)
    policy = bt.score(np.array([r["recommended"] for r in rows], float), demand)
    uncalibrated = bt.score(np.array([r["forecast"] for r in rows], float), demand)
    rules = {f"{k}%": bt.score(np.array([r["rules"][f"{k}%"] for r in rows], float), demand) for k in bt.RULES}
    exact = {"fill_rate": policy.fill_rate, "mean_stock": policy.mean_stock, "target_fill_rate": target,
             "rules": {k: {"fill_rate": r.fill_rate, "mean_stock": r.mean_stock} for k, r in rules.items()}}
    return {"fill_rate": round(policy.fill_rate, 4), "mean_stock": round(policy.mean_stock, 2),
            "stockout_windows": policy.stockout_windows, "target_fill_rate": target,
            "rules": {k: r.as_dict() for k, r in rules.items()}, "uncalibrated": uncalibrated.as_dict(),
            "verdict": verdict(exact)}


def verdict(result: dict[str, Any]) -> dict[str, Any]:
    """Which won on this backtest: the policy, or a fixed rule that reached the target with less mean stock (and
    by how much), and whether the policy reached the target at all."""
    target = result["target_fill_rate"]
    reached = result["fill_rate"] >= target
    beaten = bt.dominated_by(result)
    reaching = [(r["mean_stock"], k) for k, r in result["rules"].items() if r["fill_rate"] >= target]
    cheapest = min(reaching) if reaching else None
    if beaten:
        k = min(beaten, key=lambda name: result["rules"][name]["mean_stock"])
        r = result["rules"][k]
        text = (f"The {k} rule won: fill {r['fill_rate']:.3f} with mean stock {r['mean_stock']:.1f}, "
                f"{result['mean_stock'] - r['mean_stock']:.1f} less than the policy's {result['mean_stock']:.1f} "
                f"(fill {result['fill_rate']:.3f}{'' if reached else f', short of the target {target}'}).")
        winner = f"{k} rule"
    elif reached:
        saving = f", {cheapest[0] - result['mean_stock']:.1f} less mean stock than the {cheapest[1]} rule, the " \
                 "cheapest rule that reaches it" if cheapest else ", and no fixed rule reaches it"
        text = f"The policy won: fill {result['fill_rate']:.3f} reaches the target {target}{saving}."
        winner = "policy"
    else:
        text = (f"Short of the target: the policy's fill {result['fill_rate']:.3f} is below {target} "
                f"(by {target - result['fill_rate']:.3f})"
                + (f"; the {cheapest[1]} rule reaches it with mean stock {cheapest[0]:.1f}." if cheapest else
                   "; no fixed rule reaches it either."))
        winner = cheapest[1] + " rule" if cheapest else "none"
    return {"winner": winner, "reached": reached, "text": text}


def _scoped_forecast(model_id: int, members: set[int], *, lead_days: int, target: float, method: Method):  # type: ignore[no-untyped-def]
    """Origin -> (recommended, installed, rate, alert) of a site or pool, placement read as of each origin."""

    def at(origin: dt.date) -> tuple[int, int, float, bool]:
        h = history_load(as_of=origin, model_ids=[model_id])
        mask = np.array([c[0] in members and c[1] == model_id for c in h.cells], bool)
        if not mask.any():
            return 0, 0, 0.0, False
        f = scope_forecast(cell_stats(h, as_of=(origin - EPOCH).days, lead_days=lead_days, method=method), mask,
                           target=target, method=method)
        return f.recommended, f.installed, f.rate, bool(f.alert)

    return at
