"""With ``FLEET_TELEMETRY_BACKEND=prometheus``: what Fleet keeps for a GPU's life, pulled from the store by beat.

:func:`pull_tick` (every minute, instead of the embedded store's merge and rollup):

- ``telemetry_gpulatest`` from instant queries (the "current" columns, health's latest-value criteria:
  row-remap failure, counters);
- ``XidEvent`` for every change of the exporter's XID gauge to a non-zero value since the last pull
  (idempotent: a pulled event's ``line_key`` is a hash of GPU, time and XID, so a window read twice adds nothing);
- ``telemetry_rollup1h`` (and its rack/row/site rows) for every complete hour after the ``1h`` watermark, one
  instant query per column over the whole fleet (``increase()`` for counters; throttled samples from the
  clock-event-reason bitmask), so health's error-rate and thermal rules and the 1-year charts read Fleet's own
  rows. Re-pulling an hour rewrites the same rows (``ON CONFLICT DO UPDATE``).

Throttle episodes are kept as the hourly ``throttled_samples`` / ``throttle_s``; row-remap failures as the
latest flag (health raises the RMA flag from it, which stays for the GPU's life).
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import connection, transaction

from telemetry import promql
from telemetry.models import RollupCursor, XidEvent, xid_is_hardware
from telemetry.rollup import GPU_COLUMNS, HOUR, MAX_CATCH_UP, floor, rollup_groups_1h, upsert_sql
from telemetry.selectors import uuid_ids

_LATEST = {"gpu_temp_c": "gpu_temp", "mem_temp_c": "mem_temp", "tlimit_c": "tlimit", "power_w": "power",
           "sm_clock_mhz": "sm_clock", "throttle_mask": "throttle", "ecc_sbe": "ecc_sbe", "ecc_dbe": "ecc_dbe",
           "remap_corr": "remap_corr", "remap_unc": "remap_unc", "remap_failure": "remap_failure",
           "pcie_replay": "pcie_replay", "last_xid": "xid"}
_INTS = {"gpu_temp_c", "mem_temp_c", "tlimit_c", "sm_clock_mhz", "throttle_mask", "ecc_sbe", "ecc_dbe", "remap_corr",
         "remap_unc", "pcie_replay", "last_xid"}


def pull_latest(*, now: dt.datetime) -> int:
    """Every GPU's latest values into ``telemetry_gpulatest``; returns the GPUs written."""
    label = promql.labels()["uuid"]
    per_gpu: dict[str, dict] = {}
    for column, metric in _LATEST.items():
        expr = f'{promql.METRIC[metric]}{{{label}!=""}}'
        for item in promql.query(expr, now):
            uuid = promql.uuid_key(item["metric"].get(label, ""))
            value = float(item["value"][1])
            if value != value:  # NaN
                continue
            if column in _INTS:
                value = int(value)
            elif column == "remap_failure":
                value = bool(value)
            per_gpu.setdefault(uuid, {})[column] = value
    ids = uuid_ids(list(per_gpu))
    columns = list(_LATEST)
    rows = [(ids[uuid], now, *(values.get(c) for c in columns)) for uuid, values in per_gpu.items() if uuid in ids]
    # One upsert for the fleet (100,000 rows a minute: no per-row ORM call). A counter missing from the answer
    # keeps its last value; gauges are the store's latest.
    keep = {"ecc_sbe", "ecc_dbe", "remap_corr", "remap_unc", "pcie_replay", "remap_failure", "last_xid"}
    updates = ", ".join(f"{c} = COALESCE(EXCLUDED.{c}, telemetry_gpulatest.{c})" if c in keep else f"{c} = EXCLUDED.{c}"
                        for c in ["ts", *columns])
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO telemetry_gpulatest (gpu_id, ts, {', '.join(columns)}) "  # noqa: S608
            f"VALUES ({', '.join(['%s'] * (2 + len(columns)))}) ON CONFLICT (gpu_id) DO UPDATE SET {updates}", rows)
    return len(rows)


def pull_xids(*, start: dt.datetime, end: dt.datetime) -> int:
    """XID gauge changes in [start, end) into ``XidEvent``; returns the events added."""
    step = int(getattr(settings, "FLEET_PROMETHEUS_SCRAPE_S", 30))
    changes = promql.xid_changes(start=start, end=end, step=step)
    ids = uuid_ids(sorted({uuid for uuid, _, _ in changes}))
    events = [XidEvent(gpu_id=ids[uuid], at=at, xid=xid, hardware=xid_is_hardware(xid), source="dcgm",
                       line_key=promql.xid_key(ids[uuid], at, xid)) for uuid, at, xid in changes if uuid in ids]
    before = XidEvent.objects.count()
    XidEvent.objects.bulk_create(events, ignore_conflicts=True)
    return XidEvent.objects.count() - before


def pull_hour(hour: dt.datetime) -> int:
    """The hourly rollup rows of [hour, hour + 1 h) per GPU from the store, then per rack, row and site."""
    columns = promql.hour_aggregates(hour + HOUR)
    uuids = sorted(set().union(*(set(values) for values in columns.values())))
    ids = uuid_ids(uuids)
    rows = []
    for uuid in uuids:
        if uuid not in ids:
            continue
        n = int(columns["n_samples"].get(uuid, 0))
        values = {c: columns[c].get(uuid) for c in GPU_COLUMNS if c in columns}
        thr = int(values.get("throttled_samples") or 0)
        values.update(n_samples=n, throttled_samples=thr, throttle_s=thr * 3600.0 / n if n else 0.0)
        for c in ("d_ecc_sbe", "d_ecc_dbe", "d_remap_corr", "d_remap_unc", "d_pcie_replay"):
            values[c] = round(values.get(c) or 0)
        rows.append([ids[uuid], hour, *(values.get(c, 0) if c != "hw_xid_count" else 0 for c in GPU_COLUMNS)])
    # Hardware XIDs of the hour: from Fleet's own XidEvent table (pulled first).
    placeholders = ", ".join(["%s"] * (2 + len(GPU_COLUMNS)))
    with connection.cursor() as cursor:
        if rows:
            cursor.executemany(upsert_sql("telemetry_rollup1h", ("gpu_id", "bucket"), GPU_COLUMNS,
                                          f"VALUES ({placeholders})"), rows)
        cursor.execute("UPDATE telemetry_rollup1h SET hw_xid_count = (SELECT count(*) FROM telemetry_xidevent x "
                       "WHERE x.gpu_id = telemetry_rollup1h.gpu_id AND x.hardware AND x.at >= %s AND x.at < %s) "
                       "WHERE bucket = %s", [hour, hour + HOUR, hour])
    rollup_groups_1h(start=hour, end=hour + HOUR)
    return len(rows)


def pull_tick(*, now: dt.datetime) -> dict[str, int]:
    """The beat task with the prometheus backend: latest values, XIDs since the watermark, complete hours."""
    out = {"latest": pull_latest(now=now), "xids": 0, "hours": 0}
    with transaction.atomic():
        cursors = {c.resolution: c for c in RollupCursor.objects.select_for_update()
                   .filter(resolution__in=("prom-xid", "1h"))}
        xid_from = cursors["prom-xid"].done_until if "prom-xid" in cursors else now - HOUR
        xid_to = min(now, xid_from + MAX_CATCH_UP)
        out["xids"] = pull_xids(start=xid_from, end=xid_to)
        RollupCursor.objects.update_or_create(resolution="prom-xid", defaults={"done_until": xid_to})
        hour = cursors["1h"].done_until if "1h" in cursors else floor(now, HOUR) - HOUR
        while hour + HOUR <= min(floor(now, HOUR), xid_to):
            pull_hour(hour)
            hour += HOUR
            out["hours"] += 1
        RollupCursor.objects.update_or_create(resolution="1h", defaults={"done_until": hour})
    return out
