"""Demand distributions and stock levels: Poisson and negative binomial lead-time demand, the fill-rate loss
function, and the smallest stock that meets a fill-rate target. Pure numpy/scipy, no Django.

Fill rate here is the type-2 service level: the share of demand met from stock. With stock ``S`` held against
lead-time demand ``D``, the demand not met is the loss function ``E[(D - S)+]``, so the fill rate is
``1 - E[(D - S)+] / E[D]``. The cycle service level (the chance of no stock-out, type 1) is ``P(D <= S)``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

# The demand distribution's upper tail beyond this probability is ignored when searching for a stock level.
_TAIL = 1e-9


@dataclass(frozen=True)
class Demand:
    """Lead-time demand with mean ``mean`` and variance ``var``: Poisson when ``var <= mean``, else negative
    binomial with ``n = mean**2 / (var - mean)``, ``p = mean / var`` (scipy's parameterisation)."""

    mean: float
    var: float

    @property
    def overdispersed(self) -> bool:
        return self.var > self.mean * (1 + 1e-9) and self.mean > 0

    def dist(self):  # type: ignore[no-untyped-def]  # a frozen scipy distribution
        return _dist(self.mean, self.var if self.overdispersed else None)

    def quantile(self, q: float) -> int:
        return int(self.dist().ppf(q)) if self.mean > 0 else 0

    def _sf_table(self, upto: int | None = None) -> np.ndarray:
        """``P(D > k)`` for k = 0 .. K, K far enough into the tail that the rest is negligible."""
        top = upto if upto is not None else int(self.dist().ppf(1 - _TAIL)) + 2
        return self.dist().sf(np.arange(top + 1))

    def loss(self, stock: int) -> float:
        """``E[(D - S)+]``, the expected demand not met from ``stock``: ``E[D] - sum_{k<S} P(D > k)``."""
        if self.mean <= 0:
            return 0.0
        if stock <= 0:
            return self.mean
        sf = self._sf_table(upto=stock - 1)
        return max(self.mean - float(sf.sum()), 0.0)

    def fill_rate(self, stock: int) -> float:
        """Share of demand met from ``stock`` (type-2 service level)."""
        return 1.0 if self.mean <= 0 else 1.0 - self.loss(stock) / self.mean

    def cycle_service_level(self, stock: int) -> float:
        """Chance that lead-time demand does not exceed ``stock`` (type-1 service level)."""
        return 1.0 if self.mean <= 0 else float(self.dist().cdf(stock))

    def stock_for_fill_rate(self, target: float) -> int:
        """The smallest stock whose fill rate reaches ``target``."""
        if self.mean <= 0 or target <= 0:
            return 0
        sf = self._sf_table()
        met = np.cumsum(sf) / self.mean  # met[S-1] = fill rate of stock S
        hit = np.flatnonzero(met >= target - 1e-12)
        return int(hit[0]) + 1 if hit.size else len(sf)

    def stock_for_service_level(self, target: float) -> int:
        """The smallest stock with ``P(D <= S) >= target``."""
        return self.quantile(target)


@functools.lru_cache(maxsize=256)
def _dist(mean: float, var: float | None):  # type: ignore[no-untyped-def]
    """Frozen distributions are costly to build (scipy formats their docstrings): one per (mean, variance)."""
    if var is not None:
        return stats.nbinom(mean ** 2 / (var - mean), mean / var)
    return stats.poisson(max(mean, 0.0))


def poisson_loss_closed_form(mean: float, stock: int) -> float:
    """``E[(D - S)+]`` for Poisson demand: ``(mu - S) P(D > S) + mu P(D = S)`` (for tests and docs)."""
    return (mean - stock) * float(stats.poisson.sf(stock, mean)) + mean * float(stats.poisson.pmf(stock, mean))


def crow_amsaa(times: np.ndarray, total: float) -> tuple[float | None, float | None]:
    """Crow-AMSAA (power-law NHPP) on failure times ``times`` in (0, total], time truncated.

    Returns ``(beta, p)``: the MLE ``beta = n / sum(ln(T / t_i))`` and the one-sided p-value of "the rate is
    rising" (``2n / beta`` is chi-square with ``2n`` degrees of freedom when beta is 1). Time is exposure
    (GPU-years), so a growing fleet alone does not look like a rising rate.
    """
    times = times[(times > 0) & (times <= total)]
    n = len(times)
    if n < 3 or total <= 0:
        return None, None
    denom = float(np.log(total / times).sum())
    if denom <= 0:
        return None, None
    beta = n / denom
    p = float(stats.chi2.cdf(2 * n / beta, 2 * n))
    return beta, p


def rate_interval(failures: float, exposure: float, level: float = 0.9) -> tuple[float, float]:
    """Exact (Garwood) interval of a Poisson rate: ``failures`` in ``exposure`` unit-years."""
    if exposure <= 0:
        return 0.0, math.inf
    alpha = 1 - level
    lo = stats.gamma.ppf(alpha / 2, failures) / exposure if failures > 0 else 0.0
    hi = stats.gamma.ppf(1 - alpha / 2, failures + 1) / exposure
    return float(lo), float(hi)
