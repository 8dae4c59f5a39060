"""Rolling-origin backtest of a spares policy: at each origin, the stock the forecast recommends using only the
history before it, against the failures of the following lead time. Fixed rules (a share of the installed base)
are scored the same way.

Achieved fill rate is ``sum(min(demand, stock)) / sum(demand)`` over the origins: the share of the failures of
each lead-time window that a stock of that size, on hand at the origin, would have covered.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

import numpy as np

from procurement.forecasting.engine import ADAPTIVE, History, Method, cell_stats, scope_forecast

RULES = (1, 2, 3, 4, 5)  # percent of the installed base
EPOCH = dt.date(1970, 1, 1)


def day(d: dt.date) -> int:
    return (d - EPOCH).days


def month_starts(start: dt.date, end: dt.date) -> list[dt.date]:
    """The 1st of every month from ``start`` (rounded up to a 1st) to ``end`` inclusive."""
    y, m = start.year, start.month
    if start.day != 1:
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    out = []
    while dt.date(y, m, 1) <= end:
        out.append(dt.date(y, m, 1))
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    return out


@dataclass
class PolicyScore:
    fill_rate: float
    mean_stock: float
    stockout_windows: int

    def as_dict(self) -> dict[str, float | int]:
        return {"fill_rate": round(self.fill_rate, 4), "mean_stock": round(self.mean_stock, 2),
                "stockout_windows": self.stockout_windows}


def score(stock: np.ndarray, demand: np.ndarray) -> PolicyScore:
    total = demand.sum()
    fill = float(np.minimum(stock, demand).sum() / total) if total else 1.0
    return PolicyScore(fill, float(stock.mean()) if len(stock) else 0.0, int((demand > stock).sum()))


@dataclass
class Backtest:
    origins: list[dict]
    policy: PolicyScore
    rules: dict[str, PolicyScore]
    method: str
    lead_days: int
    target: float

    def as_dict(self) -> dict:
        return {"origins": self.origins, "fill_rate": round(self.policy.fill_rate, 4),
                "mean_stock": round(self.policy.mean_stock, 2), "stockout_windows": self.policy.stockout_windows,
                "method": self.method, "lead_days": self.lead_days, "target_fill_rate": self.target,
                "rules": {k: v.as_dict() for k, v in self.rules.items()}}


def backtest(h: History, cell_mask: np.ndarray, *, origins: list[dt.date], lead_days: int, target: float,
             method: Method = ADAPTIVE, label: dict | None = None) -> Backtest:
    """Roll the forecast over ``origins`` for the scope ``cell_mask`` selects (pooled)."""
    sub = h.subset(cell_mask)
    rows, stock, demand, installed = [], [], [], []
    for origin in origins:
        o = day(origin)
        stats = cell_stats(sub, as_of=o, lead_days=lead_days, method=method)
        f = scope_forecast(stats, cell_mask, target=target, method=method)
        d = int(((sub.fail_day >= o) & (sub.fail_day < o + lead_days)).sum())
        rows.append({"as_of": origin.isoformat(), **(label or {}), "recommended": f.recommended, "demand": d,
                     "installed": f.installed, "rate": round(f.rate, 5), "alert": bool(f.alert)})
        stock.append(f.recommended)
        demand.append(d)
        installed.append(f.installed)
    s, dm, inst = np.array(stock, float), np.array(demand, float), np.array(installed, float)
    rules = {f"{k}%": score(np.ceil(inst * k / 100), dm) for k in RULES}
    for row, n in zip(rows, inst, strict=True):
        row["rules"] = {f"{k}%": math.ceil(n * k / 100) for k in RULES}
    return Backtest(rows, score(s, dm), rules, method.name, lead_days, target)
