"""Every telemetry read a page or an endpoint needs: history per tier, the fleet heatmap, ingest status.

Signatures and tier rules: ``docs/telemetry.md``. The raw tables are read with SQL (they have no model).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import psycopg
from django.conf import settings
from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from inventory.heatmap_layers import HEATMAP_LAYERS, Category, heatmap_layer_register
from inventory.models import Gpu, Rack, Row, Server, Site
from telemetry import compact, promql, promql_groups
from telemetry.dcgm import THROTTLE_HW_MASK
from telemetry.models import GpuLatest, HealthFlag, IngestSource, XidEvent
from telemetry.rollup import FIVE_MIN, floor

Scope = Literal["gpu", "rack", "row", "site"]
Resolution = Literal["auto", "raw", "5m", "1h"]
Point = tuple[dt.datetime, float | None, float | None, float | None]

METRICS = ("gpu_temp", "mem_temp", "power", "power_sum", "sm_clock", "tlimit", "throttle", "xid", "ecc_dbe",
           "remap_unc")
# Metrics counted per bucket (events, counter increases): no raw tier.
BUCKET_METRICS = ("xid", "ecc_dbe", "remap_unc")
SCOPES = ("gpu", "rack", "row", "site")
RESOLUTIONS = ("auto", "raw", "5m", "1h")
RAW_MAX_SPAN = dt.timedelta(hours=6)
FIVE_MIN_MAX_SPAN = dt.timedelta(days=7)
UNITS = {"gpu_temp": "C", "mem_temp": "C", "power": "W", "power_sum": "W", "sm_clock": "MHz", "tlimit": "C",
         "throttle": "fraction", "xid": "events", "ecc_dbe": "errors", "remap_unc": "rows", "health": "severity"}

# (min, avg, max) expressions per metric: raw sample columns, per-GPU rollups, group rollups.
_RAW = {
    "gpu_temp": "gpu_temp_c", "mem_temp": "mem_temp_c", "power": "power_w", "power_sum": "power_w",
    "sm_clock": "sm_clock_mhz",
    "tlimit": "tlimit_c", "throttle": f"CASE WHEN (throttle_mask & {THROTTLE_HW_MASK}) <> 0 THEN 1 ELSE 0 END",
}
_GPU_ROLLUP = {
    "gpu_temp": ("gpu_temp_min", "gpu_temp_avg", "gpu_temp_max"),
    "mem_temp": ("NULL", "NULL", "mem_temp_max"),
    "power": ("power_min", "power_avg", "power_max"),
    "sm_clock": ("NULL", "sm_clock_avg", "NULL"),
    "tlimit": ("tlimit_min", "NULL", "NULL"),
    "throttle": ("NULL", "CAST(throttled_samples AS real) / NULLIF(n_samples, 0)", "NULL"),
    "xid": ("NULL", "hw_xid_count", "NULL"),
    "power_sum": ("NULL", "power_avg", "NULL"),  # one GPU's draw: its mean
    "ecc_dbe": ("NULL", "d_ecc_dbe", "NULL"),  # double-bit ECC errors in the bucket (counter increase)
    "remap_unc": ("NULL", "d_remap_unc", "NULL"),  # rows remapped for uncorrectable errors in the bucket
}
_GROUP_ROLLUP = {
    **_GPU_ROLLUP,
    "throttle": ("NULL", "CAST(throttled_gpus AS real) / NULLIF(n_gpus, 0)", "NULL"),
    "power_sum": ("NULL", "power_sum", "NULL"),  # the group's draw: the sum of its GPUs' means
    "ecc_dbe": ("NULL", "NULL", "NULL"),  # per GPU only
    "remap_unc": ("NULL", "NULL", "NULL"),
}


class HistoryError(ValueError):
    """A history query that cannot be answered (``field`` names the parameter at fault)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def history_tier(*, scope: Scope, start: dt.datetime, end: dt.datetime, resolution: Resolution = "auto",
                 now: dt.datetime | None = None) -> str:
    """The tier a history query reads: ``raw`` (one GPU, up to 6 h, raw rows or compacted days), ``5m`` (up to
    7 days, within the 5-minute retention) or ``1h``. An explicit resolution is taken as asked, except ``raw``
    for a group (there is no raw group data: 5m)."""
    if resolution != "auto":
        return "5m" if resolution == "raw" and scope != "gpu" else resolution
    now = now or timezone.now()
    span = end - start
    if scope == "gpu" and span <= RAW_MAX_SPAN:  # raw rows, compacted days (embedded) or the store (prometheus)
        return "raw"
    if span <= FIVE_MIN_MAX_SPAN and start >= now - dt.timedelta(days=settings.FLEET_TELEMETRY_5M_DAYS):
        return "5m"
    return "1h"


def _rows(sql: str, params: Sequence[Any]) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _rows_binary(sql: str, params: Sequence[Any]) -> list[tuple]:
    """PostgreSQL rows in the binary format: a float8 arrives as 8 bytes instead of text formatted by the server
    and parsed here (a 1-hour read of a year is 35,000 numbers: 30 % of its time). Django's cursors bind on the
    client, which has no binary results; this is a psycopg cursor on the same connection and transaction (not
    prepared: safe behind a transaction-pooling proxy)."""
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params, prepare=False, binary=True)
        return cursor.fetchall()


def _dt(value: Any) -> dt.datetime:
    """A timestamp column as an aware datetime (SQLite returns text for the tables without a model)."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


def history(*, scope: Scope, scope_id: int, metric: str, start: dt.datetime, end: dt.datetime,
            resolution: Resolution = "auto") -> list[Point]:
    """``[(bucket start, min, avg, max), ...]`` of ``metric`` for one GPU, rack, row or site, oldest first.

    Raw points are single samples (min = avg = max). Metrics with only one aggregate leave the others None:
    ``mem_temp`` (max), ``sm_clock`` (avg), ``tlimit`` (min: the least headroom), ``throttle`` (avg: the
    fraction of samples, or of GPUs, with a hardware throttle reason), ``xid`` (avg: hardware XID events).
    """
    if metric not in METRICS:
        raise HistoryError("metric", f"unknown metric {metric!r}; one of {', '.join(METRICS)}")
    if scope not in SCOPES:
        raise HistoryError("scope", f"unknown scope {scope!r}; one of {', '.join(SCOPES)}")
    if end <= start:
        raise HistoryError("end", "end must be after start")
    tier = history_tier(scope=scope, start=start, end=end, resolution=resolution)
    if metric in BUCKET_METRICS and tier == "raw":
        tier = "5m"
    return backend().history(scope=scope, scope_id=scope_id, metric=metric, start=start, end=end, tier=tier)


_STAMPS: dict[float, dt.datetime] = {}  # bucket starts: every chart of the same range reads the same ones


def _stamp(epoch: float) -> dt.datetime:
    """An aware datetime for a bucket start, kept (an aware fromtimestamp is ~2.5 us; a year has 8,760 hours)."""
    value = _STAMPS.get(epoch)
    if value is None:
        if len(_STAMPS) > 200_000:
            _STAMPS.clear()
        value = _STAMPS[epoch] = dt.datetime.fromtimestamp(epoch, dt.UTC)
    return value


class HistoryBackend:
    """Where history, the heatmap's values and the hourly inputs of rollups and health come from
    (``FLEET_TELEMETRY_BACKEND``): :class:`EmbeddedBackend` (Fleet's own tables) or :class:`PrometheusBackend`
    (a Prometheus-compatible store's HTTP API). Pages call the selectors, never a backend directly."""

    name = ""

    def history(self, *, scope: Scope, scope_id: int, metric: str, start: dt.datetime, end: dt.datetime,
                tier: str) -> list[Point]:
        raise NotImplementedError

    def latest_values(self, metric: str, at: dt.datetime | None) -> tuple[list[int], list[int | None]]:
        """(gpu ids, values) of the GPUs that have a value (heatmap)."""
        raise NotImplementedError


class EmbeddedBackend(HistoryBackend):
    name = "embedded"

    def history(self, *, scope: Scope, scope_id: int, metric: str, start: dt.datetime, end: dt.datetime,
                tier: str) -> list[Point]:
        params = [connection.ops.adapt_datetimefield_value(value) for value in (start, end)]
        if tier == "raw":
            return compact.raw_history(gpu_id=scope_id, column=_RAW[metric], start=start, end=end)
        if scope == "gpu":
            table = "telemetry_rollup5m" if tier == "5m" else "telemetry_rollup1h"
            low, mid, high = _GPU_ROLLUP[metric]
            where = "gpu_id = %s"
        else:
            table = "telemetry_rollupgroup5m" if tier == "5m" else "telemetry_rollupgroup1h"
            low, mid, high = _GROUP_ROLLUP[metric]
            where = "level = %s AND group_id = %s"
        key = [scope_id] if scope == "gpu" else [scope, scope_id]
        if connection.vendor == "postgresql":
            # Seconds, not timestamptz: Django's per-value timestamptz loader was 5/6 of a 1-year read
            # (8,760 rows: 2 ms of SQL, 50 ms of loading); the values are float8 already, read in binary.
            # The 1-hour key carries these columns (migration 0003): an index-only scan, in bucket order.
            rows = _rows_binary(f"SELECT date_part('epoch', bucket), {low}::float8, {mid}::float8, "  # noqa: S608
                                f"{high}::float8 FROM {table} WHERE {where} AND bucket >= %s AND bucket < %s "
                                "ORDER BY bucket", [*key, start, end])
            kept = _STAMPS.get  # a call of _stamp per row only for a bucket not seen before
            return [(kept(e) or _stamp(e), a, b, c) for e, a, b, c in rows]
        rows = _rows(f"SELECT bucket, {low}, {mid}, {high} FROM {table} WHERE {where} "  # noqa: S608
                     "AND bucket >= %s AND bucket < %s ORDER BY bucket", [*key, *params])
        return [(_dt(bucket), _num(a), _num(b), _num(c)) for bucket, a, b, c in rows]

    def latest_values(self, metric: str, at: dt.datetime | None) -> tuple[list[int], list[int | None]]:
        if at is None:
            sql = f"SELECT l.gpu_id, {_LATEST_VALUE[metric]} FROM telemetry_gpulatest l"  # noqa: S608
            rows = _rows(sql, [])
        else:
            rows = _rows(f"SELECT r.gpu_id, {_ROLLUP_VALUE[metric]} FROM telemetry_rollup5m r "  # noqa: S608
                         "WHERE r.bucket = %s", [connection.ops.adapt_datetimefield_value(floor(at, FIVE_MIN))])
        return [r[0] for r in rows], [None if r[1] is None else round(r[1]) for r in rows]


class PrometheusBackend(HistoryBackend):
    """Reads a Prometheus-compatible store (``telemetry.promql``); stores no raw samples. XIDs per bucket come from
    Fleet's own ``XidEvent`` table (pulled by beat: the exporter's XID gauge holds only the last one)."""

    name = "prometheus"

    def history(self, *, scope: Scope, scope_id: int, metric: str, start: dt.datetime, end: dt.datetime,
                tier: str) -> list[Point]:
        if metric == "xid":
            return _xid_buckets(scope=scope, scope_id=scope_id, start=start, end=end, tier=tier)
        uuids = _scope_uuids(scope, scope_id)
        if scope == "gpu":
            return promql.history(uuid=uuids[0], metric=metric, start=start, end=end, tier=tier) if uuids else []
        # Racks, rows, sites: aggregated by the store over the group's UUIDs from Fleet's placement.
        return promql_groups.history(uuids=uuids, metric=metric, start=start, end=end, tier=tier)

    def latest_values(self, metric: str, at: dt.datetime | None) -> tuple[list[int], list[int | None]]:
        values = promql.latest(metric, at)
        ids = uuid_ids(list(values))
        pairs = [(ids[uuid], round(value)) for uuid, value in values.items() if uuid in ids]
        return [p[0] for p in pairs], [p[1] for p in pairs]


def backend() -> HistoryBackend:
    return PrometheusBackend() if settings.FLEET_TELEMETRY_BACKEND == "prometheus" else EmbeddedBackend()


def _scope_uuids(scope: Scope, scope_id: int) -> list[str]:
    gpus = Gpu.objects.filter(uuid__isnull=False)
    gpus = gpus.filter(pk=scope_id) if scope == "gpu" else gpus.filter(**{f"{scope}_id": scope_id})
    return sorted(gpus.values_list("uuid", flat=True))


def uuid_ids(uuids: list[str]) -> dict[str, int]:
    """{UUID (as Fleet keeps it: ``promql.uuid_key``): gpu id} of the known ones."""
    found: dict[str, int] = {}
    for start in range(0, len(uuids), 10_000):
        chunk = uuids[start:start + 10_000]
        found.update(Gpu.objects.filter(uuid__in=chunk).values_list("uuid", "id"))
    return found


def _xid_buckets(*, scope: Scope, scope_id: int, start: dt.datetime, end: dt.datetime, tier: str) -> list[Point]:
    step = max(promql.step_for(start, end, tier), 300)
    events = XidEvent.objects.filter(at__gte=start, at__lt=end, hardware=True)
    events = events.filter(gpu_id=scope_id) if scope == "gpu" else events.filter(**{f"gpu__{scope}_id": scope_id})
    counts: dict[dt.datetime, int] = {}
    for at in events.values_list("at", flat=True):
        bucket = floor(at, dt.timedelta(seconds=step))
        counts[bucket] = counts.get(bucket, 0) + 1
    return [(bucket, None, float(n), None) for bucket, n in sorted(counts.items())]


# --- heatmap ---------------------------------------------------------------------------------------------

_LATEST_VALUE = {
    "gpu_temp": "l.gpu_temp_c", "mem_temp": "l.mem_temp_c", "power": "l.power_w", "sm_clock": "l.sm_clock_mhz",
    "tlimit": "l.tlimit_c", "throttle": f"CASE WHEN (l.throttle_mask & {THROTTLE_HW_MASK}) <> 0 THEN 1 ELSE 0 END",
}
_ROLLUP_VALUE = {
    "gpu_temp": "r.gpu_temp_avg", "mem_temp": "r.mem_temp_max", "power": "r.power_avg", "sm_clock": "r.sm_clock_avg",
    "tlimit": "r.tlimit_min", "throttle": "CASE WHEN r.throttled_samples > 0 THEN 1 ELSE 0 END",
}
_PLACED = ("FROM inventory_gpu g JOIN inventory_server sv ON sv.id = g.server_id "
           "JOIN inventory_rack rk ON rk.id = g.rack_id JOIN inventory_row rw ON rw.id = g.row_id "
           "JOIN inventory_site st ON st.id = g.site_id")


# Heatmap layers that are not telemetry metrics live in inventory.heatmap_layers (the app that owns a layer's data
# registers it there: inventory's scheduler state, the health flags below). A layer gives (gpu ids, small ints) for
# an instant; the heatmap's order, groups, document, caching and API stay the same for every layer.
TELEMETRY_HEATMAP_LABELS = {"gpu_temp": "GPU temperature (°C)", "mem_temp": "Memory temperature (°C)",
                            "power": "Power (W)", "sm_clock": "SM clock (MHz)", "tlimit": "T.Limit headroom (°C)",
                            "throttle": "Throttled (hardware)"}


def heatmap_metrics() -> tuple[str, ...]:
    """Every metric or layer the heatmap can show."""
    return (*TELEMETRY_HEATMAP_LABELS, *HEATMAP_LAYERS)


def heatmap_labels() -> dict[str, str]:
    return {**TELEMETRY_HEATMAP_LABELS, **{name: layer.label for name, layer in HEATMAP_LAYERS.items()}}


def _health_values(at: dt.datetime | None) -> tuple[list[int], list[int | None]]:
    """Open health flags as one number per GPU: 0 none, 1 watch, 2 drain, 3 rma (now, whatever ``at``)."""
    rows = _rows("SELECT h.gpu_id, max(CASE h.severity WHEN 'rma' THEN 3 WHEN 'drain' THEN 2 ELSE 1 END) "
                 "FROM telemetry_healthflag h WHERE h.cleared_at IS NULL GROUP BY h.gpu_id", [])
    return [r[0] for r in rows], [r[1] for r in rows]


heatmap_layer_register("health", label="Health flags", unit="severity", values=_health_values, categories=(
    Category("healthy", "#78be82"), Category("watch", "#f0c83c"), Category("drain", "#f08228"),
    Category("RMA", "#cf222e")))


def _check_heatmap_metric(metric: str) -> None:
    if metric not in heatmap_metrics():
        raise HistoryError("metric", f"unknown metric {metric!r}; one of {', '.join(heatmap_metrics())}")


def _value_sql(metric: str, at: dt.datetime | None) -> tuple[str, str, list[Any]]:
    """(value expression, extra join, join params) for one heatmap metric of telemetry."""
    _check_heatmap_metric(metric)
    if at is None:
        return _LATEST_VALUE[metric], "LEFT JOIN telemetry_gpulatest l ON l.gpu_id = g.id", []
    bucket = connection.ops.adapt_datetimefield_value(floor(at, FIVE_MIN))
    return _ROLLUP_VALUE[metric], "LEFT JOIN telemetry_rollup5m r ON r.gpu_id = g.id AND r.bucket = %s", [bucket]


def _groups(ids: list[int], starts: list[int], names: dict[int, str]) -> dict[str, list]:
    return {"id": ids, "name": [names.get(i, "") for i in ids], "start": starts}


def _order() -> str:
    # Byte-order collation: sorting 100,000 rows on hostnames with the database's locale collation costs ~3x more.
    c = ' COLLATE "C"' if connection.vendor == "postgresql" else ""
    return (f"st.code{c}, rw.name{c}, rw.id, rk.position, rk.id, sv.rack_unit, sv.hostname{c}, sv.id, g.module_id, "
            f"g.pci_bus_id{c}, g.id")


_LEVELS = (("site", "site_id"), ("row", "row_id"), ("rack", "rack_id"), ("server", "server_id"))


LAYOUT_MAX_AGE = 60.0  # seconds a process reuses the heatmap's GPU order: a placement change shows within a minute
_layout: dict[str, Any] = {"at": -LAYOUT_MAX_AGE, "kept": None}


def _heatmap_layout_postgres() -> tuple[list[int], dict[str, Any], dict[int, int]]:
    """GPU ids in heatmap order and per level the group ids with the index of their first GPU (groups are
    contiguous). The order changes only when GPUs move: kept per process for LAYOUT_MAX_AGE seconds.

    One statement sorts the ~12,000 servers (site, row, rack, rack unit, hostname) with each server's GPUs
    already in slot order as an array: sorting 100,000 joined GPU rows on all eleven keys cost three times as
    much (0.8-0.9 s against 0.3 s on 95,000 GPUs, measured with other test runs sharing the machine, load ~4),
    and the order is the same."""
    now = time.monotonic()
    kept = _layout["kept"]  # one tuple: gunicorn's threads never mix two layouts
    if kept is not None and now - _layout["at"] < LAYOUT_MAX_AGE:
        return kept
    c = ' COLLATE "C"'  # byte order: the database's locale collation costs ~3x more on 100,000 hostnames
    sql = (f"SELECT s.site_id, s.row_id, s.rack_id, s.server_id, s.ids FROM ("
           f"SELECT g.site_id, g.row_id, g.rack_id, g.server_id, "
           f"array_agg(g.id ORDER BY g.module_id, g.pci_bus_id{c}, g.id) AS ids FROM inventory_gpu g "
           f"WHERE g.server_id IS NOT NULL AND g.rack_id IS NOT NULL AND g.row_id IS NOT NULL "
           f"AND g.site_id IS NOT NULL GROUP BY g.site_id, g.row_id, g.rack_id, g.server_id) s "
           f"JOIN inventory_server sv ON sv.id = s.server_id JOIN inventory_rack rk ON rk.id = s.rack_id "
           f"JOIN inventory_row rw ON rw.id = s.row_id JOIN inventory_site st ON st.id = s.site_id "
           f"ORDER BY st.code{c}, rw.name{c}, rw.id, rk.position, rk.id, sv.rack_unit, sv.hostname{c}, sv.id")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL work_mem = '64MB'")  # the aggregate and the sort stay in memory
        cursor.execute(sql)
        rows = cursor.fetchall()
    gpus: list[int] = []
    groups: dict[str, tuple[list[int], list[int]]] = {name: ([], []) for name, _ in _LEVELS}
    last: list[Any] = [None] * len(_LEVELS)
    for row in rows:
        for n, (name, _) in enumerate(_LEVELS):
            if row[n] != last[n]:
                last[n] = row[n]
                groups[name][0].append(row[n])
                groups[name][1].append(len(gpus))
        gpus.extend(row[4])
    kept = (gpus, groups, {gpu_id: i for i, gpu_id in enumerate(gpus)})
    _layout.update(kept=kept, at=now)
    return kept


def heatmap_layout_forget() -> None:
    """Forget the kept heatmap order and documents (a test that moves GPUs or writes samples and looks again)."""
    _layout["at"] = -LAYOUT_MAX_AGE
    _documents.clear()


# The heatmap is fleet-wide (the same document for every user) and its values change when the inbox is merged
# (every 15 s): a process answers the same document for this long, then reads it anew. At 100,000 GPUs a
# document is ~30-60 ms of SQL and arrays; bench/load.py asks for it on 1 request in 15.
DOCUMENT_MAX_AGE = 5.0
_documents: dict[tuple[str, dt.datetime | None], tuple[float, dict[str, Any]]] = {}


def heatmap_data_kept(*, metric: str, at: dt.datetime | None = None) -> dict[str, Any]:
    """:func:`heatmap_data`, the same document for up to DOCUMENT_MAX_AGE seconds per process (per metric and
    5-minute bucket). Callers must not change it."""
    key = (metric, floor(at, FIVE_MIN) if at else None)
    now = time.monotonic()
    kept = _documents.get(key)
    if kept is not None and now - kept[0] < DOCUMENT_MAX_AGE:
        return kept[1]
    document = heatmap_data(metric=metric, at=at)
    if len(_documents) >= 64:
        _documents.clear()
    _documents[key] = (now, document)
    return document


def _values_postgres(metric: str, at: dt.datetime | None) -> tuple[list[int], list[int | None]]:
    """(gpu ids, values) of every GPU that has a value, in table order: one scan, no join, no sort."""
    if metric in HEATMAP_LAYERS:
        return HEATMAP_LAYERS[metric].values(at)
    if settings.FLEET_TELEMETRY_BACKEND == "prometheus":
        return backend().latest_values(metric, at)
    params: list[Any] = []
    if at is None:
        sql = f"SELECT array_agg(l.gpu_id), array_agg(round({_LATEST_VALUE[metric]})::int) FROM telemetry_gpulatest l"
        params = []
    else:
        sql = (f"SELECT array_agg(r.gpu_id), array_agg(round({_ROLLUP_VALUE[metric]})::int) "  # noqa: S608
               "FROM telemetry_rollup5m r WHERE r.bucket = %s")
        params = [floor(at, FIVE_MIN)]
    ids, values = _rows(sql, params)[0]
    return ids or [], values or []


def _heatmap_arrays_postgres(metric: str, at: dt.datetime | None) -> tuple[list, list, dict[str, tuple]]:
    gpus, groups, position = _heatmap_layout_postgres()
    values: list[int | None] = [None] * len(gpus)
    ids, found = _values_postgres(metric, at)
    for gpu_id, value in zip(ids, found, strict=True):
        i = position.get(gpu_id)
        if i is not None:
            values[i] = value
    return gpus, values, groups


def _heatmap_arrays_python(metric: str, at: dt.datetime | None) -> tuple[list, list, dict[str, tuple]]:
    found: dict[int, int | None] | None = None
    if metric in HEATMAP_LAYERS or settings.FLEET_TELEMETRY_BACKEND == "prometheus":
        _check_heatmap_metric(metric)
        found = dict(zip(*_values_postgres(metric, at), strict=True))
        value, join, params = "NULL", "", []
    else:
        value, join, params = _value_sql(metric, at)
    rows = _rows(f"SELECT g.id, g.site_id, g.row_id, g.rack_id, g.server_id, {value} {_PLACED} {join} "  # noqa: S608
                 f"ORDER BY {_order()}", params)
    groups: dict[str, tuple[list[int], list[int]]] = {name: ([], []) for name, _ in _LEVELS}
    last: dict[str, Any] = dict.fromkeys(groups)
    for i, row in enumerate(rows):
        for n, (name, _) in enumerate(_LEVELS):
            if row[1 + n] != last[name]:
                last[name] = row[1 + n]
                groups[name][0].append(row[1 + n])
                groups[name][1].append(i)
    if found is not None:
        return [r[0] for r in rows], [found.get(r[0]) for r in rows], groups
    return [r[0] for r in rows], [None if r[5] is None else round(r[5]) for r in rows], groups


def heatmap_data(*, metric: str, at: dt.datetime | None = None) -> dict[str, Any]:
    """Every placed GPU (in a server in a rack) with one value, in site -> row -> rack -> server -> slot order.

    Parallel arrays, not one object per GPU (100,000 GPUs): ``gpus`` (ids), ``values`` (ints, None where
    unknown), ``servers`` (index into ``groups.server`` per GPU); ``groups`` holds, for each level, the ids,
    names and the index in ``gpus`` where each group starts (groups are contiguous). Values come from the
    latest samples, or with ``at`` from the 5-minute rollups of that bucket (the mean over the bucket).
    ``categories`` names a categorical layer's values (``[{"label", "color", "always"}]``, index = value; empty for
    a measured metric): the page draws its legend and hover text from it.
    """
    _check_heatmap_metric(metric)
    arrays = _heatmap_arrays_postgres if connection.vendor == "postgresql" else _heatmap_arrays_python
    gpus, values, groups = arrays(metric, at)
    # Derived once per layout (the layout is cached on PostgreSQL). gunicorn's threads share the layout: "names"
    # is stored last and checked, so a thread never reads it before server_index is there (it did: a 500).
    if "names" not in groups:
        server_starts = groups["server"][1]
        server_index: list[int] = []
        for k, begin in enumerate(server_starts):
            stop = server_starts[k + 1] if k + 1 < len(server_starts) else len(gpus)
            server_index.extend([k] * (stop - begin))
        groups["server_index"] = server_index
        groups["names"] = {level: _names(model, column, groups[level][0]) for level, model, column in (
            ("site", Site, "code"), ("row", Row, "name"), ("rack", Rack, "name"), ("server", Server, "hostname"))}
    names = groups["names"]
    layer = HEATMAP_LAYERS.get(metric)
    return {
        "metric": metric, "unit": layer.unit if layer else UNITS[metric], "at": floor(at, FIVE_MIN) if at else None,
        "categories": [{"label": c.label, "color": c.color, "always": c.always} for c in layer.categories]
        if layer else [],
        "gpus": gpus, "values": values, "servers": groups["server_index"],
        "groups": {name: _groups(list(groups[name][0]), list(groups[name][1]), names[name]) for name, _ in _LEVELS},
    }


def _names(model: Any, column: str, ids: list[int]) -> dict[int, str]:
    """id -> name of ``ids`` (12,000 servers): one array parameter on PostgreSQL (an ``id__in`` of 12,000
    placeholders cost ~0.3 s to build and bind), ``id__in`` elsewhere."""
    if connection.vendor != "postgresql":
        return dict(model.objects.filter(id__in=ids).values_list("id", column))
    table = model._meta.db_table
    return dict(_rows(f'SELECT id, "{column}" FROM {table} WHERE id = ANY(%s)', [list(ids)]))  # noqa: S608


FRAMES_GPU_LIMIT = 600_000  # GPUs x frames above which playback frames are per rack, not per GPU


def heatmap_frames(*, metric: str, start: dt.datetime, end: dt.datetime, step: dt.timedelta = FIVE_MIN,
                   level: Literal["auto", "gpu", "rack"] = "auto") -> dict[str, Any]:
    """Playback frames: one value per GPU (or per rack, for large fleets) per ``step`` from the 5-minute rollups
    (with the prometheus backend, from the store: :func:`_frames_from_store`).

    ``ids`` are in heatmap order (the same GPU order as :func:`heatmap_data`, or its rack order); ``values[f][i]``
    is frame ``f``'s value of ``ids[i]`` (None where unknown); ``times[f]`` is frame ``f``'s bucket.
    """
    if metric not in _ROLLUP_VALUE:
        raise HistoryError("metric", f"unknown metric {metric!r}; one of {', '.join(_ROLLUP_VALUE)}")
    start, end = floor(start, FIVE_MIN), floor(end, FIVE_MIN)
    step = max(step, FIVE_MIN)
    times = []
    t = start
    while t < end:
        times.append(t)
        t += step
    order = _rows(f"SELECT g.id, g.rack_id, g.uuid {_PLACED} ORDER BY {_order()}", [])  # noqa: S608
    if level == "auto":
        level = "gpu" if len(order) * len(times) <= FRAMES_GPU_LIMIT else "rack"
    if settings.FLEET_TELEMETRY_BACKEND == "prometheus":
        return _frames_from_store(metric, level, order, times, step)
    if level == "gpu":
        ids = [gpu_id for gpu_id, _, _ in order]
        table, key, where = "telemetry_rollup5m r", "r.gpu_id", ""
        value = _ROLLUP_VALUE[metric]
    else:
        ids = list(dict.fromkeys(rack_id for _, rack_id, _ in order))
        table, key, where = "telemetry_rollupgroup5m r", "r.group_id", "r.level = 'rack' AND "
        value = {**_ROLLUP_VALUE, "throttle": "r.throttled_gpus"}[metric]  # same column names per rack
    position = {value_id: i for i, value_id in enumerate(ids)}
    frame_of = {t: f for f, t in enumerate(times)}
    values: list[list[int | None]] = [[None] * len(ids) for _ in times]
    params = [connection.ops.adapt_datetimefield_value(value) for value in (start, end)]
    for bucket, key_id, v in _rows(f"SELECT r.bucket, {key}, {value} FROM {table} "  # noqa: S608
                                   f"WHERE {where}r.bucket >= %s AND r.bucket < %s", params):
        frame = frame_of.get(_dt(bucket))
        i = position.get(key_id)
        if frame is not None and i is not None and v is not None:
            values[frame][i] = round(v)
    return {"metric": metric, "unit": UNITS[metric], "level": level, "step_s": int(step.total_seconds()),
            "times": times, "ids": ids, "values": values}


def _frames_from_store(metric: str, level: str, order: list[tuple], times: list[dt.datetime], step: dt.timedelta
                       ) -> dict[str, Any]:
    """Playback frames from the store (prometheus backend). Per GPU: one range query for the fleet, each GPU's
    bucket mean. Per rack: the store aggregates each rack over its GPUs' UUIDs (Fleet's placement), the rack
    rollup's column (``promql_groups.FRAME``): one series per rack, never one per GPU."""
    if level == "gpu":
        ids = [gpu_id for gpu_id, _, _ in order]
    else:
        ids = list(dict.fromkeys(rack_id for _, rack_id, _ in order))
    values: list[list[int | None]] = [[None] * len(ids) for _ in times]
    if times:
        seconds = int(step.total_seconds())
        span = {"start": times[0], "end": times[-1] + step}
        if level == "gpu":
            by_uuid = promql.frames(metric, **span, step=seconds)
            uuids = uuid_ids(list(by_uuid))
            found = {uuids[uuid]: points for uuid, points in by_uuid.items() if uuid in uuids}
        else:
            racks: dict[int, list[str]] = {}
            for _, rack_id, uuid in order:
                if uuid:
                    racks.setdefault(rack_id, []).append(uuid)
            found = promql_groups.frames(metric, racks, **span, step=seconds)
        position = {key_id: i for i, key_id in enumerate(ids)}
        frame_of = {int(t.timestamp()): f for f, t in enumerate(times)}
        for key_id, points in found.items():
            i = position.get(key_id)
            if i is None:
                continue
            for t, v in points.items():
                frame = frame_of.get(t)
                if frame is not None:
                    values[frame][i] = round(v)
    return {"metric": metric, "unit": UNITS[metric], "level": level, "step_s": int(step.total_seconds()),
            "times": times, "ids": ids, "values": values}


# --- status, latest, events ------------------------------------------------------------------------------------

def ingest_sources() -> QuerySet[IngestSource]:
    return IngestSource.objects.order_by("name", "id")


def latest_for(*, gpu_ids: Iterable[int]) -> dict[int, GpuLatest]:
    """The latest sample of each GPU (for "current" columns on list pages): one query."""
    return {latest.gpu_id: latest for latest in GpuLatest.objects.filter(gpu_id__in=list(gpu_ids))}


def xid_events(*, gpu_id: int | None = None, hardware: bool | None = None) -> QuerySet[XidEvent]:
    queryset = XidEvent.objects.select_related("gpu", "ingest_source")
    if gpu_id is not None:
        queryset = queryset.filter(gpu_id=gpu_id)
    if hardware is not None:
        queryset = queryset.filter(hardware=hardware)
    return queryset.order_by("-at", "-id")


def open_health_flags() -> QuerySet[HealthFlag]:
    return HealthFlag.objects.filter(cleared_at__isnull=True).select_related("gpu").order_by("-raised_at", "-id")


def gpus_with_identity(*, gpu_ids: Iterable[int] | None = None) -> list[tuple[str, str, str, str]]:
    """(uuid, hostname, PCI bus id, model name) of placed GPUs with a UUID: what the exporter simulator serves."""
    queryset = Gpu.objects.filter(server__isnull=False, uuid__isnull=False)
    if gpu_ids is not None:
        queryset = queryset.filter(id__in=list(gpu_ids))
    return list(queryset.order_by("server__hostname", "pci_bus_id")
                .values_list("uuid", "server__hostname", "pci_bus_id", "model__name"))
