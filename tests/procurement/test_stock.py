"""Forecast math against closed forms: Poisson and negative binomial quantiles, the fill-rate loss function,
Crow-AMSAA."""

import numpy as np
import pytest
from scipy import stats

from procurement.forecasting.stock import Demand, crow_amsaa, poisson_loss_closed_form, rate_interval


@pytest.mark.parametrize("mu", [0.4, 3.0, 74.0, 250.0])
def test_poisson_loss_matches_closed_form(mu):
    d = Demand(mu, mu)
    assert not d.overdispersed
    for s in (0, 1, int(mu), int(mu * 1.3) + 2):
        assert d.loss(s) == pytest.approx(poisson_loss_closed_form(mu, s), abs=1e-9)


def test_poisson_quantile_matches_the_design_note():
    # reliability.md 2.1: 10k GPUs at 3 %/yr over 90 days: mu = 74 -> S = 88 at 95 % CSL.
    d = Demand(74.0, 74.0)
    assert d.stock_for_service_level(0.95) == 88 == int(stats.poisson.ppf(0.95, 74))
    assert d.cycle_service_level(88) >= 0.95 > d.cycle_service_level(87)


def test_negative_binomial_parameters_and_quantile():
    d = Demand(74.0, 3 * 74.0)  # VMR 3
    n, p = 74.0 ** 2 / (222.0 - 74.0), 74.0 / 222.0
    assert d.dist().mean() == pytest.approx(74.0)
    assert d.dist().var() == pytest.approx(222.0)
    assert d.quantile(0.95) == int(stats.nbinom.ppf(0.95, n, p))
    assert d.quantile(0.95) > Demand(74.0, 74.0).quantile(0.95)


def test_nb_loss_is_the_sum_of_the_tail():
    d = Demand(20.0, 60.0)
    x = np.arange(0, 2000)
    pmf = d.dist().pmf(x)
    for s in (0, 10, 25, 40):
        assert d.loss(s) == pytest.approx(float((np.clip(x - s, 0, None) * pmf).sum()), abs=1e-7)


def test_stock_for_fill_rate_is_the_smallest_that_reaches_it():
    for d in (Demand(74.0, 74.0), Demand(74.0, 300.0), Demand(2.5, 2.5)):
        s = d.stock_for_fill_rate(0.95)
        assert d.fill_rate(s) >= 0.95 > d.fill_rate(s - 1)
        # A fill-rate target needs less stock than the same cycle service level (type 2 <= type 1).
        assert s <= d.stock_for_service_level(0.95)


def test_zero_demand_needs_no_stock():
    assert Demand(0.0, 0.0).stock_for_fill_rate(0.95) == 0
    assert Demand(0.0, 0.0).fill_rate(0) == 1.0


def test_crow_amsaa_on_a_homogeneous_process_is_near_one_and_detects_a_rising_rate():
    rng = np.random.default_rng(4)
    flat = np.sort(rng.uniform(0, 100, 400))
    beta, p = crow_amsaa(flat, 100.0)
    assert 0.85 < beta < 1.15 and p > 0.01
    rising = 100 * np.sort(rng.uniform(0, 1, 400)) ** (1 / 2.5)  # N(t) ~ t^2.5
    beta, p = crow_amsaa(rising, 100.0)
    assert 2.2 < beta < 2.8 and p < 1e-6


def test_rate_interval_is_garwood():
    lo, hi = rate_interval(5, 500.0)
    assert lo == pytest.approx(stats.chi2.ppf(0.05, 10) / 2 / 500)
    assert hi == pytest.approx(stats.chi2.ppf(0.95, 12) / 2 / 500)
