"""Reading history from a Prometheus-compatible store (``FLEET_TELEMETRY_BACKEND=prometheus``).

Prometheus, Thanos, Mimir and VictoriaMetrics answer the same HTTP API: ``/api/v1/query``, ``/api/v1/query_range``
and ``/api/v1/series``. Only plain PromQL is sent (no MetricsQL). Series are dcgm-exporter's, matched to Fleet's
GPUs by the UUID label (``FLEET_PROMETHEUS_LABELS``: dcgm-exporter's names by default; relabelled stores say
theirs). Every request is a form POST (a rack's UUID regex does not fit a URL), bounded by
``FLEET_PROMETHEUS_TIMEOUT``; a store that is down, slow or refusing raises :class:`StoreUnavailable` with a
message the charts show, and nothing else on a page depends on it.

Steps: never more than ``POINTS_MAX`` points per series (Prometheus refuses more than 11,000).
Counters (ECC, remapped rows) are read as increases per bucket (from the last value at each bucket edge, resets
detected as in the embedded store); the XID gauge holds the *last* XID, so its changes
are pulled into Fleet's own ``XidEvent`` table by :func:`pull`; charts count XIDs from there.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from django.conf import settings

from inventory.identity import normalize_uuid
from telemetry.dcgm import THROTTLE_HW_MASK

POINTS_MAX = 10_000  # per series and request: Prometheus refuses more than 11,000
TIER_STEP = {"raw": 30, "5m": 300, "1h": 3600}
# dcgm-exporter metric names per Fleet metric (default-counters.csv, plus the opt-in health fields).
METRIC = {
    "gpu_temp": "DCGM_FI_DEV_GPU_TEMP", "mem_temp": "DCGM_FI_DEV_MEMORY_TEMP", "power": "DCGM_FI_DEV_POWER_USAGE",
    "sm_clock": "DCGM_FI_DEV_SM_CLOCK", "tlimit": "DCGM_FI_DEV_GPU_TEMP_LIMIT",
    "throttle": "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "ecc_sbe": "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "ecc_dbe": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "remap_corr": "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "remap_unc": "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "remap_failure": "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "xid": "DCGM_FI_DEV_XID_ERRORS", "pcie_replay": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
}
COUNTERS = ("ecc_sbe", "ecc_dbe", "remap_corr", "remap_unc", "pcie_replay")
DEFAULT_LABELS = {"uuid": "UUID", "host": "Hostname", "gpu": "gpu", "model": "modelName"}
_HW_BITS = [1 << b for b in range(16) if THROTTLE_HW_MASK & (1 << b)]


class StoreUnavailable(RuntimeError):
    """The store did not answer usefully (down, slow, 4xx/5xx): the message says which, for the page."""


def uuid_key(uuid: str) -> str:
    """A UUID label's value as Fleet keeps UUIDs (``GPU-`` and lower-case hex)."""
    return normalize_uuid(uuid) or uuid


def labels() -> dict[str, str]:
    return {**DEFAULT_LABELS, **getattr(settings, "FLEET_PROMETHEUS_LABELS", {})}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def escape_regex(value: str) -> str:
    """``value`` matched literally inside a PromQL regex string (``=~"..."``)."""
    return _escape(re.escape(value))


def selector(metric: str, uuids: list[str]) -> str:
    """``DCGM_...{UUID="..."}`` or, for several GPUs, a regex match (UUIDs are hex and dashes: no escaping)."""
    name, label = METRIC[metric], labels()["uuid"]
    if len(uuids) == 1:
        return f'{name}{{{label}="{_escape(uuids[0])}"}}'
    return f'{name}{{{label}=~"{"|".join(_escape(u) for u in uuids)}"}}'


def throttled(expr: str) -> str:
    """1 when ``expr`` (a clock-event-reasons bitmask) has a hardware reason, else 0. PromQL has no bitwise
    AND: bit b is ``floor(x / 2^b) % 2``."""
    bits = " + ".join(f"(floor({expr} / {bit}) % 2)" for bit in _HW_BITS)
    return f"clamp_max({bits}, 1)"


def _context() -> ssl.SSLContext | None:
    ca = getattr(settings, "FLEET_PROMETHEUS_CA", "")
    return ssl.create_default_context(cafile=ca) if ca else None


def request(path: str, params: dict[str, Any]) -> Any:
    """POST ``params`` to ``path`` of the store; the ``data`` of a ``success`` answer, else StoreUnavailable."""
    base = settings.FLEET_PROMETHEUS_URL.rstrip("/")
    if not base:
        raise StoreUnavailable("FLEET_PROMETHEUS_URL is not set")
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}
    if settings.FLEET_PROMETHEUS_TOKEN:
        headers["Authorization"] = f"Bearer {settings.FLEET_PROMETHEUS_TOKEN}"
    elif settings.FLEET_PROMETHEUS_USER:
        import base64

        pair = f"{settings.FLEET_PROMETHEUS_USER}:{settings.FLEET_PROMETHEUS_PASSWORD}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
    body = urllib.parse.urlencode(params).encode()
    req = urllib.request.Request(base + path, data=body, headers=headers, method="POST")  # noqa: S310 - the configured store
    try:
        with urllib.request.urlopen(req, timeout=settings.FLEET_PROMETHEUS_TIMEOUT, context=_context()) as response:  # noqa: S310
            answer = json.load(response)
    except urllib.error.HTTPError as exc:
        detail = ""
        try:
            detail = json.loads(exc.read() or b"{}").get("error", "")
        except (ValueError, OSError):
            pass
        raise StoreUnavailable(f"the history store answered {exc.code}{': ' + detail if detail else ''}") from exc
    except TimeoutError as exc:
        raise StoreUnavailable(f"the history store did not answer within {settings.FLEET_PROMETHEUS_TIMEOUT:g} s") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            raise StoreUnavailable(f"the history store did not answer within "
                                   f"{settings.FLEET_PROMETHEUS_TIMEOUT:g} s") from exc
        raise StoreUnavailable(f"the history store is unreachable ({reason})") from exc
    except ValueError as exc:
        raise StoreUnavailable("the history store's answer is not JSON") from exc
    if answer.get("status") != "success":
        raise StoreUnavailable(f"the history store refused the query: {answer.get('error', 'unknown error')}")
    return answer["data"]


def step_for(start: dt.datetime, end: dt.datetime, tier: str) -> int:
    """The tier's step, or coarser so that no series has more than POINTS_MAX points."""
    span = (end - start).total_seconds()
    return max(TIER_STEP[tier], math.ceil(span / POINTS_MAX))


def query_range(expr: str, start: dt.datetime, end: dt.datetime, step: int) -> list[dict[str, Any]]:
    # Prometheus's points are at start, start + step, ...: aligned to the step, so buckets line up with Fleet's.
    first = math.ceil(start.timestamp() / step) * step
    last = math.floor((end.timestamp() - 1) / step) * step
    if last < first:
        return []
    return request("/api/v1/query_range", {"query": expr, "start": first, "end": last, "step": step})["result"]


def query(expr: str, at: dt.datetime | None = None) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"query": expr}
    if at is not None:
        params["time"] = at.timestamp()
    return request("/api/v1/query", params)["result"]


def max_query_bytes() -> int:
    """The longest query (or ``match[]``) sent: ``FLEET_PROMETHEUS_MAX_QUERY_BYTES``."""
    return int(getattr(settings, "FLEET_PROMETHEUS_MAX_QUERY_BYTES", 16_384))


def series(match: str, start: dt.datetime, end: dt.datetime) -> list[dict[str, str]]:
    """The label sets of the series matching ``match`` with samples in [start, end): ``/api/v1/series`` reads
    the store's index, never a sample."""
    return request("/api/v1/series", {"match[]": match, "start": start.timestamp(), "end": end.timestamp()})


def series_uuids(uuids: list[str], *, start: dt.datetime, end: dt.datetime, metric: str = "gpu_temp") -> set[str]:
    """The UUIDs among ``uuids`` that have a series of ``metric`` under the UUID label in [start, end), as Fleet
    keeps them (:func:`uuid_key`). One ``/api/v1/series`` request per :func:`max_query_bytes` of UUIDs."""
    label = labels()["uuid"]
    shell = f'{METRIC[metric]}{{{label}=~""}}'
    chunks: list[list[str]] = [[]]
    size = len(shell)
    for uuid in uuids:
        if chunks[-1] and size + len(uuid) + 1 > max_query_bytes():
            chunks.append([])
            size = len(shell)
        chunks[-1].append(uuid)
        size += len(uuid) + 1
    found: set[str] = set()
    for chunk in chunks:
        if chunk:
            match = f'{METRIC[metric]}{{{label}=~"{"|".join(_escape(u) for u in chunk)}"}}'
            found.update(uuid_key(item.get(label, "")) for item in series(match, start, end))
    return found & {uuid_key(uuid) for uuid in uuids}


def _points(result: list[dict[str, Any]]) -> dict[int, float]:
    """The one series of ``result`` as {unix seconds: value} (an empty result: {})."""
    out: dict[int, float] = {}
    for item in result:
        for t, v in item.get("values", []):
            value = float(v)
            if not math.isnan(value):
                out[int(float(t))] = value
    return out


# --- history -------------------------------------------------------------------------------------------------

# (min, avg, max) PromQL per metric, {s} = the series selector, {w} = the window (the step): per GPU.
_GPU = {
    "gpu_temp": ("min_over_time({s}[{w}])", "avg_over_time({s}[{w}])", "max_over_time({s}[{w}])"),
    "mem_temp": (None, None, "max_over_time({s}[{w}])"),
    "power": ("min_over_time({s}[{w}])", "avg_over_time({s}[{w}])", "max_over_time({s}[{w}])"),
    "power_sum": (None, "avg_over_time({s}[{w}])", None),
    "sm_clock": (None, "avg_over_time({s}[{w}])", None),
    "tlimit": ("min_over_time({s}[{w}])", None, None),
    "throttle": (None, "avg_over_time({t}[{w}:{r}])", None),
}
_SOURCE_METRIC = {"power_sum": "power"}


def history(*, uuid: str, metric: str, start: dt.datetime, end: dt.datetime,
            tier: str) -> list[tuple[dt.datetime, float | None, float | None, float | None]]:
    """``[(bucket start, min, avg, max)]`` of ``metric`` of one GPU (racks, rows and sites: ``promql_groups``).
    A point at bucket start ``t`` summarises ``[t, t + step)``: PromQL's ``*_over_time(x[w])`` evaluated at
    ``t + step`` looks back over ``(t, t + step]``."""
    uuids = [uuid]
    step = step_for(start, end, tier)
    if metric in COUNTERS:
        return _increases(selector(metric, uuids), start, end, step)
    source = _SOURCE_METRIC.get(metric, metric)
    s = selector(source, uuids)
    scrape = int(getattr(settings, "FLEET_PROMETHEUS_SCRAPE_S", 30))
    parts = []
    for template in _GPU[metric]:
        if template is None:
            parts.append({})
            continue
        expr = template.format(s=s, w=f"{step}s", t=throttled(s), r=f"{min(scrape, step)}s")
        got = query_range(expr, start + dt.timedelta(seconds=step), end + dt.timedelta(seconds=step), step)
        parts.append({t - step: v for t, v in _points(got).items()})
    times = sorted(set().union(*parts))
    return [(dt.datetime.fromtimestamp(t, tz=dt.UTC), *(p.get(t) for p in parts)) for t in times
            if start.timestamp() <= t < end.timestamp()]


def _delta(new: float, old: float | None) -> float:
    """A counter's increase from ``old`` to ``new``: a lower value is a reset (reboot, driver reload), so the
    increase is the new value; no earlier value: 0 (a baseline). The embedded store's rule (store.py)."""
    if old is None:
        return 0.0
    return new if new < old else new - old


def _increases(s: str, start: dt.datetime, end: dt.datetime, step: int) -> list[tuple]:
    """Per bucket, the counter's increase summed over the series: exact, from the last value at or before each
    bucket boundary (``last_over_time``), with resets as above. ``increase()`` would extrapolate to the window's
    edges and split an increase between two buckets."""
    got = query_range(f"last_over_time({s}[{step + 3600}s])", start - dt.timedelta(seconds=step),
                      end + dt.timedelta(seconds=step), step)
    sums: dict[int, float] = {}
    for item in got:
        previous: float | None = None
        for t, v in item.get("values", []):
            value = float(v)
            bucket = int(float(t)) - step
            if previous is not None or bucket >= start.timestamp() - step:
                sums[bucket] = sums.get(bucket, 0.0) + _delta(value, previous)
            previous = value
    return [(dt.datetime.fromtimestamp(t, tz=dt.UTC), None, v, None) for t, v in sorted(sums.items())
            if start.timestamp() <= t < end.timestamp()]


def latest(metric: str, at: dt.datetime | None = None) -> dict[str, float]:
    """{UUID: value} of every GPU's latest sample (or the mean over the 5 minutes before ``at``)."""
    name, label = METRIC[metric], labels()["uuid"]
    s = f"{name}{{{label}!=\"\"}}"
    if metric == "throttle":
        expr = throttled(s) if at is None else f"max_over_time({throttled(s)}[5m:30s])"
    else:
        expr = s if at is None else f"avg_over_time({s}[5m])"
    out: dict[str, float] = {}
    for item in query(expr, at):
        uuid = item["metric"].get(label)
        value = float(item["value"][1])
        if uuid and not math.isnan(value):
            out[uuid_key(uuid)] = value
    return out


def frames(metric: str, *, start: dt.datetime, end: dt.datetime, step: int) -> dict[str, dict[int, float]]:
    """{UUID: {bucket start: value}} of every GPU, one value per ``step`` (the heatmap's playback): the mean of
    the bucket (for ``throttle``, 1 if any sample of it had a hardware reason)."""
    label = labels()["uuid"]
    s = f'{METRIC[metric]}{{{label}!=""}}'
    scrape = int(getattr(settings, "FLEET_PROMETHEUS_SCRAPE_S", 30))
    expr = (f"max_over_time({throttled(s)}[{step}s:{min(scrape, step)}s])" if metric == "throttle"
            else f"{'max' if metric == 'mem_temp' else 'min' if metric == 'tlimit' else 'avg'}_over_time({s}[{step}s])")
    out: dict[str, dict[int, float]] = {}
    for item in query_range(expr, start + dt.timedelta(seconds=step), end + dt.timedelta(seconds=step), step):
        uuid = uuid_key(item["metric"].get(label, ""))
        points = out.setdefault(uuid, {})
        for t, v in item.get("values", []):
            value = float(v)
            if not math.isnan(value):
                points[int(float(t)) - step] = value
    return out


# --- pulled into Fleet's tables (beat) -------------------------------------------------------------------------


def xid_changes(*, start: dt.datetime, end: dt.datetime, step: int) -> list[tuple[str, dt.datetime, int]]:
    """(UUID, time, xid) each time the XID gauge of a GPU changed to a non-zero value in [start, end)
    (the gauge holds the last XID: the same value over many scrapes is one event). The value at ``start`` is
    compared with the one a step before, so consecutive windows neither miss nor double an event."""
    label = labels()["uuid"]
    got = query_range(f'{METRIC["xid"]}{{{label}!=""}}', start - dt.timedelta(seconds=step), end, step)
    events = []
    for item in got:
        uuid = uuid_key(item["metric"].get(label, ""))
        previous: float | None = None
        for t, v in item.get("values", []):
            value = float(v)
            when = dt.datetime.fromtimestamp(float(t), tz=dt.UTC)
            if value and value != previous and previous is not None and when >= start:
                events.append((uuid, when, int(value)))
            previous = value
    return events


def xid_key(gpu_id: int, at: dt.datetime, xid: int) -> str:
    """The idempotency key of a pulled XID event (``XidEvent.line_key``)."""
    return hashlib.sha256(f"prom:{gpu_id}:{int(at.timestamp())}:{xid}".encode()).hexdigest()


def hour_aggregates(hour_end: dt.datetime) -> dict[str, dict[str, float]]:
    """Per column of ``telemetry_rollup1h``, {UUID: value} over the hour ending at ``hour_end``: one instant
    query per column for the whole fleet."""
    label = labels()["uuid"]
    scrape = int(getattr(settings, "FLEET_PROMETHEUS_SCRAPE_S", 30))

    def s(metric: str) -> str:
        return f'{METRIC[metric]}{{{label}!=""}}'

    exprs = {
        "n_samples": f"count_over_time({s('gpu_temp')}[1h])",
        "gpu_temp_min": f"min_over_time({s('gpu_temp')}[1h])",
        "gpu_temp_avg": f"avg_over_time({s('gpu_temp')}[1h])",
        "gpu_temp_max": f"max_over_time({s('gpu_temp')}[1h])",
        "mem_temp_max": f"max_over_time({s('mem_temp')}[1h])",
        "tlimit_min": f"min_over_time({s('tlimit')}[1h])",
        "power_min": f"min_over_time({s('power')}[1h])",
        "power_avg": f"avg_over_time({s('power')}[1h])",
        "power_max": f"max_over_time({s('power')}[1h])",
        "sm_clock_avg": f"avg_over_time({s('sm_clock')}[1h])",
        "throttled_samples": f"sum_over_time({throttled(s('throttle'))}[1h:{scrape}s])",
    }
    out = {}
    for column, expr in exprs.items():
        values = {}
        for item in query(expr, hour_end):
            uuid = item["metric"].get(label)
            value = float(item["value"][1])
            if uuid and not math.isnan(value):
                values[uuid_key(uuid)] = value
        out[column] = values
    # Counters: the increase from the last value before the hour to the last one in it (resets as in _delta).
    for c in COUNTERS:
        ends = [_instant(f"last_over_time({s(c)}[2h])", at, label) for at in (hour_end - dt.timedelta(hours=1),
                                                                             hour_end)]
        out[f"d_{c}"] = {uuid: _delta(value, ends[0].get(uuid)) for uuid, value in ends[1].items()}
    return out


def _instant(expr: str, at: dt.datetime, label: str) -> dict[str, float]:
    values = {}
    for item in query(expr, at):
        uuid = item["metric"].get(label)
        value = float(item["value"][1])
        if uuid and not math.isnan(value):
            values[uuid_key(uuid)] = values.get(uuid_key(uuid), 0.0) + value  # MIG instances: summed to the GPU
    return values
