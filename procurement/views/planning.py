"""Forecast, backtest, warranty and refresh pages."""

from __future__ import annotations

import csv
import datetime as dt
from typing import Any

from django.contrib import messages
from django.core.cache import cache
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from fleet import dispatch
from fleet.audit import audited_create
from fleet.views import HtmxHttpRequest, operator_required, render_page, viewer_required
from procurement import selectors
from procurement.charts import Series, line_chart
from procurement.forecasting import backtest as bt
from procurement.forms import BacktestForm, PoolForm, WarrantyForm
from procurement.models import Forecast, ScopeKind, SparesPool
from procurement.services.forecast import backtest_run, last_scored

COLUMN_HELP = [
    ("Scope", "A site holds its own spares; a pool shares its sites' spares; the fleet row pools every site."),
    ("Installed", "GPUs of this model in service at the scope on the as-of date."),
    ("Failures (24 mo)", "Failures recorded in the 24 months before the as-of date."),
    ("Observed rate [90 %]", "Failures per GPU-year over those 24 months, with its exact 90 % interval "
                             "(the interval always contains this number)."),
    ("Rate used", "The rate the stock is sized on: recency-weighted, per batch and age, at its 90 % upper "
                  "credible bound; it may lie above the observed interval when the recent rate is higher."),
    ("VMR", "Variance-to-mean ratio of the monthly failure counts: 1 is Poisson (independent failures), above 1 "
            "failures come in clusters and need more stock."),
    ("Lead (d)", "Days to replenish a spare: deliveries' lead times shrunk toward the configured one (the number "
                 "of deliveries it rests on is shown)."),
    ("Demand mean [p05-p95]", "Failures expected within one lead time, and the 5 %-95 % range of that count."),
    ("Target", "The share of failures to be met from stock on the shelf (the fill-rate target)."),
    ("Recommended", "The stock that meets the target, as sized by calibration against the model's own past "
                    "errors (the forecast's own figure when calibration changed it)."),
    ("Fill / no-stock-out", "With the recommended stock: the expected share of failures met from stock, and the "
                            "chance that no failure waits in the lead time."),
    ("Spares", "GPUs in spare on the shelf at the scope's sites (a pool counts all its sites')."),
    ("Spares fill", "The expected share of failures the spares held now would meet."),
    ("Shortfall", "Recommended minus spares held (0 when the shelf holds enough)."),
    ("Reorder", "Shortfall net of GPUs already on order (fleet row only: orders are not per site)."),
]


def _pct(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 100:.1f}" if v < 0.1 else f"{v * 100:.0f}"


def _present(f: Forecast) -> Forecast:
    """Display strings for one row: the observed rate inside its interval, the lead time and what it rests on."""
    observed = f.failures / f.exposure_years if f.exposure_years else None
    f.observed_text = (f"{_pct(observed)} % [{_pct(f.rate_lo)}-{_pct(f.rate_hi)}]" if observed is not None
                       and f.rate_hi is not None else "no exposure yet")
    f.rate_text = f"{_pct(f.rate)} %"
    lead = f.inputs.get("lead") or {}
    n = lead.get("n", 0)
    if lead.get("source") == "given":
        f.lead_text = "given"
    elif n:
        if lead.get("source") == "observed":
            what = "delivery" if n == 1 else "deliveries"
        else:
            what = "RMA replacement" if n == 1 else "RMA replacements"
        f.lead_text = (f"{n} {what} (median {lead.get('observed'):g} d), shrunk toward the "
                       f"{lead.get('prior_source')} {lead.get('prior')} d")
    else:
        f.lead_text = f"{lead.get('prior_source', f.lead_source)} (no deliveries yet)"
    f.lead_note = lead.get("note", "")
    cal = f.inputs.get("calibration") or {}
    f.forecast_stock = f.inputs.get("forecast_stock", f.recommended)
    f.sizing = cal.get("name", "forecast")
    return f


def reconcile(rows: list[Forecast]) -> dict[str, Any]:
    """How one model's fleet, pool and site figures fit together: what each scope holds and needs, why pooling
    needs fewer, and which moves between sites would cover the short ones from the others' surplus."""
    sites = [r for r in rows if r.scope == ScopeKind.SITE]
    pools = [r for r in rows if r.scope == ScopeKind.POOL]
    fleet = next((r for r in rows if r.scope == ScopeKind.MODEL), None)
    site_rec = sum(r.recommended for r in sites)
    site_held = sum(r.spares for r in sites)
    out: dict[str, Any] = {"fleet": fleet, "site_recommended": site_rec, "site_held": site_held, "pools": [],
                           "moves": [], "unplaced": (fleet.spares - site_held) if fleet else 0}
    members: dict[int, set[int]] = {}
    for p in pools:
        codes = {s.pk for s in p.pool.sites.all()}
        members[p.pool_id] = codes
        inside = [r for r in sites if r.site_id in codes]
        out["pools"].append({"row": p, "sites": ", ".join(r.site.code for r in inside),
                             "site_recommended": sum(r.recommended for r in inside),
                             "site_held": sum(r.spares for r in inside)})
    # Moves: first within each pool (its sites share stock), then between any sites of the fleet.
    surplus = {r.site_id: r.spares - r.recommended for r in sites}
    code = {r.site_id: r.site.code for r in sites}
    groups = [*members.values(), set(surplus)]
    for group in groups:
        short = sorted((s for s in group if surplus.get(s, 0) < 0), key=lambda s: surplus[s])
        for s in short:
            for d in sorted((d for d in group if surplus.get(d, 0) > 0), key=lambda d: -surplus[d]):
                n = min(surplus[d], -surplus[s])
                if n <= 0:
                    continue
                out["moves"].append(f"move {n} from {code[d]} to {code[s]}")
                surplus[d] -= n
                surplus[s] += n
                if surplus[s] >= 0:
                    break
    return out


@viewer_required
def forecast(request: HtmxHttpRequest) -> HttpResponse:
    run = selectors.latest_run()
    rows = [_present(r) for r in selectors.forecast_list(run=run)] if run else []
    by_model: dict[str, list[Forecast]] = {}
    for row in rows:
        by_model.setdefault(row.gpu_model.name, []).append(row)
    models = [{"name": name, "rows": rs, "reconcile": reconcile(rs),
               "lead_note": next((r.lead_note for r in rs if r.lead_note), ""),
               "calibration": next((r.inputs.get("calibration") for r in rs if r.scope == ScopeKind.MODEL), None)}
              for name, rs in by_model.items()]
    return render(request, "procurement/forecast.html", {
        "run": run, "models": models, "alerts": [r for r in rows if r.alert], "column_help": COLUMN_HELP,
        # A run of its own day reads that day's rows too ("as of now"); one of a past date, the days before it.
        "history_through": (run.as_of if run.as_of >= timezone.localtime(run.created_at).date()
                            else run.as_of - dt.timedelta(days=1)) if run else None,
        "pools": selectors.pool_list(), "pool_form": PoolForm(),
    })


@require_POST
@operator_required
def forecast_recompute(request: HtmxHttpRequest) -> HttpResponse:
    """Recompute on demand: the worker's task, sent through the dispatch seam."""
    if dispatch.send("procurement.tasks.forecast_compute_task"):
        messages.success(request, "Forecast recompute sent to the workers; reload in a few seconds.")
    else:
        messages.error(request, "The task broker is unreachable; the nightly run will recompute.")
    return redirect("procurement-forecast")


def _backtest(*, date_from: dt.date, date_to: dt.date, lead_days: int = 90) -> dict[str, Any]:
    """A backtest of every model (cached for an hour per window: it reads all history)."""
    key = f"procurement:backtest:v4:{date_from.isoformat()}:{date_to.isoformat()}:{lead_days}"
    result = cache.get(key)
    if result is None:
        result = backtest_run(date_from=date_from, date_to=date_to, lead_days=lead_days)
        cache.set(key, result, 3600)
    return result


@viewer_required
def backtest(request: HtmxHttpRequest) -> HttpResponse:
    """The backtest as a chart per model (demand, the policy's stock, the forecast's own stock before
    calibration and every fixed rule it is compared with), an htmx partial of the forecast page and a page of its
    own. Default window: the last three years up to the last date that can be scored."""
    today = timezone.localdate()
    last, end = last_scored(lead_days=90)
    initial = {"date_from": dt.date(today.year - 3, today.month, 1), "date_to": last, "lead_days": 90}
    form = BacktestForm(request.GET if "date_to" in request.GET else initial)
    result, charts = None, []
    if form.is_valid():
        data = form.cleaned_data
        result = _backtest(date_from=data["date_from"], date_to=data["date_to"], lead_days=data["lead_days"])
        for model in sorted({o["model"] for o in result["origins"]}):
            rows = [o for o in result["origins"] if o["model"] == model]
            charts.append((model, result["models"][model], line_chart([o["as_of"][:7] for o in rows], [
                Series("demand in the lead time", [o["demand"] for o in rows]),
                Series("policy stock (calibrated)", [o["recommended"] for o in rows], step=True),
                Series("forecast before calibration", [o["forecast"] for o in rows], step=True, dashed=True),
                *[Series(f"{k} % rule", [o["rules"][f"{k}%"] for o in rows], dashed=True) for k in bt.RULES],
            ], title=f"{model}: backtest, {len(rows)} monthly origins, {result['lead_days']}-day lead time")))
    return render_page(request, "procurement/backtest.html", "backtest-body", {
        "result": result, "charts": charts, "form": form, "last_scored": last, "data_end": end})


@viewer_required
def forecast_scope(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    f = _present(get_object_or_404(Forecast.objects.select_related("gpu_model", "site", "pool", "run"), pk=pk))
    start = dt.date.fromisoformat(f.inputs.get("window_start", f.run.as_of.isoformat()))
    counts = f.inputs.get("monthly_counts", [])
    exposure = f.inputs.get("monthly_exposure", [])
    labels = [(start + dt.timedelta(days=int(30.4375 * i))).strftime("%Y-%m") for i in range(len(counts))]
    monthly = f.demand_mean * 30.4375 / f.lead_days if f.lead_days else 0
    chart = line_chart(labels + ["next"], [
        Series("failures per month", [*counts, None]),
        Series("forecast per month", [None] * len(counts) + [monthly]),
        Series("failures expected at the forecast rate", [round(e * f.rate, 2) for e in exposure] + [None],
               dashed=True),
    ], title="Failure history (monthly) and the forecast rate")
    past = [_present(p) for p in selectors.forecast_history(forecast=f)]
    stock_chart = line_chart([p.run.as_of.isoformat() for p in reversed(past)], [
        Series("recommended", [p.recommended for p in reversed(past)], step=True),
        Series("demand p95", [p.demand_p95 for p in reversed(past)], dashed=True),
        Series("demand p05", [p.demand_p05 for p in reversed(past)], dashed=True),
        Series("spares held", [p.spares for p in reversed(past)]),
    ], title="Forecast band and stock, run by run (as each run computed it)")
    return render(request, "procurement/forecast_scope.html", {"f": f, "chart": chart, "stock_chart": stock_chart,
                                                               "past": past})


@operator_required
def pool_new(request: HtmxHttpRequest) -> HttpResponse:
    form = PoolForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        audited_create(model_class=SparesPool, actor=request.user, **form.cleaned_data)
        messages.success(request, f"Pool {form.cleaned_data['name']} created; the next forecast includes it.")
        return redirect("procurement-forecast")
    return render(request, "procurement/pool_form.html", {"form": form})


@viewer_required
def warranty(request: HtmxHttpRequest) -> HttpResponse:
    form = WarrantyForm(request.GET or None)
    start, end = form.period()
    data = form.cleaned_data if form.is_valid() else {}
    field = "support_end" if data.get("what") == "support" else "warranty_end"
    qs = selectors.warranty_list().filter(**{f"{field}__gte": start, f"{field}__lte": end})
    if data.get("site"):
        qs = qs.filter(site=data["site"])
    if data.get("model"):
        qs = qs.filter(model=data["model"])
    if request.GET.get("export") == "csv":
        response = HttpResponse(content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="{field}-{start}-{end}.csv"'
        out = csv.writer(response)
        out.writerow(["serial", "model", "site", "batch", "warranty_start", "warranty_end", "support_end"])
        for a in qs.iterator(chunk_size=2000):
            out.writerow([a.gpu.serial or "", a.model.name, a.site.code if a.site else "", a.batch,
                          a.warranty_start or "", a.warranty_end or "", a.support_end or ""])
        return response
    return render(request, "procurement/warranty.html", {
        "form": form, "start": start, "end": end, "field": field, "summary": selectors.warranty_summary(qs=qs),
        "assets": list(qs[:200]), "query": request.GET.urlencode()})


@viewer_required
def refresh(request: HtmxHttpRequest) -> HttpResponse:
    today = timezone.localdate()
    costs = selectors.cost_per_gpu_year()
    plan = selectors.capacity_plan(today=today)
    chart = line_chart([p["month"].strftime("%Y-%m") for p in plan], [
        Series("installed (after arrivals and warranty ends)", [p["installed"] for p in plan], step=True),
        Series("planned demand", [p["demand"] for p in plan]),
        Series("arriving", [p["arriving"] for p in plan], dashed=True),
        Series("retiring", [p["retiring"] for p in plan], dashed=True),
    ], title="Capacity plan, 18 months")
    return render(request, "procurement/refresh.html", {
        "costs": costs, "payoff": selectors.refresh_payoff(rows=costs), "plan": plan, "chart": chart,
        "cascade": selectors.cascade_plan(today=today), "scope_kinds": ScopeKind})
