"""The youngest age band's rate for the spares forecast, measured by acceptance (early failures within each model's
burn-in policy window after entering service, and burn-in failures) instead of a fleet-wide guess.

Acceptance gives a probability P of failing within W days of entering service; the forecast works in failures
per GPU-year, so the band's hazard is -ln(1 - P) / (W / 365.25). Reads acceptance's selectors only
(``SIBLING_ALLOWED`` in tests/test_architecture.py)."""

from __future__ import annotations

import datetime as dt
import math

from acceptance.stats import youngest_band_rates
from inventory.models import GpuModel

MIN_UNITS = 20  # fewer GPUs with a closed early window than this: no measured rate, the forecast's own stands


def infant_rates_by_model(*, as_of: dt.date | None = None) -> dict[int, dict[str, float]]:
    """GPU model id -> {"rate": failures per GPU-year in the youngest band, "probability", "window_days", "n",
    "k"}, for models with at least ``MIN_UNITS`` observed GPUs."""
    measured = youngest_band_rates(as_of=as_of)
    out: dict[int, dict[str, float]] = {}
    for model_id, name in GpuModel.objects.values_list("id", "name"):
        m = measured.get(name)
        if not m or m["n"] < MIN_UNITS:
            continue
        p = min(m["probability"], 0.999)
        out[model_id] = {"rate": -math.log1p(-p) * 365.25 / m["window_days"], "probability": m["probability"],
                         "window_days": m["window_days"], "n": m["n"], "k": m["k"]}
    return out
