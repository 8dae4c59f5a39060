"""Rolling-origin backtest of a spares policy: at each origin, the stock the forecast recommends using only the
history before it, against the failures of the following lead time. Fixed rules (a share of the installed base)
are scored the same way.

Achieved fill rate is ``sum(min(demand, stock)) / sum(demand)`` over the origins: the share of the failures of
each lead-time window that a stock of that size, on hand at the origin, would have covered.

Calibration (``choose``): the recommended stock learns from its own past errors. At each origin, the windows
already over before it (origin + lead time <= this origin; the last ``CALIBRATION_MONTHS``) score candidate
sizings: the forecast's stock times a scale (``SCALES``) and the fixed rules (``RULES``), each counted as the
policy would hold it (``sized``: never below the forecast's own stock while the forecast alerts), so the stock a
candidate is judged on is the stock the score counts when the policy uses it. A fixed rule qualifies when its past
fill reaches the target, a sizing of the forecast when it reaches the target plus ``MARGIN``; the qualifying
candidate with the least mean stock is used at this origin, so a rule that met the target with less stock on the
history so far is never undercut by a dearer sizing. With none qualifying, the least stock that reaches the target,
else the highest fill. With fewer than ``MIN_SCORED`` scored windows in which GPUs were in service the forecast is
used as it is. Nothing after the origin is read: the windows scored end before it.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from procurement.forecasting.engine import ADAPTIVE, History, Method, cell_stats, scope_forecast

RULES = (1, 2, 3, 4, 5)  # percent of the installed base
EPOCH = dt.date(1970, 1, 1)
SCALES = (1.0, 1.1, 1.25, 1.5)  # of the forecast's stock (never below it: see docs/procurement.md)
MIN_SCORED = 12  # scored windows with GPUs in service at their origin before calibration starts
MARGIN = 0.03  # over the target: the past fill a sizing of the forecast needs (the next windows are not the past
# ones); a fixed rule needs the target only, so the policy is never dearer than a rule that met it
CALIBRATION_MONTHS = 36  # calibration learns from the last 36 windows over (monthly origins): the backtest page's
# three years, so that a sizing is judged on the windows the page scores it on


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


@dataclass(frozen=True)
class Choice:
    """The sizing calibration chose as of an origin, and how the candidates did on the windows before it."""

    name: str  # "forecast", "forecast x 0.8", "3% rule"
    kind: str  # forecast | rule
    value: float  # the scale or the percent
    scored: int  # windows scored in which GPUs were in service at the origin
    fill: float | None = None  # the chosen candidate's past fill and mean stock
    stock: float | None = None
    base_fill: float | None = None  # the forecast's own (scale 1)
    base_stock: float | None = None

    def as_dict(self) -> dict[str, object]:
        r = lambda v, n: None if v is None else round(v, n)  # noqa: E731
        return {"name": self.name, "kind": self.kind, "value": self.value, "scored": self.scored,
                "fill": r(self.fill, 4), "stock": r(self.stock, 2), "base_fill": r(self.base_fill, 4),
                "base_stock": r(self.base_stock, 2)}


AS_IS = Choice("forecast", "forecast", 1.0, 0)


def _candidates() -> list[Choice]:
    out = [Choice("forecast" if k == 1.0 else f"forecast x {k:g}", "forecast", k, 0) for k in SCALES]
    return out + [Choice(f"{k}% rule", "rule", float(k), 0) for k in RULES]


def sized(choice: Choice, base, installed, alert):  # type: ignore[no-untyped-def]  # numbers or numpy arrays
    """The stock ``choice`` holds at an origin (or at each of several, as arrays): a fixed rule's share of the
    installed base rounded up as the backtest scores the rule, or the forecast's stock times the scale; while the
    forecast raises an alert (a rate change no past window shows) never less than the forecast's own."""
    if choice.kind == "rule":
        stock = np.ceil(np.asarray(installed, float) * choice.value / 100)
    else:
        stock = np.ceil(np.asarray(base, float) * choice.value - 1e-9)
    return np.where(alert, np.maximum(stock, np.ceil(np.asarray(base, float) - 1e-9)), stock)


def choose(base: np.ndarray, installed: np.ndarray, demand: np.ndarray, *, target: float,
           alerts: np.ndarray | None = None) -> Choice:
    """The sizing calibration uses, from the scored windows (``base``: the forecast's stock, ``installed``,
    ``demand``, ``alerts``: per window, all over before the origin), each candidate held as ``sized`` holds it: the
    least mean stock among the fixed rules whose fill reached ``target`` and the sizings of the forecast whose fill
    reached ``target + MARGIN``; with none, the least stock that reached ``target``; else the highest fill. The
    forecast as it is with fewer than ``MIN_SCORED`` windows in which GPUs were in service (a window before the
    first one is no evidence about sizing), or with no demand yet."""
    n = int((installed > 0).sum())
    if n < MIN_SCORED or demand.sum() <= 0:
        return Choice("forecast", "forecast", 1.0, n)
    alerts = np.zeros(len(base), bool) if alerts is None else alerts
    scored = [(c, score(sized(c, base, installed, alerts), demand)) for c in _candidates()]
    own = next(sc for c, sc in scored if c.kind == "forecast" and c.value == 1.0)
    need = {"rule": target, "forecast": target + MARGIN}
    cheapest = lambda x: (x[1].mean_stock, x[0].kind != "forecast", abs(x[0].value - 1))  # noqa: E731
    ok = [(c, sc) for c, sc in scored if sc.fill_rate >= need[c.kind] - 1e-12]
    reached = [(c, sc) for c, sc in scored if sc.fill_rate >= target - 1e-12]
    if ok:
        best, sc = min(ok, key=cheapest)
    elif reached:  # only sizings of the forecast between the target and the margin
        best, sc = min(reached, key=cheapest)
    else:  # nothing reached it: the highest fill (tried: the largest scale of the forecast; demo 12.3, bench 0.948)
        best, sc = max(scored, key=lambda x: (x[1].fill_rate, -x[1].mean_stock))
    return Choice(best.name, best.kind, best.value, n, sc.fill_rate, sc.mean_stock, own.fill_rate,
                  own.mean_stock)


def calibrated(base: np.ndarray, installed: np.ndarray, demand: np.ndarray, days: np.ndarray, *, lead_days: int,
               target: float, alerts: np.ndarray | None = None) -> tuple[np.ndarray, list[Choice]]:
    """Per origin (``days``, ascending), the stock of the sizing ``choose`` picks from the windows over before it."""
    stock, choices = [], []
    alerts = alerts if alerts is not None else np.zeros(len(base), bool)
    for i, o in enumerate(days):
        past = np.flatnonzero(days + lead_days <= o)[-CALIBRATION_MONTHS:]
        c = choose(base[past], installed[past], demand[past], target=target, alerts=alerts[past])
        choices.append(c)
        stock.append(sized(c, base[i], installed[i], alerts[i]))
    return np.array(stock, float), choices


@dataclass
class Backtest:
    origins: list[dict]
    policy: PolicyScore
    rules: dict[str, PolicyScore]
    method: str
    lead_days: int
    target: float
    uncalibrated: PolicyScore | None = None
    choice: Choice = AS_IS  # calibration's choice as of the last origin

    def as_dict(self) -> dict:
        return {"origins": self.origins, "fill_rate": round(self.policy.fill_rate, 4),
                "mean_stock": round(self.policy.mean_stock, 2), "stockout_windows": self.policy.stockout_windows,
                "method": self.method, "lead_days": self.lead_days, "target_fill_rate": self.target,
                "rules": {k: v.as_dict() for k, v in self.rules.items()},
                "uncalibrated": self.uncalibrated.as_dict() if self.uncalibrated else None,
                "calibration": self.choice.as_dict()}


def backtest(h: History, cell_mask: np.ndarray, *, origins: list[dt.date], lead_days: int, target: float,
             method: Method = ADAPTIVE, label: dict | None = None, calibrate: bool = True,
             infant_rate: float | None = None, infant_weight: float = 1.0,
             forecast_at: Callable[[dt.date], tuple[int, int, float, bool]] | None = None,
             demand_of: Callable[[dt.date], int] | None = None) -> Backtest:
    """Roll the forecast over ``origins`` for the scope ``cell_mask`` selects (pooled).

    With ``calibrate``, the recommended stock at each origin is the sizing ``choose`` learns from the windows over
    before it; the forecast is also rolled over up to ``CALIBRATION_MONTHS`` monthly origins before the first
    (when the history reaches back) so that calibration has windows to learn from. ``forecast_at`` (origin ->
    recommended, installed, rate, alert) and ``demand_of`` replace the engine's reads of ``h`` (the service
    passes them for a site or pool, whose placement it reloads as of each origin)."""
    sub = h.subset(cell_mask)
    reported = len(origins)
    if calibrate and origins:
        first = int(sub.start.min()) if len(sub.start) else day(origins[0])
        early = [o for o in month_starts(EPOCH + dt.timedelta(days=first + lead_days), origins[0])
                 if o < origins[0]][-CALIBRATION_MONTHS:]
        origins = early + list(origins)
    rows, base, demand, installed = [], [], [], []
    for origin in origins:
        o = day(origin)
        if forecast_at is not None:
            rec, inst, rate, alert = forecast_at(origin)
        else:
            stats = cell_stats(sub, as_of=o, lead_days=lead_days, method=method)
            f = scope_forecast(stats, cell_mask, target=target, method=method, infant_rate=infant_rate,
                               infant_weight=infant_weight)
            rec, inst, rate, alert = f.recommended, f.installed, f.rate, bool(f.alert)
        d = demand_of(origin) if demand_of is not None else int(
            ((sub.fail_day >= o) & (sub.fail_day < o + lead_days)).sum())
        rows.append({"as_of": origin.isoformat(), **(label or {}), "forecast": rec, "demand": d,
                     "installed": inst, "rate": round(rate, 5), "alert": bool(alert)})
        base.append(rec)
        demand.append(d)
        installed.append(inst)
    b, dm, inst = np.array(base, float), np.array(demand, float), np.array(installed, float)
    days = np.array([day(o) for o in origins], float)
    if calibrate:
        stock, choices = calibrated(b, inst, dm, days, lead_days=lead_days, target=target,
                                    alerts=np.array([r["alert"] for r in rows], bool))
    else:
        stock, choices = b, [AS_IS] * len(b)
    for row, n, st, c in zip(rows, inst, stock, choices, strict=True):
        row["recommended"] = int(st)
        row["sizing"] = c.name
        row["rules"] = {f"{k}%": math.ceil(n * k / 100) for k in RULES}
    keep = slice(len(rows) - reported, None)
    rows, b, dm, inst, stock = rows[keep], b[keep], dm[keep], inst[keep], stock[keep]
    rules = {f"{k}%": score(np.ceil(inst * k / 100), dm) for k in RULES}
    return Backtest(rows, score(stock, dm), rules, method.name, lead_days, target, score(b, dm),
                    choices[-1] if choices else AS_IS)


def dominated_by(result: dict) -> list[str]:
    """The fixed rules that reach the target fill with less mean stock than the policy (the backtest's dict)."""
    target = result["target_fill_rate"]
    return [k for k, r in result["rules"].items()
            if r["fill_rate"] >= target and r["mean_stock"] < result["mean_stock"]]
