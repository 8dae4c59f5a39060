"""The spares forecast with early failures: a new cohort whose infant mortality acceptance measured is forecast
with that rate for its youngest age band, not with the fleet's all-ages rate."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pytest

from acceptance.models import BurnInPolicy
from fleet.audit import SYSTEM
from inventory import services as inventory_services
from inventory.models import GpuStateChange
from procurement.forecasting import backtest as bt
from procurement.forecasting import engine
from procurement.models import Forecast, GpuAsset
from procurement.services import forecast
from procurement.services.infant import infant_rates_by_model
from procurement.services.rma import failure_record
from tests import factories

AS_OF = bt.day(dt.date(2026, 1, 1))
P_EARLY, WINDOW = 0.03, 90  # 3 % of new boards fail within 90 days of entering service


def cohort_history(seed: int) -> tuple[engine.History, int]:
    """5,000 three-year-old boards failing at 2 %/yr, and 3,000 new ones (batch B) that entered service ten days
    before ``AS_OF`` and have not failed yet. Returns the history and the demand the next 90 days bring."""
    rng = np.random.default_rng(seed)
    old, new = 5000, 3000
    start = np.concatenate([np.full(old, AS_OF - 3 * 365.0), np.full(new, AS_OF - 10.0)])
    fail_days, fail_starts = [], []
    for s in start[:old]:  # old boards: exponential failures, one per board at most in the window read
        t = s + rng.exponential(365.25 / 0.02)
        if t < AS_OF + 90:
            fail_days.append(t)
            fail_starts.append(s)
    # new boards: early failures spread over their first 90 days of service; the first 10 days are history
    early = rng.random(new) < P_EARLY
    fail_days += list(AS_OF - 10.0 + rng.uniform(0, 90, early.sum()))
    fail_starts += [AS_OF - 10.0] * int(early.sum())
    fail_days, fail_starts = np.array(fail_days), np.array(fail_starts)
    batch = np.concatenate([np.full(old, -1), np.zeros(new, int)])
    h = engine.History(start=start, end=np.full(old + new, float(engine.NEVER)), cell=np.zeros(old + new, int),
                       batch=batch, fail_day=fail_days, fail_cell=np.zeros(len(fail_days), int),
                       fail_batch=np.where(fail_starts == AS_OF - 10.0, 0, -1), fail_start=fail_starts,
                       cells=[(1, 1)], batches=["B"])
    demand = int(((fail_days >= AS_OF) & (fail_days < AS_OF + 90)).sum())
    return h, demand


def test_measured_infant_rate_covers_a_new_cohorts_early_failures():
    infant_rate = -math.log1p(-P_EARLY) * 365.25 / WINDOW
    covered = {"own": 0, "measured": 0}
    for seed in range(20):
        h, demand = cohort_history(seed)
        stats = engine.cell_stats(h, as_of=AS_OF, lead_days=90)
        mask = np.ones(1, bool)
        own = engine.scope_forecast(stats, mask, target=0.95)
        # measured on an earlier cohort of 3,000: 90 early failures
        measured = engine.scope_forecast(stats, mask, target=0.95, infant_rate=infant_rate, infant_weight=90)
        covered["own"] += own.recommended >= demand
        covered["measured"] += measured.recommended >= demand
    # The target is 95 %: with the measured rate the stock covers the next 90 days' demand in 19 of 20 draws;
    # with the forecast's own rates (ten days of the cohort's history) in 13.
    assert covered["measured"] >= 19 and covered["own"] <= 15


def test_backtest_with_and_without_the_measured_rate():
    h, _ = cohort_history(1)
    mask = np.ones(1, bool)
    origins = [dt.date(2026, 1, 1)]
    rate = -math.log1p(-P_EARLY) * 365.25 / WINDOW
    with_rate = bt.backtest(h, mask, origins=origins, lead_days=90, target=0.95, infant_rate=rate,
                            infant_weight=90)
    without = bt.backtest(h, mask, origins=origins, lead_days=90, target=0.95)
    assert with_rate.policy.fill_rate > without.policy.fill_rate


@pytest.mark.django_db
def test_forecast_uses_acceptance_rates_for_the_youngest_band():
    site = factories.site()
    model = factories.gpu_model()
    BurnInPolicy.objects.create(gpu_model=model, min_level=2, required_runs=1, min_hours=0, infant_days=90)
    gpus = [factories.gpu(state="in_service") for _ in range(25)]
    served = dt.date(2025, 1, 1)
    for g in gpus:
        GpuAsset.objects.create(gpu=g, model=model, site=site, in_service_on=served, batch="LOT-1")
    for g in gpus[:5]:  # five early failures (a fifth of the cohort)
        inventory_services.gpu_transition(gpu=g, to_state="drained", actor=SYSTEM)
        failure_record(gpu=g, failed_on=served + dt.timedelta(days=30), cause="gpu", actor=SYSTEM)
    rates = infant_rates_by_model(as_of=dt.date(2026, 1, 1))
    assert rates[model.pk]["n"] == 25 and rates[model.pk]["k"] == 5
    assert rates[model.pk]["rate"] == pytest.approx(-math.log(0.8) * 365.25 / 90)
    run = forecast.forecast_compute(as_of=dt.date(2026, 1, 2), lead_days=90, actor=SYSTEM)
    row = Forecast.objects.filter(run=run, gpu_model=model, scope="model").get()
    assert row.inputs["infant"]["k"] == 5
    # The measured rate is read as of the first origin (no look-ahead): it exists once the cohort's 90-day window
    # closed (April 1st), so a backtest starting before then has none to apply.
    early = forecast.backtest_run(date_from=dt.date(2025, 2, 1), date_to=dt.date(2025, 6, 1), lead_days=90)
    assert early["infant"] == []
    result = forecast.backtest_run(date_from=dt.date(2025, 5, 1), date_to=dt.date(2025, 6, 1), lead_days=90)
    [effect] = result["infant"]  # what the measured rate changed, per model
    assert effect["model"] == model.name and effect["k"] == 5
    assert set(effect["with"]) == set(effect["without"]) == {"fill_rate", "mean_stock"}
    assert effect["with"]["mean_stock"] >= effect["without"]["mean_stock"]


@pytest.mark.django_db
def test_the_measured_rate_as_of_a_date_reads_nothing_dated_on_or_after_it():
    """Twenty boards in service since January (their 90-day window closed in April), two failing early before
    June 1st; five entering service in May, one failing on June 10th; a burn-in failure on June 5th. As of June 1st
    the rate rests on the twenty and their two failures only: the May boards' window is still open with no failure
    yet, and rows dated later change nothing."""
    site, model = factories.site(), factories.gpu_model()
    BurnInPolicy.objects.create(gpu_model=model, min_level=2, required_runs=1, min_hours=0, infant_days=90)
    as_of = dt.date(2025, 6, 1)

    def boards(n: int, served: dt.date) -> list:
        gpus = [factories.gpu(state="in_service") for _ in range(n)]
        for g in gpus:
            GpuAsset.objects.create(gpu=g, model=model, site=site, in_service_on=served, batch="LOT-1")
        return gpus

    def fail(gpu, day: dt.date) -> None:
        inventory_services.gpu_transition(gpu=gpu, to_state="drained", actor=SYSTEM)
        failure_record(gpu=gpu, failed_on=day, cause="gpu", actor=SYSTEM)

    early = boards(20, dt.date(2025, 1, 1))
    for g in early[:2]:
        fail(g, dt.date(2025, 1, 20))
    may = boards(5, dt.date(2025, 5, 1))
    fail(may[0], dt.date(2025, 6, 10))
    GpuStateChange.objects.create(gpu=factories.gpu(state="burn_in"), from_state="burn_in",
                                  to_state="burn_in_failed", actor_name="t",
                                  at=dt.datetime(2025, 6, 5, 12, tzinfo=dt.UTC))
    before = infant_rates_by_model(as_of=as_of)
    assert (before[model.pk]["n"], before[model.pk]["k"]) == (20, 2)
    fail(may[1], dt.date(2025, 7, 1))  # more early failures, all after the date
    fail(boards(3, dt.date(2025, 8, 1))[0], dt.date(2025, 8, 5))
    assert infant_rates_by_model(as_of=as_of) == before
    # Once the date is past them they count: the May cohort's window closed in July with two early failures.
    later = infant_rates_by_model(as_of=dt.date(2025, 8, 1))
    assert (later[model.pk]["n"], later[model.pk]["k"]) == (26, 5)
