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

import numpy as np
from django.apps import apps
from django.db.models import Min, Q
from django.utils import timezone
from scipy import stats as sps

from acceptance.gate import policies_for
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
    return _rates(group, counts)


def _rates(group: str, counts: dict[str, list[int]]) -> list[Rate]:
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
    ``infant_days`` of entering service, or a burn-in failure. With ``as_of``, only rows dated before it count (a
    service start, a failure, a burn-in failure on or after it reads as "not yet"): the spares forecast and its
    backtest ask as of past dates. Without it, everything recorded so far, and windows closed by today."""
    extra = ("batch", "delivery_id", "order_line__order__vendor__name", "site__code")
    return [Unit(model=model, vendor=vendor or "", batch=batch or (f"delivery {delivery_id}" if delivery_id else ""),
                 site=site or "", early_failure=early)
            for model, early, (batch, delivery_id, vendor, site) in zip(*_observed(as_of=as_of, extra=extra),
                                                                         strict=True)]


def _observed(*, as_of: dt.date | None, extra: tuple[str, ...] = ()) -> tuple[list[str], list[bool], list[tuple]]:
    """``fleet_units``' GPUs as columns: model name, early failure, and the asset's ``extra`` fields (None for a
    GPU that failed burn-in with no asset row). The classification is on arrays: the forecast reads the fleet's
    100,000 assets each time it runs."""
    try:
        asset_model = apps.get_model("procurement", "GpuAsset")
        failure_model = apps.get_model("procurement", "Failure")
    except LookupError:
        return [], [], []
    changes, failures, assets = GpuStateChange.objects.all(), failure_model.objects.all(), asset_model.objects.all()
    if as_of is not None:
        changes = changes.filter(at__lt=dt.datetime.combine(as_of, dt.time(), tzinfo=dt.UTC))
        failures = failures.filter(failed_on__lt=as_of)
        assets = assets.filter(Q(in_service_on__lt=as_of) | Q(gpu_id__in=changes.filter(
            to_state=GpuState.BURN_IN_FAILED).values("gpu_id")))
    today = np.datetime64(as_of or timezone.localdate(), "D")
    burn_failed = set(changes.filter(to_state=GpuState.BURN_IN_FAILED).values_list("gpu_id", flat=True))
    failed_gpu, failed_on = _columns(failures.values("gpu_id").annotate(day=Min("failed_on")).order_by("gpu_id")
                                     .values_list("gpu_id", "day"), 2)
    rows = list(assets.order_by("id").values_list("gpu_id", "model_id", "in_service_on", *extra))
    gpu, model_id, start = _columns([r[:3] for r in rows], 3)
    start = start.astype("datetime64[D]")  # a missing service date is NaT: every comparison with it is false
    failed = np.full(len(gpu), np.datetime64("NaT", "D"))  # each asset's first failure
    if len(failed_gpu):
        at = np.minimum(np.searchsorted(failed_gpu, gpu), len(failed_gpu) - 1)
        hit = failed_gpu[at] == gpu
        failed[hit] = failed_on.astype("datetime64[D]")[at[hit]]
    models = dict(apps.get_model("inventory", "GpuModel").objects.values_list("pk", "name"))
    window = {m: p.infant_days for m, p in policies_for(models).items()}
    days = np.array([window[m] for m in model_id.tolist()], dtype="timedelta64[D]")
    to_failure = failed - start
    early = np.isin(gpu, list(burn_failed)) | ((to_failure >= np.timedelta64(0, "D")) & (to_failure <= days))
    counted = np.flatnonzero(early | (today - start >= days))  # the others are still inside their window
    others = Gpu.objects.filter(pk__in=burn_failed - set(gpu.tolist())).select_related("model")
    names = [models[m] for m in model_id[counted].tolist()] + [g.model.name for g in others]
    fields = [rows[i][3:] for i in counted.tolist()] + [(None,) * len(extra) for _ in others]
    return names, early[counted].tolist() + [True] * len(others), fields


def _columns(rows: Any, n: int) -> list[np.ndarray]:
    rows = list(rows)
    return [np.array(c) for c in zip(*rows, strict=True)] if rows else [np.empty(0, dtype=object) for _ in range(n)]


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
    names, early, _ = _observed(as_of=as_of)
    counts: dict[str, list[int]] = {}
    for name, failed in zip(names, early, strict=True):
        c = counts.setdefault(name, [0, 0])
        c[0] += 1
        c[1] += failed
    out: dict[str, dict[str, Any]] = {}
    pks = dict(apps.get_model("inventory", "GpuModel").objects.values_list("name", "pk"))
    windows = {m: p.infant_days for m, p in policies_for(pks.values()).items()}
    for r in _rates("model", counts):
        out[r.key] = {"probability": r.rate, "low": r.low, "high": r.high, "n": r.n, "k": r.k,
                      "window_days": windows[pks[r.key]] if r.key in pks else 90}
    return out
