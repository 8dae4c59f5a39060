"""Synthetic failure histories with a known truth, for the backtest's proof, the tests, the demo and the
benchmark. Each scenario is a fleet of GPU slots at a few sites, simulated month by month: a slot's GPU fails
with its hazard for that month, goes to RMA and is replaced at once by a new board (a new row, batch ``R``).

Scenarios (rates per GPU-year):

- ``steady``: 3 %, independent failures (the Poisson textbook case).
- ``bursts``: 3 % on average, but each site's monthly rate is multiplied by a gamma frailty (CV 0.8):
  clustered failures as in Titan, Summit and Delta.
- ``bad_batch``: 3 %, and from month ``bad_from`` (30) one batch (a fifth of the fleet) fails at ten times the rate
  for ``bad_months`` (a year).
- ``wear_out``: Weibull hazard with shape 3 and scale 7 years on cohorts installed over two years.
- ``quiet``: 0.5 %.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np

from procurement.forecasting.engine import NEVER, YEAR, History

SCENARIOS = ("steady", "bursts", "bad_batch", "wear_out", "quiet")
CAUSES = ("gpu", "hbm", "nvlink", "power", "thermal", "off_bus", "other")
CAUSE_P = (0.40, 0.25, 0.10, 0.07, 0.05, 0.08, 0.05)


@dataclass
class Rows:
    """A history as import rows: one per GPU."""

    site: np.ndarray  # index into sites
    model: np.ndarray
    start: np.ndarray  # days since 1970-01-01
    failed: np.ndarray  # -1 when it did not fail
    removed: np.ndarray  # -1 when still in the fleet
    batch: np.ndarray  # index into batches
    cause: np.ndarray  # index into CAUSES, -1 none
    slot: np.ndarray  # the slot (position in the fleet) the board served in
    sites: list[str]
    models: list[str]
    batches: list[str]

    def __len__(self) -> int:
        return len(self.start)

    def history(self) -> History:
        """The engine's arrays: cells are (site, model) pairs."""
        n_models = len(self.models)
        cell = self.site * n_models + self.model
        cells = [(s, m) for s in self.sites for m in self.models]
        end = np.where(self.failed >= 0, self.failed, np.where(self.removed >= 0, self.removed, NEVER))
        f = self.failed >= 0
        return History(self.start.astype(float), end.astype(float), cell, self.batch, self.failed[f].astype(float),
                       cell[f], self.batch[f], self.start[f].astype(float), cells, list(self.batches))


def generate(scenario: str = "steady", *, gpus: int = 10_000, sites: int = 4, models: tuple[str, ...] = ("H100",),
             start: dt.date = dt.date(2015, 1, 1), months: int = 60, seed: int = 1, bad_from: int = 30,
             bad_months: int = 12) -> Rows:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; scenarios are {', '.join(SCENARIOS)}")
    rng = np.random.default_rng(seed)
    day0 = (start - dt.date(1970, 1, 1)).days
    n_batches = 5
    slot_site = rng.integers(0, sites, gpus)
    slot_model = rng.integers(0, len(models), gpus)
    install_span = 730 if scenario == "wear_out" else 365
    cur_start = day0 + rng.integers(0, install_span, gpus)
    cur_batch = np.minimum((cur_start - day0) * n_batches // install_span, n_batches - 1)
    bad = 1  # the batch that goes bad
    out: dict[str, list[np.ndarray]] = {k: [] for k in ("site", "model", "start", "failed", "batch", "slot")}
    month_len = 30.4375
    for m in range(months):
        t0 = day0 + m * month_len
        age = (t0 - cur_start) / YEAR
        active = cur_start <= t0 + month_len
        if scenario == "wear_out":
            k, eta = 3.0, 7.0
            a0, a1 = np.clip(age, 0, None), np.clip(age + month_len / YEAR, 0, None)
            p = 1 - np.exp(-((a1 / eta) ** k - (a0 / eta) ** k))
        else:
            rate = np.full(gpus, 0.005 if scenario == "quiet" else 0.03)
            if scenario == "bursts":
                frailty = rng.gamma(1 / 0.64, 0.64, sites)
                rate = rate * frailty[slot_site]
            if scenario == "bad_batch" and bad_from <= m < bad_from + bad_months:
                rate = np.where(cur_batch == bad, rate * 10, rate)
            p = 1 - np.exp(-rate * month_len / YEAR)
        fail = active & (rng.random(gpus) < p)
        fail_day = np.maximum(np.floor(t0 + rng.random(gpus) * month_len), cur_start).astype(np.int64)
        idx = np.flatnonzero(fail)
        for key, values in (("site", slot_site[idx]), ("model", slot_model[idx]), ("start", cur_start[idx]),
                            ("failed", fail_day[idx]), ("batch", cur_batch[idx]), ("slot", idx)):
            out[key].append(values)
        cur_start = cur_start.copy()
        cur_start[idx] = fail_day[idx]
        cur_batch = cur_batch.copy()
        cur_batch[idx] = n_batches  # the replacement board: batch "R"
    out["site"].append(slot_site)
    out["model"].append(slot_model)
    out["start"].append(cur_start)
    out["failed"].append(np.full(gpus, -1))
    out["batch"].append(cur_batch)
    out["slot"].append(np.arange(gpus))
    cat = {k: np.concatenate(v).astype(np.int64) for k, v in out.items()}
    failed = cat["failed"]
    cause = np.where(failed >= 0, rng.choice(len(CAUSES), len(failed), p=CAUSE_P), -1)
    removed = np.where(failed >= 0, failed + rng.integers(3, 20, len(failed)), -1)
    return Rows(cat["site"], cat["model"], cat["start"], failed, removed, cat["batch"], cause, cat["slot"],
                [f"site{i + 1}" for i in range(sites)], list(models),
                [f"B{i + 1}" for i in range(n_batches)] + ["R"])


def write_csv(rows: Rows, path: str, *, serial_prefix: str = "SYN") -> None:
    """The ``import_history`` CSV of ``rows``."""
    epoch = dt.date(1970, 1, 1)

    def iso(d: int) -> str:
        return (epoch + dt.timedelta(days=int(d))).isoformat() if d >= 0 else ""

    with open(path, "w", encoding="utf-8") as out:
        out.write("serial,model,site,in_service_at,failed_at,removed_at,cause,batch\n")
        for i in range(len(rows)):
            cause = CAUSES[rows.cause[i]] if rows.cause[i] >= 0 else ""
            out.write(f"{serial_prefix}{i:08d},{rows.models[rows.model[i]]},{rows.sites[rows.site[i]]},"
                      f"{iso(rows.start[i])},{iso(rows.failed[i])},{iso(rows.removed[i])},{cause},"
                      f"{rows.batches[rows.batch[i]]}\n")
