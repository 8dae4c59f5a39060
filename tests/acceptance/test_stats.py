"""Infant mortality: exact intervals, and the batch flag on synthetic batches: a batch with a known elevated
early-failure rate is detected; batches drawn at their model's rate are flagged at no more than the stated
false-positive rate (ALPHA) over many seeds."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from acceptance.stats import ALPHA, Unit, batch_flags, clopper_pearson, rates


def synthetic(rng: np.random.Generator, *, batches: int, per_batch: int, rate: float,
              elevated: dict[int, float] | None = None) -> list[Unit]:
    units = []
    for b in range(batches):
        p = (elevated or {}).get(b, rate)
        failures = rng.random(per_batch) < p
        units += [Unit(model="H100", vendor="V", batch=f"B{b}", site="s1", early_failure=bool(f)) for f in failures]
    return units


def test_clopper_pearson_matches_the_beta_quantiles_and_covers():
    low, high = clopper_pearson(5, 500)
    assert low == pytest.approx(sps.beta.ppf(0.025, 5, 496)) and high == pytest.approx(sps.beta.ppf(0.975, 6, 495))
    assert clopper_pearson(0, 100)[0] == 0.0 and clopper_pearson(100, 100)[1] == 1.0
    rng = np.random.default_rng(7)  # exact intervals cover at least their nominal level
    covered = sum(lo <= 0.02 <= hi for lo, hi in (clopper_pearson(int(k), 300) for k in rng.binomial(300, 0.02, 2000)))
    assert covered / 2000 >= 0.95


def test_rates_per_group():
    units = [Unit("H100", "A", "B1", "s1", True), Unit("H100", "A", "B1", "s1", False),
             Unit("B200", "B", "B2", "s2", False)]
    by_model = {r.key: (r.n, r.k) for r in rates(units, "model")}
    assert by_model == {"B200": (1, 0), "H100": (2, 1)}
    assert [r.key for r in rates(units, "vendor")] == ["A", "B"]


def test_an_elevated_batch_is_detected_with_its_p_value():
    rng = np.random.default_rng(2026)
    units = synthetic(rng, batches=10, per_batch=400, rate=0.02, elevated={3: 0.08})
    flags = {f.batch: f for f in batch_flags(units)}
    assert flags["B3"].flagged and flags["B3"].p_value < 1e-6
    assert flags["B3"].rate > 3 * flags["B3"].rest_rate
    assert sum(f.flagged for f in flags.values()) == 1


def test_detection_power_over_many_seeds():
    detected = 0
    for seed in range(100):
        units = synthetic(np.random.default_rng(seed), batches=8, per_batch=400, rate=0.02, elevated={0: 0.07})
        detected += next(f for f in batch_flags(units) if f.batch == "B0").flagged
    assert detected >= 90


def test_no_elevated_batch_is_flagged_at_most_at_alpha_over_many_seeds():
    flagged = tests = 0
    for seed in range(400):
        units = synthetic(np.random.default_rng(10_000 + seed), batches=8, per_batch=300, rate=0.03)
        flags = batch_flags(units)
        tests += len(flags)
        flagged += sum(f.flagged for f in flags)
    assert tests == 3200
    assert flagged / tests <= ALPHA  # Fisher's exact test is conservative: the realised rate is below alpha
