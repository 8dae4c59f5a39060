"""The backtest on synthetic histories with a known truth: the adaptive policy reaches its fill-rate target where
a plain Poisson policy does not; pooling needs less stock than the sum of the sites."""

import datetime as dt

import numpy as np
import pytest

from procurement.forecasting import backtest as bt
from procurement.forecasting import engine, synthetic

ORIGINS = bt.month_starts(dt.date(2016, 1, 1), dt.date(2019, 12, 1))


def run(scenario, method, seed=3, gpus=10_000):
    h = synthetic.generate(scenario, gpus=gpus, seed=seed).history()
    return bt.backtest(h, np.ones(len(h.cells), bool), origins=ORIGINS, lead_days=90, target=0.95, method=method)


def test_a_known_steady_rate_is_recovered():
    h = synthetic.generate("steady", gpus=10_000, seed=5).history()
    stats = engine.cell_stats(h, as_of=bt.day(dt.date(2018, 1, 1)), lead_days=90)
    f = engine.scope_forecast(stats, np.ones(len(h.cells), bool), target=0.95)
    assert f.rate_lo < 0.03 < f.rate_hi
    assert f.rate == pytest.approx(0.03, rel=0.2)
    assert f.installed == 10_000
    assert not f.alert


@pytest.mark.parametrize("scenario", ["bursts", "bad_batch"])
def test_policy_reaches_the_target_where_poisson_does_not(scenario):
    poisson = run(scenario, engine.POISSON)
    adaptive = run(scenario, engine.ADAPTIVE)
    assert poisson.policy.fill_rate < 0.93
    assert adaptive.policy.fill_rate >= 0.95  # the target, the bad batch's unforeseeable onset included
    assert adaptive.policy.stockout_windows < poisson.policy.stockout_windows
    assert adaptive.policy.mean_stock < 0.75 * adaptive.rules["2%"].mean_stock  # well below a 2 % rule's stock


@pytest.mark.parametrize("scenario", ["steady", "quiet"])
def test_policy_reaches_the_target_without_a_regime_change(scenario):
    adaptive = run(scenario, engine.ADAPTIVE)
    assert adaptive.policy.fill_rate >= 0.95
    assert adaptive.policy.mean_stock < 0.75 * adaptive.rules["2%"].mean_stock


def test_wear_out_is_followed_by_the_trend():
    assert run("wear_out", engine.POISSON).policy.fill_rate < 0.6
    assert run("wear_out", engine.ADAPTIVE, seed=1).policy.fill_rate >= 0.95


def test_bad_batch_raises_an_alert_within_two_months_of_onset():
    h = synthetic.generate("bad_batch", gpus=10_000, seed=3).history()
    onset = dt.date(2015, 1, 1) + dt.timedelta(days=30 * 30.4375)
    before = engine.cell_stats(h, as_of=bt.day(onset - dt.timedelta(days=5)), lead_days=90)
    after = engine.cell_stats(h, as_of=bt.day(onset + dt.timedelta(days=61)), lead_days=90)
    mask = np.ones(len(h.cells), bool)
    assert not engine.scope_forecast(before, mask, target=0.95).alert
    late = engine.scope_forecast(after, mask, target=0.95)
    assert "Rate change" in late.alert


def test_pooled_stock_is_below_the_sum_of_the_sites():
    h = synthetic.generate("steady", gpus=20_000, sites=6, seed=2).history()
    stats = engine.cell_stats(h, as_of=bt.day(dt.date(2018, 6, 1)), lead_days=90)
    per_site = [engine.scope_forecast(stats, np.arange(len(h.cells)) == i, target=0.95).recommended
                for i in range(len(h.cells))]
    pooled = engine.scope_forecast(stats, np.ones(len(h.cells), bool), target=0.95).recommended
    assert pooled < sum(per_site)


def test_the_forecast_reads_nothing_at_or_after_as_of():
    h = synthetic.generate("steady", gpus=3_000, seed=7).history()
    as_of = bt.day(dt.date(2017, 3, 1))
    cut = h.subset(np.ones(len(h.cells), bool))
    cut.fail_day, keep = h.fail_day[h.fail_day < as_of], h.fail_day < as_of
    cut.fail_cell, cut.fail_batch, cut.fail_start = h.fail_cell[keep], h.fail_batch[keep], h.fail_start[keep]
    a = engine.scope_forecast(engine.cell_stats(h, as_of=as_of, lead_days=90), np.ones(len(h.cells), bool),
                              target=0.95)
    b = engine.scope_forecast(engine.cell_stats(cut, as_of=as_of, lead_days=90), np.ones(len(h.cells), bool),
                              target=0.95)
    assert a == b
