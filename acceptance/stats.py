"""Infant mortality, measured: early failures (within N days of entering service, and burn-in failures) per model,
vendor, delivery batch and site, with exact (Clopper-Pearson) confidence intervals; a batch whose early-failure rate
is far above the rest of its model is flagged by a one-sided Fisher exact test.

The counting is pure (:func:`rates`, :func:`batch_flags`) so it is tested on synthetic batches; the report reads
procurement's assets and failures by label (``apps.get_model``), without importing procurement.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.utils import timezone
from scipy import stats as sps

from acceptance.gate import policy_for
from inventory.models import Gpu, GpuState, GpuStateChange

ALPHA = 0.01  # per-batch false-positive rate of the batch flag
CONFIDENCE = 0.95


def clopper_pearson(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Exact binomial interval for k failures among n units."""
    if n == 0:
        return 0.0, 1.0
    a = 1 - confidence
    low = 0.0 if k == 0 else float(sps.beta.ppf(a / 2, k, n - k + 1))
    high = 1.0 if k == n else float(sps.beta.ppf(1 - a / 2, k + 1, n - k))
    return low, high


@dataclass(frozen=True)
class Unit:
    """One GPU observed for infant mortality: its groups, and whether it failed early."""

    model: str
    vendor: str
    batch: str
    site: str
    early_failure: bool


@dataclass
class Rate:
    group: str
    key: str
    n: int
    k: int
    low: float
    high: float

    @property
    def rate(self) -> float:
        return self.k / self.n if self.n else 0.0


@dataclass
class BatchFlag:
    model: str
    batch: str
    n: int
    k: int
    rest_n: int
    rest_k: int
    p_value: float
    flagged: bool

    @property
    def rate(self) -> float:
        return self.k / self.n if self.n else 0.0

    @property
    def rest_rate(self) -> float:
        return self.rest_k / self.rest_n if self.rest_n else 0.0


def rates(units: Iterable[Unit], group: str) -> list[Rate]:
    counts: dict[str, list[int]] = {}
    for u in units:
        c = counts.setdefault(getattr(u, group) or "(none)", [0, 0])
        c[0] += 1
        c[1] += u.early_failure
    out = []
    for key in sorted(counts):
        n, k = counts[key]
        low, high = clopper_pearson(k, n)
        out.append(Rate(group=group, key=key, n=n, k=k, low=low, high=high))
    return out


def batch_flags(units: Iterable[Unit], alpha: float = ALPHA) -> list[BatchFlag]:
    """Each batch against the rest of its model: one-sided Fisher exact test (is the batch's early-failure rate
    higher?). Flagged when p < ``alpha``. Fisher's test is exact and conservative, so a batch no worse than its
    model is flagged at most ``alpha`` of the time."""
    cells: dict[tuple[str, str], list[int]] = {}
    totals: dict[str, list[int]] = {}
    for u in units:
        c = cells.setdefault((u.model, u.batch or "(none)"), [0, 0])
        t = totals.setdefault(u.model, [0, 0])
        c[0] += 1
        t[0] += 1
        c[1] += u.early_failure
        t[1] += u.early_failure
    out = []
    for (model, batch), (n, k) in sorted(cells.items()):
        rest_n, rest_k = totals[model][0] - n, totals[model][1] - k
        if rest_n == 0:
            p = 1.0
        else:
            p = float(sps.fisher_exact([[k, n - k], [rest_k, rest_n - rest_k]], alternative="greater")[1])
        out.append(BatchFlag(model=model, batch=batch, n=n, k=k, rest_n=rest_n, rest_k=rest_k, p_value=p,
                             flagged=p < alpha))
    return out


# --- the fleet's data --------------------------------------------------------------------------------------------

def fleet_units(*, as_of: dt.date | None = None) -> list[Unit]:
    """Every GPU with a service date (procurement's asset) whose early window has closed, or that already failed
    early, plus every GPU that failed burn-in. Early = a recorded failure within the model policy's
    ``infant_days`` of entering service, or a burn-in failure."""
    as_of = as_of or timezone.localdate()
    try:
        asset_model = apps.get_model("procurement", "GpuAsset")
        failure_model = apps.get_model("procurement", "Failure")
    except LookupError:
        return []
    burn_failed = set(GpuStateChange.objects.filter(to_state=GpuState.BURN_IN_FAILED).values_list("gpu_id", flat=True))
    first_failure: dict[int, dt.date] = {}
    for gpu_id, day in failure_model.objects.order_by("failed_on").values_list("gpu_id", "failed_on"):
        first_failure.setdefault(gpu_id, day)
    windows: dict[int | None, int] = {}
    units = []
    seen: set[int] = set()
    rows = asset_model.objects.select_related("model", "site", "delivery", "order_line__order__vendor").order_by("id")
    for a in rows.iterator(chunk_size=2000):
        seen.add(a.gpu_id)
        if a.model_id not in windows:
            windows[a.model_id] = policy_for(a.model_id).infant_days
        days = windows[a.model_id]
        failed = first_failure.get(a.gpu_id)
        early = a.gpu_id in burn_failed or bool(
            a.in_service_on and failed and 0 <= (failed - a.in_service_on).days <= days)
        if not early and (a.in_service_on is None or (as_of - a.in_service_on).days < days):
            continue  # still inside its window with no failure yet: not counted either way
        vendor = a.order_line.order.vendor.name if a.order_line_id else ""
        batch = a.batch or (f"delivery {a.delivery_id}" if a.delivery_id else "")
        units.append(Unit(model=a.model.name, vendor=vendor, batch=batch, site=a.site.code if a.site_id else "",
                          early_failure=early))
    units.extend(Unit(model=gpu.model.name, vendor="", batch="", site=gpu.site.code if gpu.site_id else "",
                      early_failure=True)
                 for gpu in Gpu.objects.filter(pk__in=burn_failed - seen).select_related("model", "site"))
    return units


@dataclass
class Report:
    units: int
    by: dict[str, list[Rate]] = field(default_factory=dict)
    batches: list[BatchFlag] = field(default_factory=list)
    alpha: float = ALPHA


def infant_mortality_report(*, as_of: dt.date | None = None) -> Report:
    units = fleet_units(as_of=as_of)
    return Report(units=len(units), by={g: rates(units, g) for g in ("model", "vendor", "batch", "site")},
                  batches=batch_flags(units))


def youngest_band_rates(*, as_of: dt.date | None = None) -> dict[str, dict[str, Any]]:
    """Per GPU model name: the measured early-failure probability within the window, the window in days and the
    count behind it; what the spares forecast uses for its youngest age band."""
    units = fleet_units(as_of=as_of)
    out: dict[str, dict[str, Any]] = {}
    windows = {m: policy_for(pk).infant_days for m, pk in
               apps.get_model("inventory", "GpuModel").objects.values_list("name", "pk")}
    for r in rates(units, "model"):
        out[r.key] = {"probability": r.rate, "low": r.low, "high": r.high, "n": r.n, "k": r.k,
                      "window_days": windows.get(r.key, 90)}
    return out
