"""Rack, row and site aggregates from a Prometheus-compatible store (``FLEET_TELEMETRY_BACKEND=prometheus``).

The store knows GPUs by their UUID label, never by Fleet's placement, so Fleet names each group's GPUs:
PromQL aggregations (``avg``, ``min``, ``max``, ``sum`` across the GPUs) over a regex of the group's UUIDs,
taken from Fleet's placement. The store answers one series per group: a rack's 24 hours of 5-minute frames are
288 points whatever its size, where per-GPU series aggregated in Fleet would be GPUs x 288 (10,000 GPUs:
2.9 million points, ~60 MB of JSON). The store reads the same samples either way.

A query is at most ``FLEET_PROMETHEUS_MAX_QUERY_BYTES`` long (VictoriaMetrics refuses more than
``-search.maxQueryLen``, 16 kB by default: ~390 UUIDs). Many small groups (racks) are packed into one query,
each group's aggregation tagged with ``label_replace`` and joined with ``or``; a group too large for one query
(a row, a site) is cut into parts whose partial aggregates are combined here exactly: min of minima, max of
maxima, sum of sums, and an average as the sum of the parts' sums over the sum of their counts. The queries run
``FLEET_PROMETHEUS_CONCURRENCY`` at a time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from django.conf import settings

from telemetry.promql import METRIC, labels, max_query_bytes, query_range, step_for, throttled

TERM_LABEL = "fleet_term"  # the label that tells the terms of one query apart
_JOIN = " or "
_SENTINEL = "\x00"

# Per-GPU expressions ({s}: the selector, {w}: the window, {t}: the throttled 0/1 of {s}, {r}: the scrape step).
AVG, MIN, MAX = "avg_over_time({s}[{w}])", "min_over_time({s}[{w}])", "max_over_time({s}[{w}])"
THROTTLED = "max_over_time({t}[{w}:{r}])"  # 1 when any sample of the window had a hardware reason

# A chart's (min, avg, max) of a group, each (aggregation across the GPUs, per-GPU expression): the embedded
# store's group rollups (rollup._sql_group) computed by the store.
HISTORY = {
    "gpu_temp": (("min", MIN), ("avg", AVG), ("max", MAX)),
    "mem_temp": (None, None, ("max", MAX)),
    "power": (("min", AVG), ("avg", AVG), ("max", AVG)),  # the spread of the GPUs' means
    "power_sum": (None, ("sum", AVG), None),  # the group's draw
    "sm_clock": (None, ("avg", AVG), None),
    "tlimit": (("min", MIN), None, None),
    "throttle": (None, ("avg", THROTTLED), None),  # the fraction of the GPUs throttled in the bucket
}
# A rack's value in a playback frame: the embedded store's rack rollup column (selectors._ROLLUP_VALUE).
FRAME = {"gpu_temp": ("avg", AVG), "mem_temp": ("max", MAX), "power": ("avg", AVG), "sm_clock": ("avg", AVG),
         "tlimit": ("min", MIN), "throttle": ("sum", THROTTLED)}  # throttle: the rack's throttled GPUs
SOURCE = {"power_sum": "power"}  # Fleet metrics read from another dcgm-exporter metric


class _Term(NamedTuple):
    key: tuple[Hashable, int]  # (group, stat)
    role: str  # "value" (the aggregate itself), or "sum" / "count" of one part of an average
    uuids: list[str]


def _selector(metric: str, uuids: list[str]) -> str:
    # UUIDs are hex and dashes: nothing to escape in the regex (promql.selector escapes the quotes anyway).
    return f'{METRIC[SOURCE.get(metric, metric)]}{{{labels()["uuid"]}=~"{"|".join(uuids)}"}}'


def _inner(template: str, s: str, step: int) -> str:
    scrape = int(getattr(settings, "FLEET_PROMETHEUS_SCRAPE_S", 30))
    return template.format(s=s, w=f"{step}s", t=throttled(s), r=f"{min(scrape, step)}s")


def _text(term: _Term, op: str, template: str, metric: str, step: int, index: int) -> str:
    expr = _inner(template, _selector(metric, term.uuids), step)
    agg = op if term.role == "value" else term.role
    return f'label_replace({agg}({expr}), "{TERM_LABEL}", "{index}", "", "")'


def _parts(metric: str, template: str, uuids: list[str], step: int, budget: int) -> list[list[str]]:
    """``uuids`` cut into runs whose term (the longest aggregation, ``count``, and a 6-digit tag) stays within
    ``budget`` bytes: the term's length is its fixed text plus the regex, which the template repeats (the
    throttle expression names the selector once per hardware bit)."""
    shell = f'label_replace(count({_inner(template, _SENTINEL, step)}), "{TERM_LABEL}", "000000", "", "")'
    repeats = shell.count(_SENTINEL)
    fixed = len(shell) - repeats + repeats * len(_selector(metric, []))
    parts: list[list[str]] = []
    current: list[str] = []
    size = fixed
    for uuid in uuids:
        grow = repeats * (len(uuid) + (1 if current else 0))  # the UUID and its "|"
        if current and size + grow > budget:
            parts.append(current)
            current, size, grow = [], fixed, repeats * len(uuid)
        current.append(uuid)
        size += grow
    if current:
        parts.append(current)
    return parts


def group_series(metric: str, groups: dict[Hashable, list[str]], stats: list[tuple[str, str]], *,
                 start: dt.datetime, end: dt.datetime, step: int) -> dict[Hashable, list[dict[int, float]]]:
    """Per group, per stat ``(aggregation, per-GPU expression)``, ``{bucket start (unix s): value}`` over the
    group's UUIDs for the buckets of ``step`` seconds in [start, end). A bucket where no GPU of the group has a
    sample is absent. As in ``promql.history``, the value at bucket start ``t`` is evaluated at ``t + step``."""
    budget = max_query_bytes()
    terms: list[_Term] = []
    for group, uuids in groups.items():
        if not uuids:
            continue
        for k, (op, template) in enumerate(stats):
            parts = _parts(metric, template, sorted(uuids), step, budget)
            if len(parts) == 1:
                terms.append(_Term((group, k), "value", parts[0]))
            elif op == "avg":
                terms += [_Term((group, k), role, part) for part in parts for role in ("sum", "count")]
            else:
                terms += [_Term((group, k), "value", part) for part in parts]
    queries: list[list[int]] = []
    texts = [_text(term, *stats[term.key[1]], metric, step, i) for i, term in enumerate(terms)]
    size = 0
    for i, text in enumerate(texts):
        if not queries or size + len(_JOIN) + len(text) > budget:
            queries.append([])
            size = -len(_JOIN)
        queries[-1].append(i)
        size += len(_JOIN) + len(text)
    per_term: dict[int, dict[int, float]] = {}
    for result in _run([_JOIN.join(texts[i] for i in q) for q in queries], start, end, step):
        for item in result:
            index = int(item["metric"].get(TERM_LABEL, "-1"))
            points = per_term.setdefault(index, {})
            for t, v in item.get("values", []):
                value = float(v)
                if value == value:  # not NaN
                    points[int(float(t)) - step] = value
    return _combine(groups, stats, terms, per_term, start, end)


def _run(queries: list[str], start: dt.datetime, end: dt.datetime, step: int) -> list[list[dict]]:
    shifted = (start + dt.timedelta(seconds=step), end + dt.timedelta(seconds=step))
    if len(queries) <= 1:
        return [query_range(q, *shifted, step) for q in queries]
    workers = min(len(queries), max(1, int(getattr(settings, "FLEET_PROMETHEUS_CONCURRENCY", 4))))
    with ThreadPoolExecutor(max_workers=workers) as pool:  # HTTP only: no database connection in the threads
        return list(pool.map(lambda q: query_range(q, *shifted, step), queries))


def _combine(groups: dict[Hashable, list[str]], stats: list[tuple[str, str]], terms: list[_Term],
             per_term: dict[int, dict[int, float]], start: dt.datetime, end: dt.datetime
             ) -> dict[Hashable, list[dict[int, float]]]:
    lo, hi = start.timestamp(), end.timestamp()
    by_key: dict[tuple[Hashable, int], list[tuple[str, dict[int, float]]]] = {}
    for i, term in enumerate(terms):
        by_key.setdefault(term.key, []).append((term.role, per_term.get(i, {})))
    out: dict[Hashable, list[dict[int, float]]] = {group: [{} for _ in stats] for group in groups}
    for (group, k), got in by_key.items():
        op = stats[k][0]
        series: dict[int, float] = {}
        if op == "avg" and got[0][0] == "sum":
            sums: dict[int, float] = {}
            counts: dict[int, float] = {}
            for role, points in got:
                into = sums if role == "sum" else counts
                for t, v in points.items():
                    into[t] = into.get(t, 0.0) + v
            series = {t: sums[t] / n for t, n in counts.items() if n and t in sums}
        else:
            reduce = {"min": min, "max": max, "sum": sum, "avg": sum}[op]  # "avg" here: one part, its value
            for _, points in got:
                for t, v in points.items():
                    series[t] = reduce((series[t], v)) if t in series else v
        out[group][k] = {t: v for t, v in sorted(series.items()) if lo <= t < hi}
    return out


def history(*, uuids: list[str], metric: str, start: dt.datetime, end: dt.datetime, tier: str
            ) -> list[tuple[dt.datetime, float | None, float | None, float | None]]:
    """``[(bucket start, min, avg, max)]`` of a group (its GPUs' ``uuids``), as ``promql.history`` for one GPU.
    Counter increases are per GPU only (as in the embedded store's group rollups): none for a group."""
    if metric not in HISTORY or not uuids:
        return []
    step = step_for(start, end, tier)
    wanted = [(k, stat) for k, stat in enumerate(HISTORY[metric]) if stat is not None]
    got = group_series(metric, {0: uuids}, [stat for _, stat in wanted], start=start, end=end, step=step)[0]
    columns: list[dict[int, float]] = [{}, {}, {}]
    for (k, _), series in zip(wanted, got, strict=True):
        columns[k] = series
    times = sorted(set().union(*columns))
    return [(dt.datetime.fromtimestamp(t, tz=dt.UTC), *(c.get(t) for c in columns)) for t in times]


def frames(metric: str, groups: dict[Hashable, list[str]], *, start: dt.datetime, end: dt.datetime, step: int
           ) -> dict[Hashable, dict[int, float]]:
    """Per group (a rack of the heatmap's playback), ``{bucket start: value}``: :data:`FRAME`'s aggregate."""
    got = group_series(metric, groups, [FRAME[metric]], start=start, end=end, step=step)
    return {group: series[0] for group, series in got.items()}
