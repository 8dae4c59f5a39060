"""Compact history (telemetry.compact): one row per GPU and day, read by charts and rollups like raw rows.

Expected values are computed here from the samples the test wrote (not read back from the code under test).
"""

from __future__ import annotations

import datetime as dt
import random
import statistics
import struct

import numpy as np
import pytest
from django.db import connection, transaction

from telemetry import compact, partitions
from telemetry.models import Rollup5m, SampleDay
from telemetry.rollup import rollup_range
from telemetry.selectors import history
from telemetry.services import identity_cache_clear
from telemetry.store import SampleRow, get_store
from tests import factories

pytestmark = pytest.mark.django_db

DAY = dt.date(2026, 3, 2)
T0 = dt.datetime(2026, 3, 2, 0, 0, 7, 250_000, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def _fresh_caches():
    identity_cache_clear()
    partitions.partitions_forget()
    yield
    partitions.partitions_forget()


def samples(gpu_id: int, *, n: int = 2880, seed: int = 1) -> list[SampleRow]:
    """A day of 30 s samples (with a little jitter and a gap), noisy power, a few nulls and a throttled stretch."""
    rng = random.Random(seed)
    rows = []
    for k in range(n):
        if 1000 <= k < 1010:  # a gap: the exporter was down
            continue
        ts = T0 + dt.timedelta(seconds=30 * k, milliseconds=rng.choice((0, 0, 0, 3, -2)))
        temp = 55 + rng.randint(-2, 2)
        rows.append(SampleRow(ts, gpu_id, round(380 + rng.uniform(-25, 25), 1), 0x40 if 2000 <= k < 2030 else 0,
                              temp, None if k % 97 == 0 else temp + 6, 88 - temp, 1980, None, None, None, None, None,
                              None, None, None))
    return rows


def write(rows: list[SampleRow]) -> None:
    with transaction.atomic():
        get_store().write_samples(rows)
    get_store().merge()


def raw_count() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM telemetry_sample")
        return cursor.fetchone()[0]


def test_codec_round_trip_keeps_quantised_values_nulls_and_milliseconds():
    rng = np.random.default_rng(3)
    ts = (np.arange(2880, dtype=np.int64) * 30_000 + 1_772_409_600_000 + rng.integers(-3, 4, 2880))
    cols = {name: rng.integers(0, 100, 2880).astype(np.int64) for name in compact.COLUMNS}
    cols["mem_temp_c"][::50] = compact.NULL
    cols["power_w"] = rng.integers(3500, 4000, 2880).astype(np.int64)  # deci-watts
    blob = compact.encode(ts, cols)
    assert blob[0] == compact.VERSION
    back_ts, back = compact.decode(blob)
    assert back_ts.tolist() == ts.tolist()
    assert np.isnan(back["mem_temp_c"][::50]).all() and not np.isnan(back["mem_temp_c"][1::50]).any()
    assert back["gpu_temp_c"].tolist() == cols["gpu_temp_c"].astype(float).tolist()
    assert np.allclose(back["power_w"], cols["power_w"] / 10)


def test_a_blob_of_an_unknown_codec_version_is_refused():
    blob = compact.encode(np.array([0], dtype=np.int64), {name: np.array([1]) for name in compact.COLUMNS})
    with pytest.raises(compact.CodecError, match="version 9"):
        compact.decode(struct.pack("<B", 9) + blob[1:])


@pytest.mark.sqlite
def test_a_compacted_day_reads_like_raw_in_charts_and_rollups():
    gpus = [factories.gpu(factories.server(hostname=f"c-{n}")) for n in range(2)]
    written = {gpu.pk: samples(gpu.pk, seed=gpu.pk) for gpu in gpus}
    for gpu in gpus:
        write(written[gpu.pk])
    start, end = T0.replace(hour=9), T0.replace(hour=12)

    before = Rollup5m.objects.count()
    result = compact.compact_day(DAY)
    assert result.gpu_days == 2 and result.samples == sum(len(r) for r in written.values())
    assert raw_count() == 0 and SampleDay.objects.filter(day=DAY).count() == 2

    # Raw chart (3 h): every sample written in the window, at its millisecond, power to 0.1 W.
    gpu = gpus[0]
    points = history(scope="gpu", scope_id=gpu.pk, metric="power", start=start, end=end)
    expected = [(r.ts, r.power_w) for r in written[gpu.pk] if start <= r.ts < end]
    assert [t for t, _, _, _ in points] == [t for t, _ in expected]
    assert [v for _, v, _, _ in points] == pytest.approx([v for _, v in expected], abs=1e-4)
    mem = history(scope="gpu", scope_id=gpu.pk, metric="mem_temp", start=start, end=end)
    assert [v for _, v, _, _ in mem] == [r.mem_temp_c for r in written[gpu.pk] if start <= r.ts < end]
    throttle = history(scope="gpu", scope_id=gpu.pk, metric="throttle", start=T0, end=T0 + dt.timedelta(hours=6))
    assert sum(v for _, v, _, _ in throttle) == sum(1 for r in written[gpu.pk] if r.throttle_mask and
                                                     r.ts < T0 + dt.timedelta(hours=6))

    # Rollups re-rolled from the compacted day: the 5-minute figures of what was written.
    rollup_range(start=T0.replace(hour=0, second=0, microsecond=0), end=T0.replace(hour=0) + dt.timedelta(days=1))
    assert Rollup5m.objects.count() > before
    bucket = dt.datetime(2026, 3, 2, 10, 0, tzinfo=dt.UTC)
    in_bucket = [r for r in written[gpu.pk] if bucket <= r.ts < bucket + dt.timedelta(minutes=5)]
    got = Rollup5m.objects.get(gpu_id=gpu.pk, bucket=bucket)
    assert got.n_samples == len(in_bucket)
    assert got.power_avg == pytest.approx(statistics.fmean(r.power_w for r in in_bucket), abs=1e-3)
    assert got.gpu_temp_max == max(r.gpu_temp_c for r in in_bucket)


@pytest.mark.sqlite
def test_late_rows_of_a_compacted_day_join_its_blob_and_compaction_is_idempotent():
    gpu = factories.gpu(factories.server(hostname="late-1"))
    rows = samples(gpu.pk, n=200)
    write(rows[:150])
    compact.compact_day(DAY)
    assert compact.compact_day(DAY).gpu_days == 0  # nothing raw left: nothing to do
    write(rows[150:])  # late data for the compacted day
    compact.compact_day(DAY)
    row = SampleDay.objects.get(gpu_id=gpu.pk, day=DAY)
    ts, _ = compact.decode(row.data)
    assert row.n == len(rows) and ts.tolist() == sorted(round(r.ts.timestamp() * 1000) for r in rows)


def test_compact_due_takes_only_days_older_than_the_setting(settings):
    gpu = factories.gpu(factories.server(hostname="due-1"))
    now = dt.datetime(2026, 3, 5, 12, 0, tzinfo=dt.UTC)
    write([SampleRow(now - dt.timedelta(days=d), gpu.pk, 300.0, 0, 50, 55, 30, 1980, None, None, None, None, None,
                     None, None, None) for d in range(5)])
    done = compact.compact_due(now=now, after_days=2)
    assert done.days == [dt.date(2026, 3, 1), dt.date(2026, 3, 2)]
    assert raw_count() == 3


def three_days(gpu_id: int) -> list[SampleRow]:
    """2026-03-01..03 at 30 s: temperatures drifting by the hour, noisy power in 0.1 W, nulls, a gap, a throttled
    stretch (0x40; 0x1 every 7th sample is not a hardware reason), three ECC DBEs and two hardware XIDs."""
    rng = random.Random(11)
    first = dt.datetime(2026, 3, 1, 0, 0, 4, tzinfo=dt.UTC)
    rows, ecc = [], 0
    for k in range(3 * 2880):
        if 3000 <= k < 3020:
            continue
        ecc += k in (700, 4000, 7000)
        temp = 50 + (k // 120) % 15 + rng.randint(-1, 1)
        rows.append(SampleRow(first + dt.timedelta(seconds=30 * k, milliseconds=rng.choice((0, 0, 2, -3))), gpu_id,
                              round(300 + rng.uniform(-20, 20), 1), 0x40 if 5000 <= k < 5040 else int(k % 7 == 0),
                              temp, None if k % 89 == 0 else temp + 5, 85 - temp, 1830 if k % 50 == 0 else 1980, 0,
                              ecc, 0, 0, False, 0, False, 79 if 1500 <= k < 1504 else 48 if 6000 <= k < 6002 else 0))
    return rows


@pytest.mark.sqlite
def test_the_1_year_chart_over_compacted_and_raw_history_is_what_was_written(client, users):
    """Two compacted days and a raw one, rolled up: every metric of the 1-year chart (the 1-hour tier), the 5-minute
    chart and the raw chart across the compacted/raw boundary, and the history API's body, against figures
    computed here from the samples written."""
    gpu = factories.gpu(factories.server(hostname="year-1"))
    written = three_days(gpu.pk)
    write(written)
    compact.compact_day(dt.date(2026, 3, 1))
    compact.compact_day(dt.date(2026, 3, 2))
    assert SampleDay.objects.filter(gpu_id=gpu.pk).count() == 2 and raw_count() == 2880
    begin, end = dt.datetime(2026, 3, 1, tzinfo=dt.UTC), dt.datetime(2026, 3, 4, tzinfo=dt.UTC)
    rollup_range(start=begin, end=end)

    def buckets(seconds: int, start: dt.datetime, stop: dt.datetime) -> dict[dt.datetime, list[SampleRow]]:
        out: dict[dt.datetime, list[SampleRow]] = {}
        for r in written:
            if start <= r.ts < stop:
                at = dt.datetime.fromtimestamp(int(r.ts.timestamp()) // seconds * seconds, tz=dt.UTC)
                out.setdefault(at, []).append(r)
        return out

    hw = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
    xids = {written[k].ts for k in range(1, len(written)) if written[k].xid and written[k].xid != written[k - 1].xid}
    dbes = {written[k].ts for k in range(1, len(written)) if written[k].ecc_dbe > written[k - 1].ecc_dbe}
    assert len(xids) == 2 and len(dbes) == 3

    def want(metric: str, rows: list[SampleRow]) -> tuple:
        temps, power = [r.gpu_temp_c for r in rows], [r.power_w for r in rows]
        return {
            "gpu_temp": (min(temps), statistics.fmean(temps), max(temps)),
            "mem_temp": (None, None, max(r.mem_temp_c for r in rows if r.mem_temp_c is not None)),
            "power": (min(power), statistics.fmean(power), max(power)),
            "sm_clock": (None, statistics.fmean(r.sm_clock_mhz for r in rows), None),
            "tlimit": (min(r.tlimit_c for r in rows), None, None),
            "throttle": (None, sum(1 for r in rows if r.throttle_mask & hw) / len(rows), None),
            "xid": (None, sum(1 for r in rows if r.ts in xids), None),
            "ecc_dbe": (None, sum(1 for r in rows if r.ts in dbes), None),
        }[metric]

    year = end - dt.timedelta(days=365)
    hours = buckets(3600, begin, end)
    assert len(hours) == 72
    for metric in ("gpu_temp", "mem_temp", "power", "sm_clock", "tlimit", "throttle", "xid", "ecc_dbe"):
        points = history(scope="gpu", scope_id=gpu.pk, metric=metric, start=year, end=end)
        assert [t for t, *_ in points] == sorted(hours), metric
        for t, *got in points:
            assert got == [pytest.approx(v, abs=1e-3) if v is not None else None for v in want(metric, hours[t])], \
                (metric, t)

    start, stop = dt.datetime(2026, 3, 2, 22, tzinfo=dt.UTC), dt.datetime(2026, 3, 3, 2, tzinfo=dt.UTC)
    five = buckets(300, start, stop)
    points = history(scope="gpu", scope_id=gpu.pk, metric="power", start=start, end=stop, resolution="5m")
    assert [t for t, *_ in points] == sorted(five) and len(five) == 48
    assert [tuple(p[1:]) for p in points] == [pytest.approx(want("power", five[t]), abs=1e-3) for t in sorted(five)]
    raw = history(scope="gpu", scope_id=gpu.pk, metric="gpu_temp", start=start, end=stop)  # 4 h: the raw tier
    assert [(t, v) for t, v, _, _ in raw] == [(r.ts, r.gpu_temp_c) for r in written if start <= r.ts < stop]

    client.force_login(users["viewer"])
    body = client.get("/api/v1/telemetry/history/", {"scope": "gpu", "id": gpu.pk, "metric": "gpu_temp",
                                                     "start": year.isoformat(), "end": end.isoformat()}).json()
    assert body["resolution"] == "1h"
    assert [p["t"] for p in body["points"]] == [t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in sorted(hours)]
    assert [(p["min"], p["max"]) for p in body["points"]] == [(want("gpu_temp", hours[t])[0],
                                                               want("gpu_temp", hours[t])[2]) for t in sorted(hours)]
