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
from procurement.forms import PoolForm, WarrantyForm
from procurement.models import Forecast, ScopeKind, SparesPool
from procurement.services.forecast import backtest_run


@viewer_required
def forecast(request: HtmxHttpRequest) -> HttpResponse:
    run = selectors.latest_run()
    rows = list(selectors.forecast_list(run=run)) if run else []
    by_model: dict[str, list[Forecast]] = {}
    for row in rows:
        by_model.setdefault(row.gpu_model.name, []).append(row)
    return render(request, "procurement/forecast.html", {
        "run": run, "by_model": by_model, "alerts": [r for r in rows if r.alert],
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


def _backtest(*, today: dt.date, lead_days: int = 90) -> dict[str, Any]:
    """The last three years' monthly backtest of every model (cached for an hour: it reads all history)."""
    key = f"procurement:backtest:{today.isoformat()}:{lead_days}"
    result = cache.get(key)
    if result is None:
        start = dt.date(today.year - 3, today.month, 1)
        last = today - dt.timedelta(days=lead_days)
        result = backtest_run(date_from=start, date_to=last, lead_days=lead_days)
        cache.set(key, result, 3600)
    return result


@viewer_required
def backtest(request: HtmxHttpRequest) -> HttpResponse:
    """The backtest as a chart per model (demand vs recommended stock vs the fixed rules), an htmx partial of
    the forecast page and a page of its own."""
    result = _backtest(today=timezone.localdate())
    charts = []
    models = sorted({o["model"] for o in result["origins"]})
    for model in models:
        rows = [o for o in result["origins"] if o["model"] == model]
        charts.append(line_chart([o["as_of"][:7] for o in rows], [
            Series("demand in the lead time", [o["demand"] for o in rows]),
            Series("recommended stock", [o["recommended"] for o in rows], step=True),
            Series("1 % rule", [o["rules"]["1%"] for o in rows], dashed=True),
            Series("2 % rule", [o["rules"]["2%"] for o in rows], dashed=True),
        ], title=f"{model}: backtest, {len(rows)} monthly origins, {result['lead_days']}-day lead time"))
    return render_page(request, "procurement/backtest.html", "backtest-body", {"result": result, "charts": charts})


@viewer_required
def forecast_scope(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    f = get_object_or_404(Forecast.objects.select_related("gpu_model", "site", "pool", "run"), pk=pk)
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
    past = selectors.forecast_history(forecast=f)
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
