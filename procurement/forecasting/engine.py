"""The spares forecast on plain arrays: failure history in, a rate with its uncertainty, lead-time demand and
the stock for a fill-rate target out. No Django: the service loads the arrays (only rows before ``as_of``), the
backtest and the benchmark call the same functions.

Time is in days since 1970-01-01. The history before ``as_of`` is cut into ``BUCKETS`` months; per cell (one site
and model) the engine counts failures and GPU-years of exposure per month, and per stratum (manufacturing batch x
age band) their exponentially weighted totals. A scope (a site and model, a spares pool, a model fleet-wide) sums
its cells, so pooling is a sum of arrays, never a second pass over the GPUs.

Methods (``Method``), chosen by backtest (docs/procurement.md has the figures):

- ``poisson``: the long-run rate of the window, Poisson demand: the textbook policy.
- ``nb``: the same rate, negative binomial demand with the variance-to-mean ratio of the monthly counts.
- ``adaptive`` (the default): a recency-weighted rate per batch and age band (shrunk to the scope's rate),
  the recent rate when a rate-change test fires, negative binomial demand whose variance adds the monthly
  overdispersion and the rate's own uncertainty.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from procurement.forecasting.stock import Demand, crow_amsaa, rate_interval

MONTH = 30.4375
YEAR = 365.25
NEVER = 2 ** 40  # a removal day for GPUs still in the fleet
AGE_BANDS = np.array([90.0, 3 * YEAR])  # infant (< 90 days), useful life, wear-out (> 3 years)
N_BANDS = len(AGE_BANDS) + 1


@dataclass(frozen=True)
class Method:
    name: str = "adaptive"
    buckets: int = 24  # months of history the forecast reads
    half_life: float = 6.0  # months: weight of a month's failures halves every half_life months back
    recent_windows: tuple[int, ...] = (1, 3)  # months in the rate-change test's recent windows
    trend: bool = True  # project a significant linear trend of the monthly rate to mid lead time
    change_p: float = 0.01  # significance of the rate-change test
    strata: bool = True  # per batch and age band
    overdispersion: bool = True
    dispersion_level: float = 0.9  # the dispersion used is the upper end of this one-sided interval
    rate_uncertainty: bool = True
    prior_rate: float = 0.03  # failures per GPU-year before any history (vendor AFR)
    prior_weight: float = 1.0  # in failures
    # Stock is sized on this one-sided upper credible bound of the rate (gamma posterior on the weighted failures),
    # not its mean (None): the fill target is met over the windows a rate change cannot be foreseen in.
    rate_level: float | None = 0.9


POISSON = Method(name="poisson", half_life=math.inf, recent_windows=(), trend=False, strata=False, overdispersion=False,
                 rate_uncertainty=False, rate_level=None)
NB = Method(name="nb", half_life=math.inf, recent_windows=(), trend=False, dispersion_level=0.5, strata=False, rate_uncertainty=False,
            rate_level=None)
ADAPTIVE = Method()
METHODS = {m.name: m for m in (POISSON, NB, ADAPTIVE)}


@dataclass
class History:
    """One row per GPU (in service from ``start``, out of the fleet at ``end``), one row per failure.

    ``cell`` indexes ``cells`` (``(site key, model key)``); ``batch`` indexes ``batches`` (-1: none)."""

    start: np.ndarray
    end: np.ndarray
    cell: np.ndarray
    batch: np.ndarray
    fail_day: np.ndarray
    fail_cell: np.ndarray
    fail_batch: np.ndarray
    fail_start: np.ndarray  # the failed GPU's in-service day (for its age)
    cells: list[tuple[object, object]] = field(default_factory=list)
    batches: list[str] = field(default_factory=list)
    boards: np.ndarray | None = None  # how many GPUs each row stands for (None: one each; ``collapsed``)

    def subset(self, cell_mask: np.ndarray) -> History:
        g, f = cell_mask[self.cell], cell_mask[self.fail_cell]
        return History(self.start[g], self.end[g], self.cell[g], self.batch[g], self.fail_day[f], self.fail_cell[f],
                       self.fail_batch[f], self.fail_start[f], self.cells, self.batches,
                       None if self.boards is None else self.boards[g])

    def collapsed(self) -> History:
        """The same history with the GPUs that share a start, an end, a cell and a batch as one row, ``boards``
        counting them: GPUs go into service by the server and the delivery, so a forecast that reads the history
        at many origins sums a third of the rows (the benchmark's 100,000 boards are 34,000 rows)."""
        order = np.lexsort((self.batch, self.cell, self.end, self.start))
        columns = [self.start[order], self.end[order], self.cell[order], self.batch[order]]
        new = np.zeros(len(order), dtype=bool)  # a row unlike the one before it
        new[:1] = True
        for c in columns:
            new[1:] |= c[1:] != c[:-1]
        row = np.cumsum(new) - 1
        boards = np.bincount(row, weights=None if self.boards is None else self.boards[order],
                             minlength=int(new.sum())).astype(float)
        return History(*(c[new] for c in columns), self.fail_day, self.fail_cell, self.fail_batch, self.fail_start,
                       self.cells, self.batches, boards)


@dataclass
class CellStats:
    as_of: float
    lead_days: float
    edges: np.ndarray  # bucket edges, days
    counts: np.ndarray  # (cells, buckets)
    exposure: np.ndarray  # (cells, buckets) GPU-years
    strat_fail: np.ndarray  # (cells, strata) weighted failures
    strat_exp: np.ndarray  # (cells, strata) weighted GPU-years
    strat_now: np.ndarray  # (cells, strata) GPUs in service at as_of, aged to mid lead time
    installed: np.ndarray  # (cells,)
    fail_cell: np.ndarray  # failures in the window: cell, bucket, position in the bucket (0..1)
    fail_bucket: np.ndarray
    fail_frac: np.ndarray


def _band(age_days: np.ndarray) -> np.ndarray:
    """The age band of each age: how many band limits it has reached (two comparisons cost a sixth of a search)."""
    band = np.zeros(np.shape(age_days), dtype=np.int64)
    for limit in AGE_BANDS:
        band += age_days >= limit
    return band


def cell_stats(h: History, *, as_of: float, lead_days: float, method: Method = ADAPTIVE) -> CellStats:
    """Per-cell monthly counts and exposure before ``as_of`` (rows at or after it are ignored)."""
    n_cells, n_batches = max(len(h.cells), 1), len(h.batches) + 1
    n_strata = n_batches * N_BANDS
    b = method.buckets
    edges = as_of - MONTH * np.arange(b, -1, -1, dtype=float)
    weights = 0.5 ** ((b - 1 - np.arange(b)) / method.half_life) if math.isfinite(method.half_life) else np.ones(b)
    mids = (edges[:-1] + edges[1:]) / 2

    # Boards in service before as_of and not gone before the window: the others add no exposure. A board's time in
    # the window, [lo, hi), covers the rest of its first bucket, whole buckets, and the start of its last one; over
    # the whole buckets its stratum moves to an older age band at most twice. So the sums are per board, not per
    # board and bucket (a sixth of the CPU on the benchmark's 100,000 boards; the same sums to 1e-13).
    boards = np.ones(len(h.start)) if h.boards is None else h.boards
    live = (h.start < as_of) & (h.end > edges[0])
    start, cell, stratum, n = h.start[live], h.cell[live], (h.batch[live] + 1) * N_BANDS, boards[live]
    lo, hi = np.maximum(start, edges[0]), np.minimum(h.end[live], as_of)
    first = np.searchsorted(edges, lo, side="right") - 1  # the buckets holding lo and hi
    last = np.maximum(np.searchsorted(edges, hi, side="left") - 1, first)
    head = np.clip(np.minimum(hi, edges[first + 1]) - lo, 0, None) * n / YEAR
    tail = np.where(last > first, hi - edges[last], 0.0) * n / YEAR
    span = np.diff(edges) / YEAR
    weighted = np.concatenate([[0.0], np.cumsum(span * weights)])  # weighted exposure of buckets 0 .. k-1
    flat = cell * b
    # (float: numpy's bincount of nothing is an integer array, even with weights)
    exposure = (np.bincount(flat + first, weights=head, minlength=n_cells * b)
                + np.bincount(flat + last, weights=tail, minlength=n_cells * b)).reshape(n_cells, b).astype(float)
    whole = last > first + 1  # whole buckets first + 1 .. last - 1
    steps = (np.bincount(flat[whole] + first[whole] + 1, weights=n[whole], minlength=n_cells * b)
             - np.bincount(flat[whole] + last[whole], weights=n[whole], minlength=n_cells * b)).reshape(n_cells, b)
    exposure += np.cumsum(steps, axis=1) * span[None, :]
    flat = cell * n_strata + stratum
    strat_exp = (np.bincount(flat + _band(mids[first] - start), weights=head * weights[first],
                             minlength=n_cells * n_strata)
                 + np.bincount(flat + _band(mids[last] - start), weights=tail * weights[last],
                               minlength=n_cells * n_strata)).astype(float)
    band_from = np.zeros(len(start), dtype=int)  # the first bucket (by its middle) in each age band
    for band, age in enumerate([*AGE_BANDS, math.inf]):
        band_to = np.searchsorted(mids, start + age) if math.isfinite(age) else np.full(len(start), b)
        top, bottom = np.minimum(band_to, last), np.maximum(band_from, first + 1)
        strat_exp += np.bincount(flat + band, weights=np.where(top > bottom, weighted[top] - weighted[bottom], 0.0) * n,
                                 minlength=n_cells * n_strata)
        band_from = band_to
    strat_exp = strat_exp.reshape(n_cells, n_strata)
    now = live & (h.end >= as_of)
    start, cell, batch, n = h.start[now], h.cell[now], h.batch[now] + 1, boards[now]
    aged = _band(as_of + lead_days / 2 - start)
    strat_now = np.bincount(cell * n_strata + batch * N_BANDS + aged, weights=n,
                            minlength=n_cells * n_strata).reshape(n_cells, n_strata).astype(float)
    installed = np.bincount(cell, weights=n, minlength=n_cells).astype(float)

    fm = (h.fail_day < as_of) & (h.fail_day >= edges[0])
    fday, fcell = h.fail_day[fm], h.fail_cell[fm]
    pos = (fday - edges[0]) / MONTH
    bucket = np.minimum(pos.astype(int), b - 1)
    counts = np.bincount(fcell * b + bucket, minlength=n_cells * b).reshape(n_cells, b).astype(float)
    fstrat = (h.fail_batch[fm] + 1) * N_BANDS + _band(fday - h.fail_start[fm])
    strat_fail = np.bincount(fcell * n_strata + fstrat, weights=weights[bucket],
                             minlength=n_cells * n_strata).reshape(n_cells, n_strata)
    return CellStats(as_of, lead_days, edges, counts, exposure, strat_fail, strat_exp, strat_now, installed,
                     fcell, bucket, pos - bucket)


@dataclass
class ScopeForecast:
    installed: int
    failures: int  # in the window
    exposure_years: float
    rate: float  # failures per GPU-year, the one the forecast uses
    rate_lo: float
    rate_hi: float
    recent_rate: float | None
    vmr: float  # variance-to-mean ratio of the monthly counts (1 = Poisson)
    demand_mean: float
    demand_var: float
    recommended: int
    fill_rate: float
    service_level: float
    beta: float | None  # Crow-AMSAA on exposure time
    beta_p: float | None
    change_p: float | None  # the rate-change test's p-value (recent months vs the months before)
    alert: str
    monthly_counts: list[int]
    monthly_exposure: list[float]

    @property
    def demand(self) -> Demand:
        return Demand(self.demand_mean, self.demand_var)


def _overdispersion(counts: np.ndarray, exposure: np.ndarray, level: float) -> float:
    """Pearson dispersion of monthly counts around a rate that may drift linearly (a trend alone is not noise)."""
    ok = exposure > 0
    if ok.sum() < 4 or counts[ok].sum() < 3:
        return 1.0
    c, e = counts[ok], exposure[ok]
    t = np.arange(len(c), dtype=float)
    rate = np.polyfit(t, c / e, 1, w=np.sqrt(e))
    expected = np.clip(np.polyval(rate, t) * e, 0.25, None)
    dof = max(len(c) - 2, 1)
    # The upper end of a one-sided interval of the dispersion (Pearson X2 is phi * chi2(dof)): two dozen
    # months estimate it loosely, and under-stating it is what runs a stock out.
    return max(1.0, float(((c - expected) ** 2 / expected).sum() / stats.chi2.ppf(1 - level, dof)))


def _trend(counts: np.ndarray, exposure: np.ndarray, *, ahead: float) -> float | None:
    """The monthly rate's weighted linear trend projected ``ahead`` months past the last month, when the slope
    is positive at the 1 % level; else None."""
    ok = exposure > 0
    if ok.sum() < 6 or counts[ok].sum() < 10:
        return None
    t = np.arange(len(counts), dtype=float)[ok]
    y, w = counts[ok] / exposure[ok], exposure[ok]
    tm = (w * t).sum() / w.sum()
    ym = (w * y).sum() / w.sum()
    sxx = (w * (t - tm) ** 2).sum()
    slope = (w * (t - tm) * (y - ym)).sum() / sxx
    # Poisson variance of each month's rate is rate / exposure.
    var_slope = (w ** 2 * (t - tm) ** 2 * (max(ym, 1e-9) / w)).sum() / sxx ** 2
    if slope <= 0 or slope / math.sqrt(var_slope) < 2.33:
        return None
    return float(ym + slope * (t[-1] + ahead - tm))


def scope_forecast(s: CellStats, cell_mask: np.ndarray, *, target: float, method: Method = ADAPTIVE,
                   infant_rate: float | None = None, infant_weight: float = 1.0) -> ScopeForecast:
    """The forecast of one scope: the cells ``cell_mask`` selects, pooled. ``infant_rate`` (failures per GPU-year
    in the youngest age band, measured by acceptance: procurement.services.infant) is what the youngest band's
    strata shrink to instead of the scope's all-ages rate, with the weight of the ``infant_weight`` early failures
    it was measured on."""
    counts = s.counts[cell_mask].sum(axis=0)
    exposure = s.exposure[cell_mask].sum(axis=0)
    installed = float(s.installed[cell_mask].sum())
    total_c, total_e = float(counts.sum()), float(exposure.sum())
    lead_years = s.lead_days / YEAR
    a = method.prior_weight
    prior = (a + total_c) / (a / method.prior_rate + total_e)  # the window's rate, shrunk to the prior

    if method.strata:
        fail = s.strat_fail[cell_mask].sum(axis=0)
        expo = s.strat_exp[cell_mask].sum(axis=0)
        now = s.strat_now[cell_mask].sum(axis=0)
        wf, we = float(fail.sum()), float(expo.sum())
        scope_rate = (a + wf) / (a / prior + we)
        rates = (a + fail) / (a / scope_rate + expo)  # each stratum shrunk to the scope's weighted rate
        if infant_rate is not None and infant_rate > 0:
            young = np.arange(len(rates)) % N_BANDS == 0
            w = max(infant_weight, a)
            rates[young] = (w + fail[young]) / (w / infant_rate + expo[young])
        mean = float((rates * now).sum()) * lead_years
        rate = mean / (installed * lead_years) if installed else scope_rate
        weight_failures = wf
    else:
        rate, weight_failures = prior, total_c
        mean = rate * installed * lead_years

    recent_rate = change_p = None
    for window in method.recent_windows:
        if len(counts) <= window + 3:
            continue
        rc, re_ = counts[-window:].sum(), exposure[-window:].sum()
        bc, be = counts[:-window][-12:].sum(), exposure[:-window][-12:].sum()
        if re_ <= 0 or be <= 0:
            continue
        expected = (bc + a) / (be + a / prior) * re_
        p = float(stats.poisson.sf(rc - 1, expected)) if rc > 0 else 1.0
        if change_p is None or p < change_p:
            recent_rate, change_p = float(rc / re_), p
        if p < method.change_p and rc / re_ > rate:
            rate = float(rc / re_)
            mean = rate * installed * lead_years
            weight_failures = float(rc)
    if method.trend:
        projected = _trend(counts[-12:], exposure[-12:], ahead=s.lead_days / 2 / MONTH + 0.5)
        if projected is not None and projected > rate:
            rate = projected
            mean = rate * installed * lead_years

    if method.rate_level is not None and mean > 0:
        k = a + weight_failures
        mean *= float(stats.gamma.ppf(method.rate_level, k)) / k
        rate = mean / (installed * lead_years) if installed else rate
    vmr = _overdispersion(counts, exposure, method.dispersion_level) if method.overdispersion else 1.0
    var = mean * vmr
    if method.rate_uncertainty:
        var += mean ** 2 / (a + weight_failures)
    demand = Demand(mean, max(var, mean))
    recommended = demand.stock_for_fill_rate(target)

    in_scope = cell_mask[s.fail_cell]
    cum = np.concatenate([[0.0], np.cumsum(exposure)])
    times = cum[s.fail_bucket[in_scope]] + s.fail_frac[in_scope] * exposure[s.fail_bucket[in_scope]]
    recent_cut = cum[-13] if len(cum) > 13 else 0.0
    beta, beta_p = crow_amsaa(times[times > recent_cut] - recent_cut, cum[-1] - recent_cut)
    alerts = []
    if beta is not None and beta_p is not None and beta > 1.5 and beta_p < 0.01:
        alerts.append(f"Failure rate rising: Crow-AMSAA beta {beta:.2f} over the last 12 months (p={beta_p:.3g}).")
    if change_p is not None and change_p < method.change_p and recent_rate and recent_rate > prior:
        alerts.append(f"Rate change: {recent_rate:.1%}/yr in the recent months against "
                      f"{prior:.1%}/yr over the window (p={change_p:.2g}).")
    lo, hi = rate_interval(total_c, total_e)
    return ScopeForecast(
        installed=int(installed), failures=int(total_c), exposure_years=total_e, rate=rate, rate_lo=lo, rate_hi=hi,
        recent_rate=recent_rate, vmr=vmr, demand_mean=mean, demand_var=demand.var, recommended=recommended,
        fill_rate=demand.fill_rate(recommended), service_level=demand.cycle_service_level(recommended),
        beta=beta, beta_p=beta_p, change_p=change_p, alert=" ".join(alerts),
        monthly_counts=[int(c) for c in counts], monthly_exposure=[round(float(e), 3) for e in exposure])
