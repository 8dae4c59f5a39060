"""Rollups: 5-minute and 1-hour aggregates per GPU, and per rack, row and site, computed incrementally.

Every statement is ``INSERT ... SELECT ... GROUP BY ... ON CONFLICT DO UPDATE``: rolling a bucket up twice
gives the same rows, so re-runs and overlapping ranges are harmless.

- 5m per GPU from the raw tables: gauges (min/avg/max), samples with a hardware throttle reason
  (``mask & THROTTLE_HW_MASK``) and ``throttle_s`` = throttled fraction x 300 s, the sums of the counter
  deltas (``telemetry_counter``), hardware XID events (``telemetry_xidevent``).
- 1h per GPU from the 5m rows (averages weighted by sample counts), so the 1-hour tier never reads raw data.
- Groups (rack, row, site) from the per-GPU rows of the same bucket, through ``Gpu``'s denormalised ids.

Incremental (:func:`rollup_tick`, beat every minute): a watermark per resolution (``RollupCursor``). A
5-minute bucket is rolled up once ``now - FLEET_TELEMETRY_ROLLUP_GRACE`` has passed its end, so samples up to
the grace late are in it; later ones stay in the raw table only. An hour is rolled up once all its 5-minute
buckets are. A tick catches up at most ``MAX_CATCH_UP`` per resolution.
"""

from __future__ import annotations

import datetime as dt

from django.db import connection, transaction

from telemetry import compact
from telemetry.dcgm import THROTTLE_HW_MASK
from telemetry.models import RollupCursor
from telemetry.partitions import ROLLUP_TABLES, partitions_ensure
from telemetry.store import get_store

FIVE_MIN = dt.timedelta(minutes=5)
HOUR = dt.timedelta(hours=1)
MAX_CATCH_UP = dt.timedelta(hours=2)
FIRST_RUN_BACK = dt.timedelta(hours=1)  # with no watermark yet, start this far back

GPU_COLUMNS = ("n_samples", "gpu_temp_min", "gpu_temp_avg", "gpu_temp_max", "mem_temp_max", "tlimit_min",
               "power_min", "power_avg", "power_max", "sm_clock_avg", "throttled_samples", "throttle_s",
               "d_ecc_sbe", "d_ecc_dbe", "d_remap_corr", "d_remap_unc", "d_pcie_replay", "hw_xid_count")
GROUP_COLUMNS = ("n_gpus", "gpu_temp_min", "gpu_temp_avg", "gpu_temp_max", "mem_temp_max", "tlimit_min",
                 "power_min", "power_avg", "power_max", "power_sum", "sm_clock_avg", "throttled_gpus",
                 "throttle_s", "hw_xid_count")
DELTAS = ("d_ecc_sbe", "d_ecc_dbe", "d_remap_corr", "d_remap_unc", "d_pcie_replay")
LEVELS = {"site": "site_id", "row": "row_id", "rack": "rack_id"}


def floor(value: dt.datetime, step: dt.timedelta) -> dt.datetime:
    """``value`` rounded down to a multiple of ``step`` since the Unix epoch (UTC)."""
    seconds = int(step.total_seconds())
    stamp = int(value.timestamp())
    return dt.datetime.fromtimestamp(stamp - stamp % seconds, tz=dt.UTC)


def _bucket(column: str, seconds: int) -> str:
    if connection.vendor == "postgresql":
        return f"date_bin('{seconds} seconds', {column}, TIMESTAMPTZ '2000-01-01 00:00:00+00')"
    return f"datetime((unixepoch({column}) / {seconds}) * {seconds}, 'unixepoch')"  # unixepoch(): SQLite >= 3.38


def _params(*values: dt.datetime) -> list:
    return [connection.ops.adapt_datetimefield_value(value) for value in values]


def upsert_sql(table: str, keys: tuple[str, ...], columns: tuple[str, ...], select: str) -> str:
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns)
    return (f"INSERT INTO {table} ({', '.join(keys + columns)}) {select} "
            f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {updates}")


def _sql_gpu_5m(expanded: bool = False) -> str:
    """``expanded``: the compacted samples of the range (``compact.expand``'s temporary table) are read beside
    the raw table."""
    bucket = _bucket("ts", 300)
    source = "telemetry_sample"
    if expanded:
        columns = "ts, gpu_id, gpu_temp_c, mem_temp_c, tlimit_c, power_w, sm_clock_mhz, throttle_mask"
        source = (f"(SELECT {columns} FROM telemetry_sample UNION ALL SELECT {columns} "
                  f"FROM {compact.EXPANDED}) s")
    samples = (
        f"SELECT gpu_id, {bucket} AS bucket, count(*) AS n, min(gpu_temp_c) AS tmin, avg(gpu_temp_c) AS tavg, "
        "max(gpu_temp_c) AS tmax, max(mem_temp_c) AS mmax, min(tlimit_c) AS lmin, min(power_w) AS pmin, "
        "avg(power_w) AS pavg, max(power_w) AS pmax, avg(sm_clock_mhz) AS clk, "
        f"sum(CASE WHEN (throttle_mask & {THROTTLE_HW_MASK}) <> 0 THEN 1 ELSE 0 END) AS thr "
        f"FROM {source} WHERE ts >= %s AND ts < %s GROUP BY 1, 2"
    )
    counters = (f"SELECT gpu_id, {bucket} AS bucket, " + ", ".join(f"sum({d}) AS {d}" for d in DELTAS)
                + " FROM telemetry_counter WHERE ts >= %s AND ts < %s GROUP BY 1, 2")
    xids = (f"SELECT gpu_id, {_bucket('at', 300)} AS bucket, count(*) AS nx FROM telemetry_xidevent "
            "WHERE at >= %s AND at < %s AND hardware GROUP BY 1, 2")
    select = (
        "SELECT gpu_id, bucket, COALESCE(r.n, 0), r.tmin, r.tavg, r.tmax, r.mmax, r.lmin, r.pmin, r.pavg, r.pmax, "
        "r.clk, COALESCE(r.thr, 0), COALESCE(r.thr * 300.0 / r.n, 0), "
        + ", ".join(f"COALESCE(c.{d}, 0)" for d in DELTAS) + ", COALESCE(x.nx, 0) "
        f"FROM ({samples}) r FULL JOIN ({counters}) c USING (gpu_id, bucket) "
        f"FULL JOIN ({xids}) x USING (gpu_id, bucket)"
    )
    return upsert_sql("telemetry_rollup5m", ("gpu_id", "bucket"), GPU_COLUMNS, select)


def _weighted(column: str) -> str:
    return (f"sum({column} * n_samples) / NULLIF(sum(CASE WHEN {column} IS NOT NULL THEN n_samples "
            "ELSE 0 END), 0)")


def _sql_gpu_1h() -> str:
    select = (
        f"SELECT gpu_id, {_bucket('bucket', 3600)}, sum(n_samples), min(gpu_temp_min), {_weighted('gpu_temp_avg')}, "
        f"max(gpu_temp_max), max(mem_temp_max), min(tlimit_min), min(power_min), {_weighted('power_avg')}, "
        f"max(power_max), {_weighted('sm_clock_avg')}, sum(throttled_samples), sum(throttle_s), "
        + ", ".join(f"sum({d})" for d in DELTAS) + ", sum(hw_xid_count) "
        "FROM telemetry_rollup5m WHERE bucket >= %s AND bucket < %s GROUP BY 1, 2"
    )
    return upsert_sql("telemetry_rollup1h", ("gpu_id", "bucket"), GPU_COLUMNS, select)


def _sql_group(source: str, target: str) -> str:
    parts = []
    for level, column in LEVELS.items():
        parts.append(
            f"SELECT '{level}', g.{column}, r.bucket, count(*), min(r.gpu_temp_min), avg(r.gpu_temp_avg), "
            "max(r.gpu_temp_max), max(r.mem_temp_max), min(r.tlimit_min), min(r.power_min), avg(r.power_avg), "
            "max(r.power_max), sum(r.power_avg), avg(r.sm_clock_avg), "
            "sum(CASE WHEN r.throttled_samples > 0 THEN 1 ELSE 0 END), sum(r.throttle_s), sum(r.hw_xid_count) "
            f"FROM {source} r JOIN inventory_gpu g ON g.id = r.gpu_id "
            f"WHERE r.bucket >= %s AND r.bucket < %s AND g.{column} IS NOT NULL GROUP BY g.{column}, r.bucket"
        )
    return upsert_sql(target, ("level", "group_id", "bucket"), GROUP_COLUMNS, " UNION ALL ".join(parts))


def _days(start: dt.datetime, end: dt.datetime) -> set[dt.date]:
    days, day = set(), start.astimezone(dt.UTC).date()
    while day <= (end - dt.timedelta(microseconds=1)).astimezone(dt.UTC).date():
        days.add(day)
        day += dt.timedelta(days=1)
    return days


def rollup_5m(*, start: dt.datetime, end: dt.datetime) -> int:
    """Roll up the 5-minute buckets in [start, end) per GPU and per group; returns the per-GPU rows written."""
    if start >= end:
        return 0
    partitions_ensure(tables=ROLLUP_TABLES, days=_days(start, end))
    with connection.cursor() as cursor:
        expanded = compact.expand(start, end)  # compacted days in the range: read beside the raw rows
        cursor.execute(_sql_gpu_5m(expanded), _params(start, end) * 3)
        written = cursor.rowcount
        cursor.execute(_sql_group("telemetry_rollup5m", "telemetry_rollupgroup5m"), _params(start, end) * 3)
    return written


def rollup_groups_1h(*, start: dt.datetime, end: dt.datetime) -> None:
    """The rack, row and site rows of the hours in [start, end) from the per-GPU hourly rows."""
    with connection.cursor() as cursor:
        cursor.execute(_sql_group("telemetry_rollup1h", "telemetry_rollupgroup1h"), _params(start, end) * 3)


def rollup_1h(*, start: dt.datetime, end: dt.datetime) -> int:
    """Roll up the hours in [start, end) from the 5-minute rows; returns the per-GPU rows written."""
    if start >= end:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(_sql_gpu_1h(), _params(start, end))
        written = cursor.rowcount
        cursor.execute(_sql_group("telemetry_rollup1h", "telemetry_rollupgroup1h"), _params(start, end) * 3)
    return written


def _advance(resolution: str, until: dt.datetime) -> None:
    cursor, created = RollupCursor.objects.select_for_update().get_or_create(
        resolution=resolution, defaults={"done_until": until})
    if not created and cursor.done_until < until:
        cursor.done_until = until
        cursor.save(update_fields=["done_until"])


@transaction.atomic
def rollup_range(*, start: dt.datetime, end: dt.datetime, advance: bool = True) -> dict[str, int]:
    """Roll up [start, end) at both resolutions (a backfill); ``advance`` moves the watermarks past ``end``."""
    start5, end5 = floor(start, FIVE_MIN), floor(end, FIVE_MIN)
    n5 = rollup_5m(start=start5, end=end5)
    start1, end1 = floor(start5, HOUR), floor(end5, HOUR)
    n1 = rollup_1h(start=start1, end=end1)
    if advance:
        _advance("5m", end5)
        _advance("1h", end1)
    return {"5m": n5, "1h": n1}


def rollup_tick(*, now: dt.datetime, grace: dt.timedelta) -> dict[str, int]:
    """Merge the ingest inbox (its own transaction: ingest waits for the merge, not for the rollup), then roll
    up every complete bucket after the watermarks (the beat task). Safe to run concurrently: the cursor rows
    are locked for the duration."""
    get_store().merge()
    return _rollup_tick(now=now, grace=grace)


@transaction.atomic
def _rollup_tick(*, now: dt.datetime, grace: dt.timedelta) -> dict[str, int]:
    end5 = floor(now - grace, FIVE_MIN)
    cursors = {c.resolution: c for c in RollupCursor.objects.select_for_update().filter(resolution__in=("5m", "1h"))}
    start5 = cursors["5m"].done_until if "5m" in cursors else end5 - FIRST_RUN_BACK
    end5 = min(end5, start5 + MAX_CATCH_UP)
    n5 = rollup_5m(start=start5, end=end5) if start5 < end5 else 0
    _advance("5m", max(end5, start5))
    end1 = floor(max(end5, start5), HOUR)
    start1 = cursors["1h"].done_until if "1h" in cursors else floor(start5, HOUR)
    end1 = min(end1, start1 + MAX_CATCH_UP)
    n1 = rollup_1h(start=start1, end=end1) if start1 < end1 else 0
    _advance("1h", max(end1, start1))
    return {"5m": n5, "1h": n1}
