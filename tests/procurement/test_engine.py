"""The engine's per-cell sums against a plain count: every board, every monthly bucket, its time in service in it
and its age band at the bucket's middle (boards that start or end on a bucket's edge, inside one bucket, on the
day they start, before or after the window)."""

import numpy as np
import pytest

from procurement.forecasting import engine


def plain_sums(h: engine.History, as_of: float, lead_days: float) -> dict[str, np.ndarray]:
    m = engine.ADAPTIVE
    b, n_cells, n_strata = m.buckets, len(h.cells), (len(h.batches) + 1) * engine.N_BANDS
    edges = [as_of - engine.MONTH * (b - k) for k in range(b + 1)]
    weights = [0.5 ** ((b - 1 - k) / m.half_life) for k in range(b)]
    exposure, strat = np.zeros((n_cells, b)), np.zeros((n_cells, n_strata))
    now, installed = np.zeros((n_cells, n_strata)), np.zeros(n_cells)
    for start, end, cell, batch in zip(h.start, h.end, h.cell, h.batch, strict=True):
        for k in range(b):
            years = max(min(end, as_of, edges[k + 1]) - max(start, edges[k]), 0) / engine.YEAR
            age = (edges[k] + edges[k + 1]) / 2 - start
            band = sum(age >= limit for limit in engine.AGE_BANDS)
            exposure[cell, k] += years
            strat[cell, (batch + 1) * engine.N_BANDS + band] += years * weights[k]
        if start < as_of <= end:
            band = sum(as_of + lead_days / 2 - start >= limit for limit in engine.AGE_BANDS)
            now[cell, (batch + 1) * engine.N_BANDS + band] += 1
            installed[cell] += 1
    return {"exposure": exposure, "strat_exp": strat, "strat_now": now, "installed": installed}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cell_sums_match_a_plain_count(seed):
    rng = np.random.default_rng(seed)
    as_of = 20_000.0
    window = engine.MONTH * engine.ADAPTIVE.buckets
    edges = as_of - engine.MONTH * np.arange(engine.ADAPTIVE.buckets + 1)
    n = 400
    start = np.floor(rng.uniform(as_of - 2.5 * window, as_of + 30, n))
    start[:20] = np.floor(edges[rng.integers(0, len(edges), 20)])  # on (the day of) a bucket's edge
    length = np.where(rng.random(n) < 0.5, engine.NEVER, np.floor(rng.exponential(400, n)))
    length[20:30] = 0  # gone the day they started
    end = np.minimum(start + length, engine.NEVER)
    end[30:40] = edges[rng.integers(0, len(edges), 10)]  # ending exactly on an edge
    end = np.maximum(end, start)
    cells, batches = [(1, 1), (2, 1), (3, 2)], ["B1", "B2"]
    h = engine.History(start, end, rng.integers(0, 3, n), rng.integers(-1, 2, n), np.empty(0), np.empty(0, int),
                       np.empty(0, int), np.empty(0), cells, batches)
    stats = engine.cell_stats(h, as_of=as_of, lead_days=90)
    for name, expected in plain_sums(h, as_of, 90).items():
        np.testing.assert_allclose(getattr(stats, name), expected, rtol=1e-12, atol=1e-12, err_msg=name)


def test_a_history_with_no_board_in_the_window():
    h = engine.History(np.array([30_000.0]), np.array([float(engine.NEVER)]), np.array([0]), np.array([-1]),
                       np.empty(0), np.empty(0, int), np.empty(0, int), np.empty(0), [(1, 1)], [])
    empty = engine.History(*(np.empty(0, t) for t in (float, float, int, int, float, int, int, float)), [(1, 1)], [])
    for history in (h, h.collapsed(), empty, empty.collapsed()):
        stats = engine.cell_stats(history, as_of=20_000.0, lead_days=90)
        assert stats.exposure.sum() == stats.strat_exp.sum() == stats.installed.sum() == 0


def test_a_collapsed_history_sums_the_same():
    """GPUs sharing a start, an end, a cell and a batch collapse into one row that counts them: the same sums, the
    same forecast, of the whole history and of a subset."""
    rng = np.random.default_rng(7)
    n = 3000
    start = np.floor(rng.uniform(15_000, 20_000, 60))[rng.integers(0, 60, n)]  # 60 install days
    end = np.where(rng.random(n) < 0.8, float(engine.NEVER), start + np.floor(rng.exponential(500, n)))
    cell, batch = rng.integers(0, 4, n), rng.integers(-1, 3, n)
    fail = end < engine.NEVER
    h = engine.History(start, end, cell, batch, end[fail], cell[fail], batch[fail], start[fail],
                       [(s, 1) for s in range(4)], ["B1", "B2", "B3"])
    c = h.collapsed()
    assert len(c.start) < n / 2 and c.boards.sum() == n
    mask = np.array([True, False, True, False])
    for whole, squeezed in ((h, c), (h.subset(mask), c.subset(mask))):
        a = engine.cell_stats(whole, as_of=19_000.0, lead_days=90)
        b = engine.cell_stats(squeezed, as_of=19_000.0, lead_days=90)
        for name in ("counts", "exposure", "strat_fail", "strat_exp", "strat_now", "installed"):
            np.testing.assert_allclose(getattr(b, name), getattr(a, name), rtol=1e-12, atol=1e-12, err_msg=name)
        fa, fb = engine.scope_forecast(a, mask, target=0.95), engine.scope_forecast(b, mask, target=0.95)
        assert (fa.recommended, fa.installed, fa.alert) == (fb.recommended, fb.installed, fb.alert)
        assert fa.demand_mean == pytest.approx(fb.demand_mean, rel=1e-12)
