"""The backtest on synthetic histories with a known truth: the adaptive policy reaches its fill-rate target where
a plain Poisson policy does not; pooling needs less stock than the sum of the sites.

The method was tuned on seeds 1, 2 and 3 (``TUNING_SEEDS``, docs/procurement.md); these tests run on seeds it was
not tuned on (``TEST_SEEDS``). Each assertion's message carries the measured figure; a held-out shortfall is a test
marked as one (xfail, with the figures in its reason), and docs/procurement.md reports it as a shortfall."""

import datetime as dt

import numpy as np
import pytest

from procurement.forecasting import backtest as bt
from procurement.forecasting import engine, synthetic

ORIGINS = bt.month_starts(dt.date(2016, 1, 1), dt.date(2019, 12, 1))
# Months of history from 2015-01: through 2020-03, so that the last origin's lead time (2019-12-01 + 90 days) lies
# inside it (60 months end 2019-12-31: the last two windows would count one and two months of failures, not three).
MONTHS = 63
TUNING_SEEDS = (1, 2, 3)
TEST_SEEDS = (4, 5, 6)


def run(scenario, method, seed, gpus=10_000, calibrate=True):
    assert seed not in TUNING_SEEDS
    h = synthetic.generate(scenario, gpus=gpus, seed=seed, months=MONTHS).history()
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


def figures(result: bt.Backtest) -> str:
    rules = ", ".join(f"{k} rule {r.fill_rate:.3f} / {r.mean_stock:.0f}" for k, r in result.rules.items())
    return f"policy {result.policy.fill_rate:.3f} / {result.policy.mean_stock:.0f}; {rules}"


@pytest.mark.parametrize("seed", TEST_SEEDS)
def test_bursts_reach_the_target_where_plain_poisson_does_not(seed):
    poisson = run("bursts", engine.POISSON, seed, calibrate=False)
    adaptive = run("bursts", engine.ADAPTIVE, seed)
    assert adaptive.policy.fill_rate >= 0.95, figures(adaptive)
    assert adaptive.policy.fill_rate > poisson.policy.fill_rate, (poisson.policy, figures(adaptive))
    # well below a 2 % rule's stock
    assert adaptive.policy.mean_stock < 0.75 * adaptive.rules["2%"].mean_stock, figures(adaptive)


DOMINATED = pytest.mark.xfail(reason="A held-out shortfall: on seeds 4 and 6 the 1 % rule reaches the target with "
                                     "100 (fill 0.973, 0.999) while the policy holds 115 and 104 (fill 0.951, 0.985). "
                                     "It takes the 1 % rule (held at the forecast's own stock while the forecast "
                                     "alerts) at 43 and 24 of 48 origins; the alerts of bursts are mostly false alarms, "
                                     "and the rule alone is not a candidate: judged so, the tuning seeds' bad batch "
                                     "fell to 0.925-0.931 (docs/procurement.md). On seed 5 the 1 % rule is short "
                                     "(0.947)", strict=True)


@pytest.mark.parametrize("seed", [pytest.param(s, marks=DOMINATED) if s in (4, 6) else s for s in TEST_SEEDS])
def test_bursts_are_not_dominated_by_a_fixed_rule(seed):
    adaptive = run("bursts", engine.ADAPTIVE, seed)
    assert bt.dominated_by(adaptive.as_dict()) == [], figures(adaptive)


@pytest.mark.parametrize("seed", TEST_SEEDS)
def test_bad_batch_reaches_the_target_far_above_plain_poisson(seed):
    """Held out, 0.959-0.966 against the 0.95 target with mean stock 132-141 (162-169 before calibration judged
    each sizing as the policy holds it; 0.934-0.962, short on seeds 4 and 5, before the policy held the forecast's
    own stock while the forecast alerts); plain Poisson 0.78-0.81."""
    poisson = run("bad_batch", engine.POISSON, seed, calibrate=False)
    adaptive = run("bad_batch", engine.ADAPTIVE, seed)
    assert poisson.policy.fill_rate < 0.85, poisson.policy
    assert adaptive.policy.fill_rate >= 0.95, figures(adaptive)
    assert bt.dominated_by(adaptive.as_dict()) == [], figures(adaptive)
    assert adaptive.policy.stockout_windows < poisson.policy.stockout_windows, (poisson.policy, adaptive.policy)
    assert adaptive.policy.mean_stock < adaptive.rules["2%"].mean_stock, figures(adaptive)


@pytest.mark.parametrize("scenario", ["steady", "quiet", "wear_out"])
@pytest.mark.parametrize("seed", TEST_SEEDS)
def test_policy_reaches_the_target_without_a_regime_change(scenario, seed):
    adaptive = run(scenario, engine.ADAPTIVE, seed)
    assert adaptive.policy.fill_rate >= 0.95, figures(adaptive)
    assert bt.dominated_by(adaptive.as_dict()) == [], figures(adaptive)
    if scenario == "wear_out":
        assert run(scenario, engine.POISSON, seed, calibrate=False).policy.fill_rate < 0.7
    else:
        assert adaptive.policy.mean_stock < 0.75 * adaptive.rules["2%"].mean_stock, figures(adaptive)


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


def test_a_rule_that_met_the_target_with_less_stock_is_never_undercut():
    """On random scored windows, some of them with the forecast alerting: whenever a fixed rule, held as the policy
    holds it (computed here, not by the module: the rule's share, never below the forecast while it alerts),
    reached the target, the sizing calibration picks holds no more mean stock over those windows than that rule."""
    rng = np.random.default_rng(44)
    for _ in range(300):
        n = int(rng.integers(12, 30))
        installed = rng.integers(50, 2_000, n).astype(float)
        demand = rng.poisson(installed * rng.uniform(0.002, 0.03)).astype(float)
        base = np.maximum(demand + rng.normal(0, 3 + demand.mean() / 4, n), 0).round()
        alerts = rng.random(n) < 0.15
        c = bt.choose(base, installed, demand, target=0.95, alerts=alerts)
        assert c.stock is not None
        for k in bt.RULES:
            stock = np.ceil(installed * k / 100)
            stock[alerts] = np.maximum(stock[alerts], base[alerts])
            fill = np.minimum(stock, demand).sum() / demand.sum() if demand.sum() else 1.0
            if fill >= 0.95:
                assert c.stock <= stock.mean() + 1e-9, (k, fill, stock.mean(), c)


def test_a_rule_is_judged_on_the_stock_the_policy_holds_with_it():
    """Fourteen windows on 500 GPUs: demand 3 where the forecast said 10, and 30 in two windows where it alerted
    and said 40 (a bad batch). The 1 % rule alone (5) covered 46 of 96 failures, but the policy never holds a rule
    below the forecast while it alerts: held so, the rule covered all 96 with mean stock (12 x 5 + 2 x 40) / 14 =
    10, less than the forecast's 14.3. Judged on the rule alone, no rule reached the target and the forecast
    (14.3) was used: after a bad batch the policy held more than the rule it had held through it, for as long as
    the batch's windows were among the scored ones."""
    base = np.array([10.0] * 12 + [40.0, 40.0])
    installed = np.full(14, 500.0)
    demand = np.array([3.0] * 12 + [30.0, 30.0])
    alerts = np.array([False] * 12 + [True, True])
    c = bt.choose(base, installed, demand, target=0.95, alerts=alerts)
    assert (c.name, c.fill, c.stock, round(c.base_stock, 2)) == ("1% rule", 1.0, 10.0, round(200 / 14, 2))
    assert bt.choose(base, installed, demand, target=0.95).name == "forecast"  # the rule as if never held
    assert bt.sized(c, 10.0, 500.0, False) == 5 and bt.sized(c, 40.0, 500.0, True) == 40


def test_a_rule_needs_the_target_and_a_sizing_of_the_forecast_the_target_plus_its_margin():
    """Forecast 10, 2 % rule 6 (on 300 GPUs), demand 6 in ten windows and 9 in two: the rule fills 72 / 78 = 0.923
    and the 3 % rule (9) 1.0 with 9; the forecast fills 1.0 with 10: the 3 % rule. Demand 6 in eleven windows
    and 8 in one: the 2 % rule fills 72 / 74 = 0.973, the target but not the target plus the margin, and it is
    used all the same: a rule that met the target with less stock is never undercut by a dearer sizing."""
    base, installed = np.full(12, 10.0), np.full(12, 300.0)
    assert bt.choose(base, installed, np.array([6.0] * 10 + [9.0, 9.0]), target=0.95).name == "3% rule"
    c = bt.choose(base, installed, np.array([6.0] * 11 + [8.0]), target=0.95)
    assert (c.name, round(c.fill, 4), c.stock) == ("2% rule", round(72 / 74, 4), 6.0)


def test_calibration_falls_back_to_the_least_stock_that_reached_the_target():
    """No candidate reaches the target plus the margin (the forecast said 10 and 0 where 15 and 40 came: no scale
    of it covers those); the forecast x 1 reaches the target (1,010 of 1,055 = 0.957): it is used, not the
    candidate with the highest fill (x 1.5: 0.962) and the most stock. Nothing reaches 0.97: the highest fill."""
    base = np.array([100.0] * 10 + [10.0, 0.0])
    installed = np.full(12, 100.0)  # rules hold 1-5
    demand = np.array([100.0] * 10 + [15.0, 40.0])
    c = bt.choose(base, installed, demand, target=0.95)
    assert (c.name, round(c.fill, 4), round(c.stock, 2)) == ("forecast", round(1010 / 1055, 4), round(1010 / 12, 2))
    assert bt.choose(base, installed, demand, target=0.97).name == "forecast x 1.5"


def test_windows_before_the_first_gpu_entered_service_do_not_count_toward_calibration():
    """Eleven windows with GPUs in service and five before any: too few to calibrate (the forecast as it is)."""
    base = np.array([0.0] * 5 + [10.0] * 11)
    installed = np.array([0.0] * 5 + [500.0] * 11)
    demand = np.array([0.0] * 5 + [3.0] * 11)
    c = bt.choose(base, installed, demand, target=0.95)
    assert (c.name, c.scored) == ("forecast", 11)
    c = bt.choose(np.append(base, 10.0), np.append(installed, 500.0), np.append(demand, 3.0), target=0.95)
    assert (c.name, c.scored) == ("1% rule", 12)


def test_the_policy_holds_the_forecast_s_own_stock_while_it_alerts():
    """Calibration picked the 1 % rule (5 on 500 GPUs); at an origin where the forecast alerts (40), the policy
    holds 40, and the rule again once the alert is gone."""
    n = 16
    days = np.arange(n) * 100.0
    base = np.array([10.0] * 14 + [40.0, 10.0])
    alerts = np.array([False] * 14 + [True, False])
    stock, choices = bt.calibrated(base, np.full(n, 500.0), np.full(n, 3.0), days, lead_days=90, target=0.95,
                                   alerts=alerts)
    assert [c.name for c in choices[12:]] == ["1% rule"] * 4
    assert list(stock[12:]) == [5.0, 5.0, 40.0, 5.0]


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
