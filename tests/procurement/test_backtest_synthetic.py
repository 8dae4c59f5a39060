"""The backtest on synthetic histories with a known truth: the adaptive policy reaches its fill-rate target where
a plain Poisson policy does not; pooling needs less stock than the sum of the sites.

The method was tuned on seeds 1, 2 and 3 (``TUNING_SEEDS``, docs/procurement.md); these tests run on seeds it was
not tuned on (``TEST_SEEDS``). Where a held-out seed falls short of the target the test pins the shortfall's
bound and the README reports it as a shortfall."""

import datetime as dt

import numpy as np
import pytest

from procurement.forecasting import backtest as bt
from procurement.forecasting import engine, synthetic

ORIGINS = bt.month_starts(dt.date(2016, 1, 1), dt.date(2019, 12, 1))
TUNING_SEEDS = (1, 2, 3)
TEST_SEEDS = (4, 5, 6)


def run(scenario, method, seed, gpus=10_000, calibrate=True):
    assert seed not in TUNING_SEEDS
    h = synthetic.generate(scenario, gpus=gpus, seed=seed).history()
    return bt.backtest(h, np.ones(len(h.cells), bool), origins=ORIGINS, lead_days=90, target=0.95, method=method,
                       calibrate=calibrate)


def test_a_known_steady_rate_is_recovered():
    h = synthetic.generate("steady", gpus=10_000, seed=5).history()  # seed 5: not a tuning seed
    stats = engine.cell_stats(h, as_of=bt.day(dt.date(2018, 1, 1)), lead_days=90)
    f = engine.scope_forecast(stats, np.ones(len(h.cells), bool), target=0.95)
    assert f.rate_lo < 0.03 < f.rate_hi
    assert f.rate == pytest.approx(0.03, rel=0.2)
    assert f.installed == 10_000
    assert not f.alert


@pytest.mark.parametrize("seed", TEST_SEEDS)
def test_bursts_reach_the_target_where_plain_poisson_does_not(seed):
    poisson = run("bursts", engine.POISSON, seed, calibrate=False)
    adaptive = run("bursts", engine.ADAPTIVE, seed)
    assert adaptive.policy.fill_rate >= 0.95
    assert adaptive.policy.fill_rate > poisson.policy.fill_rate
    assert adaptive.policy.mean_stock < 0.75 * adaptive.rules["2%"].mean_stock  # well below a 2 % rule's stock


@pytest.mark.parametrize("seed", TEST_SEEDS)
def test_bad_batch_far_above_plain_poisson_and_its_shortfall_bounded(seed):
    """A shortfall on held-out seeds (README): 0.934-0.962 against the 0.95 target; plain Poisson 0.78-0.81."""
    poisson = run("bad_batch", engine.POISSON, seed, calibrate=False)
    adaptive = run("bad_batch", engine.ADAPTIVE, seed)
    assert poisson.policy.fill_rate < 0.85
    assert adaptive.policy.fill_rate >= 0.93
    assert adaptive.policy.stockout_windows < poisson.policy.stockout_windows
    assert adaptive.policy.mean_stock < adaptive.rules["2%"].mean_stock


@pytest.mark.parametrize("scenario", ["steady", "quiet", "wear_out"])
@pytest.mark.parametrize("seed", TEST_SEEDS)
def test_policy_reaches_the_target_without_a_regime_change(scenario, seed):
    adaptive = run(scenario, engine.ADAPTIVE, seed)
    assert adaptive.policy.fill_rate >= 0.95
    assert bt.dominated_by(adaptive.as_dict()) == []
    if scenario == "wear_out":
        assert run(scenario, engine.POISSON, seed, calibrate=False).policy.fill_rate < 0.7
    else:
        assert adaptive.policy.mean_stock < 0.75 * adaptive.rules["2%"].mean_stock


def test_calibration_reads_only_windows_over_before_each_origin():
    """Changing the demand of every window that ends after an origin leaves that origin's sizing unchanged."""
    rng = np.random.default_rng(4)
    days = np.arange(40) * 30.0
    base = rng.integers(5, 15, 40).astype(float)
    installed = np.full(40, 500.0)
    demand = rng.integers(0, 20, 40).astype(float)
    stock, choices = bt.calibrated(base, installed, demand, days, lead_days=90, target=0.95)
    for i in range(40):
        changed = demand.copy()
        changed[days + 90 > days[i]] = 99  # every window not over at origin i
        s2, c2 = bt.calibrated(base, installed, changed, days, lead_days=90, target=0.95)
        assert s2[i] == stock[i] and c2[i] == choices[i]


def test_calibration_picks_a_cheaper_rule_that_reached_the_target():
    """Twelve windows over: a forecast of 10 against demand 3 (fill 1.0, stock 10) and a 1 % rule of 5 on 500
    GPUs (fill 1.0, stock 5): the rule reaches the target with half the stock, so it is used."""
    n = 14
    days = np.arange(n) * 100.0
    c = bt.choose(np.full(n - 2, 10.0), np.full(n - 2, 500.0), np.full(n - 2, 3.0), target=0.95)
    assert (c.name, c.fill, c.stock, c.base_fill, c.base_stock) == ("1% rule", 1.0, 5.0, 1.0, 10.0)
    stock, _ = bt.calibrated(np.full(n, 10.0), np.full(n, 500.0), np.full(n, 3.0), days, lead_days=90,
                             target=0.95)
    assert list(stock[:12]) == [10.0] * 12 and list(stock[12:]) == [5.0, 5.0]


def test_bad_batch_raises_an_alert_within_two_months_of_onset():
    h = synthetic.generate("bad_batch", gpus=10_000, seed=4).history()
    onset = dt.date(2015, 1, 1) + dt.timedelta(days=30 * 30.4375)
    before = engine.cell_stats(h, as_of=bt.day(onset - dt.timedelta(days=5)), lead_days=90)
    after = engine.cell_stats(h, as_of=bt.day(onset + dt.timedelta(days=61)), lead_days=90)
    mask = np.ones(len(h.cells), bool)
    assert not engine.scope_forecast(before, mask, target=0.95).alert
    late = engine.scope_forecast(after, mask, target=0.95)
    assert "Rate change" in late.alert


def test_pooled_stock_is_below_the_sum_of_the_sites():
    h = synthetic.generate("steady", gpus=20_000, sites=6, seed=6).history()
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
