"""Telemetry storage: partitions, the write path (all or nothing, counters, XID gauge), rollups, retention.

Tests marked ``sqlite`` run on the embedded SQLite store too; the rest need PostgreSQL (partitions, COPY).
"""

from __future__ import annotations

import datetime as dt
import random

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from telemetry import partitions
from telemetry.models import GpuLatest, Rollup1h, Rollup5m, RollupCursor, RollupGroup5m, XidEvent
from telemetry.rollup import rollup_range, rollup_tick
from telemetry.services import identity_cache_clear
from telemetry.store import SampleRow, WriteResult, get_store
from tests import factories

pytestmark = pytest.mark.django_db
postgres_only = pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL partitions")

T0 = dt.datetime(2026, 3, 2, 10, 0, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def _fresh_caches():
    identity_cache_clear()
    partitions.partitions_forget()
    yield
    partitions.partitions_forget()


def row(gpu_id: int, ts: dt.datetime, temp: int = 60, power: float = 400.0, mask: int = 0, clock: int = 1980,
        **counters) -> SampleRow:
    fields = {"ecc_sbe": None, "ecc_dbe": None, "remap_corr": None, "remap_unc": None, "remap_failure": None,
              "pcie_replay": None, "sram_threshold": None, "xid": None, **counters}
    return SampleRow(ts, gpu_id, power, mask, temp, temp + 5, 90 - temp, clock, **fields)


def write(rows: list[SampleRow]) -> WriteResult:
    """One batch through the store, then the merge (PostgreSQL): what a reader sees after the next merge."""
    with transaction.atomic():
        written = get_store().write_samples(rows)
    merged = get_store().merge()
    if connection.vendor != "postgresql":
        return written
    assert merged.samples == written.samples
    return WriteResult(merged.samples, merged.counter_rows, merged.xid_events)


def count(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table}")  # noqa: S608
        return cursor.fetchone()[0]


@pytest.fixture
def gpus():
    server = factories.server()
    return [factories.gpu(server) for _ in range(3)]


@pytest.mark.sqlite
def test_write_fills_raw_table_and_latest(gpus):
    result = write([row(g.pk, T0, temp=50 + i) for i, g in enumerate(gpus)])
    assert (result.samples, result.counter_rows, result.xid_events) == (3, 0, 0)
    assert count("telemetry_sample") == 3
    latest = GpuLatest.objects.get(gpu=gpus[2])
    assert (latest.ts, latest.gpu_temp_c, latest.mem_temp_c, latest.tlimit_c, latest.power_w) == (T0, 52, 57, 38, 400.0)
    write([row(gpus[2].pk, T0 + dt.timedelta(seconds=30), temp=70)])
    latest.refresh_from_db()
    assert (latest.ts, latest.gpu_temp_c) == (T0 + dt.timedelta(seconds=30), 70)
    write([row(gpus[2].pk, T0 - dt.timedelta(seconds=30), temp=40)])  # late: stored raw, latest unchanged
    latest.refresh_from_db()
    assert latest.gpu_temp_c == 70
    assert count("telemetry_sample") == 5


@postgres_only
def test_partition_created_on_demand(gpus):
    day = T0.date()
    assert partitions.partitions_list("telemetry_sample") == []
    write([row(gpus[0].pk, T0), row(gpus[0].pk, T0 + dt.timedelta(days=1))])
    names = [name for name, _ in partitions.partitions_list("telemetry_sample")]
    assert names == ["telemetry_sample_p20260302", "telemetry_sample_p20260303"]
    assert [name for name, _ in partitions.partitions_list("telemetry_counter")] == [
        "telemetry_counter_p20260302", "telemetry_counter_p20260303"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM telemetry_sample_p20260302")
        assert cursor.fetchone()[0] == 1
    assert partitions.partition_name("telemetry_sample", day) in names


@postgres_only
def test_maintain_creates_ahead_and_drops_expired_without_delete(gpus):
    today = T0.date()
    old = today - dt.timedelta(days=20)
    write([row(gpus[0].pk, dt.datetime.combine(old, dt.time(12), tzinfo=dt.UTC)), row(gpus[0].pk, T0)])
    rollup_range(start=dt.datetime.combine(old, dt.time(12), tzinfo=dt.UTC),
                 end=dt.datetime.combine(old, dt.time(13), tzinfo=dt.UTC))
    with CaptureQueriesContext(connection) as queries:
        done = partitions.partitions_maintain(today=today, ahead_days=3, raw_days=14, rollup_days=90)
    assert not [q for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("DELETE")]
    assert set(done["dropped"]) == {"telemetry_sample_p20260210", "telemetry_counter_p20260210"}
    days = [day for _, day in partitions.partitions_list("telemetry_sample")]
    assert days == [today + dt.timedelta(days=n) for n in range(4)]
    assert {"telemetry_rollup5m_p20260305", "telemetry_rollupgroup5m_p20260302"} <= set(done["created"])
    # The 5-minute rollups of that day are within their 90 days: kept.
    assert [day for _, day in partitions.partitions_list("telemetry_rollup5m")][0] == old
    assert count("telemetry_sample") == 1
    done = partitions.partitions_maintain(today=today + dt.timedelta(days=80), ahead_days=0, raw_days=14,
                                          rollup_days=60)
    assert "telemetry_rollup5m_p20260210" in done["dropped"]


@pytest.mark.sqlite
def test_sqlite_retention_deletes_old_rows(gpus):
    if connection.vendor == "postgresql":
        pytest.skip("SQLite retention")
    write([row(gpus[0].pk, T0 - dt.timedelta(days=20)), row(gpus[0].pk, T0)])
    partitions.partitions_maintain(today=T0.date(), ahead_days=3, raw_days=14, rollup_days=90)
    assert count("telemetry_sample") == 1


@postgres_only
def test_raw_sample_costs_at_most_70_bytes_on_disk(gpus):
    ids = [g.pk for g in gpus]
    rows = [row(ids[i % 3], T0 + dt.timedelta(seconds=i // 3), temp=40 + i % 50, power=300 + i % 97, mask=i % 3)
            for i in range(30000)]
    write(rows)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size('telemetry_sample_p20260302'), "
                       "pg_relation_size('telemetry_sample_p20260302')")
        total, heap = cursor.fetchone()
    assert heap / 30000 < 62  # 60 B: 24 header + 28 data + 4 line pointer, 136 rows per 8 kB page
    assert total / 30000 <= 70


@pytest.mark.sqlite
def test_batch_is_all_or_nothing(gpus, monkeypatch):
    from telemetry import store

    rows = [row(gpus[0].pk, T0), row(gpus[1].pk, T0, ecc_sbe=4, xid=79)]
    if connection.vendor == "postgresql":
        # The ingest write is one COPY into the inbox: a row that cannot be sent sends none of the batch.
        bad = row(gpus[2].pk, T0)._replace(gpu_temp_c="hot")
        with pytest.raises(Exception), transaction.atomic():  # noqa: B017,PT011 - psycopg's dump error
            get_store().write_samples([*rows, bad])
        assert count("telemetry_inbox") == 0
        # The merge is one transaction too: a failing step (here the latest values) merges nothing and
        # leaves the inbox whole for the next merge.
        steps = dict(store.MERGE_STEPS)
        steps["latest_update"] = "UPDATE telemetry_gpulatest SET no_such_column = 1"
        monkeypatch.setattr(store, "MERGE_STEPS", tuple(steps.items()))
    else:
        # The raw rows, the counter row and the XID event are written before the latest-value step fails.
        monkeypatch.setattr(store, "SQL_LATEST_UPDATE", "UPDATE telemetry_gpulatest SET no_such_column = %s")
    with pytest.raises(Exception):  # noqa: B017,PT011 - the database's own error, whichever backend
        write(rows)
    assert count("telemetry_sample") == 0
    assert count("telemetry_counter") == 0
    assert not GpuLatest.objects.exists()
    assert not XidEvent.objects.exists()
    if connection.vendor == "postgresql":
        assert count("telemetry_inbox") == 2
        monkeypatch.undo()
        merged = get_store().merge()
        assert (merged.samples, merged.counter_rows, merged.xid_events, merged.gpus) == (2, 1, 1, 2)
        assert count("telemetry_inbox") == 0
        assert get_store().merge().samples == 0  # idempotent: nothing left to merge


@postgres_only
def test_merge_drops_rows_of_gpus_deleted_since_ingest(gpus):
    with transaction.atomic():
        get_store().write_samples([row(gpus[0].pk, T0), row(gpus[2].pk + 1000, T0, xid=79)])  # no such GPU now
    merged = get_store().merge()
    assert (merged.samples, merged.deleted_gpus, merged.xid_events) == (1, 1, 0)
    assert list(GpuLatest.objects.values_list("gpu_id", flat=True)) == [gpus[0].pk]


# Counter and XID-gauge scenarios: (counters and xid per scrape, 30 s apart).
SCRAPES = [
    dict(ecc_sbe=5, ecc_dbe=0, pcie_replay=10, remap_failure=False, xid=0),  # baseline: a row, deltas 0
    dict(ecc_sbe=5, ecc_dbe=0, pcie_replay=10, remap_failure=False, xid=79),  # nothing changed; XID 79
    dict(ecc_sbe=8, ecc_dbe=0, pcie_replay=None, remap_failure=False, xid=79),  # +3; missing is no change; same XID
    dict(ecc_sbe=2, ecc_dbe=0, pcie_replay=10, remap_failure=True, xid=79),  # reset: delta 2; flag flipped
    dict(ecc_sbe=2, ecc_dbe=0, pcie_replay=12, remap_failure=True, xid=48),  # +2 replays; XID 48
    dict(ecc_sbe=2, ecc_dbe=0, pcie_replay=12, remap_failure=True, xid=0),
    dict(ecc_sbe=2, ecc_dbe=0, pcie_replay=12, remap_failure=True, xid=None),  # no XID reading: no change
    dict(ecc_sbe=3, ecc_dbe=0, pcie_replay=1, remap_failure=True, xid=48),  # +1; replays reset; 48 again
    dict(ecc_sbe=3, ecc_dbe=0, pcie_replay=1, remap_failure=True, xid=13),  # application XID
]
COUNTER_ROWS = [(5, 0, 10, 0, False), (8, 3, 10, 0, False), (2, 2, 10, 0, True), (2, 0, 12, 2, True),
                (3, 1, 1, 1, True)]
XIDS = [(79, True), (48, True), (48, True), (13, False)]


def _history(gpu_id: int) -> tuple[list, list, tuple]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT ecc_sbe, d_ecc_sbe, pcie_replay, d_pcie_replay, remap_failure FROM telemetry_counter "
                       "WHERE gpu_id = %s ORDER BY ts", [gpu_id])
        counters = [tuple(r[:4]) + (bool(r[4]),) for r in cursor.fetchall()]
    xids = list(XidEvent.objects.filter(gpu_id=gpu_id).order_by("at").values_list("xid", "hardware"))
    latest = GpuLatest.objects.filter(gpu_id=gpu_id).values_list(
        "ts", "gpu_temp_c", "ecc_sbe", "pcie_replay", "remap_failure", "last_xid", "last_xid_at").get()
    return counters, xids, latest


@pytest.mark.sqlite
@pytest.mark.parametrize("merges", ["after each scrape", "one for all", "every third scrape", "scrapes in one batch"])
def test_counters_xid_gauge_and_latest_whatever_the_merges(gpus, merges):
    """Counter deltas (with resets), flags and the XID gauge come out the same whether every scrape is merged
    on its own, several scrapes are merged at once, or come in one batch: deltas and changes are against the
    GPU's previous row in the merge, the first against the latest values."""
    gpu = gpus[0].pk
    rows = [row(gpu, T0 + dt.timedelta(seconds=30 * i), temp=50 + i, **c) for i, c in enumerate(SCRAPES)]
    rows.append(row(gpus[1].pk, T0, ecc_sbe=1))  # another GPU in the same merges
    if merges == "scrapes in one batch":
        write(rows[::-1])
    else:
        every = {"after each scrape": 1, "one for all": len(rows), "every third scrape": 3}[merges]
        for i, sample in enumerate(rows):
            with transaction.atomic():
                get_store().write_samples([sample])
            if (i + 1) % every == 0:
                get_store().merge()
        get_store().merge()
    counters, xids, latest = _history(gpu)
    assert counters == COUNTER_ROWS
    assert xids == XIDS
    last = T0 + dt.timedelta(seconds=30 * 8)
    assert latest == (last, 58, 3, 1, True, 13, last)
    assert count("telemetry_sample") == len(rows)
    # A late row (older than the latest) is stored raw and leaves the latest values alone.
    write([row(gpu, T0 - dt.timedelta(seconds=30), temp=20, ecc_sbe=3, pcie_replay=1, remap_failure=True, xid=13)])
    assert _history(gpu)[2] == latest


@pytest.mark.sqlite
def test_xid_gauge_across_merges_compares_with_the_latest_value(gpus):
    gpu = gpus[0].pk
    assert write([row(gpu, T0, xid=79)]).xid_events == 1
    assert write([row(gpu, T0 + dt.timedelta(seconds=30), xid=79),
                  row(gpu, T0 + dt.timedelta(seconds=60), xid=79)]).xid_events == 0  # same gauge, next merge
    assert write([row(gpu, T0 + dt.timedelta(seconds=90), xid=0),
                  row(gpu, T0 + dt.timedelta(seconds=120), xid=79)]).xid_events == 1


@pytest.mark.sqlite
def test_counter_rows_only_on_change_with_deltas_and_reset(gpus):
    gpu = gpus[0].pk
    steps = [dict(ecc_sbe=5, ecc_dbe=0, pcie_replay=10, remap_failure=False),  # baseline: a row, deltas 0
             dict(ecc_sbe=5, ecc_dbe=0, pcie_replay=10, remap_failure=False),  # nothing changed: no row
             dict(ecc_sbe=8, ecc_dbe=0, pcie_replay=None, remap_failure=False),  # +3; a missing counter is no change
             dict(ecc_sbe=2, ecc_dbe=0, pcie_replay=10, remap_failure=True)]  # reset (2 < 8): delta 2; flag flipped
    written = [write([row(gpu, T0 + dt.timedelta(seconds=30 * i), **c)]).counter_rows for i, c in enumerate(steps)]
    assert written == [1, 0, 1, 1]
    with connection.cursor() as cursor:
        cursor.execute("SELECT ecc_sbe, d_ecc_sbe, pcie_replay, d_pcie_replay, remap_failure FROM telemetry_counter "
                       "ORDER BY ts")
        rows = [tuple(r[:4]) + (bool(r[4]),) for r in cursor.fetchall()]
    assert rows == [(5, 0, 10, 0, False), (8, 3, 10, 0, False), (2, 2, 10, 0, True)]
    latest = GpuLatest.objects.get(gpu_id=gpu)
    assert (latest.ecc_sbe, latest.pcie_replay, latest.remap_failure) == (2, 10, True)


@pytest.mark.sqlite
def test_xid_gauge_is_an_event_when_it_changes(gpus):
    gpu = gpus[0].pk
    gauge = [0, 79, 79, 79, 48, 0, 0, 48, 13]
    events = [write([row(gpu, T0 + dt.timedelta(seconds=30 * i), xid=x)]).xid_events for i, x in enumerate(gauge)]
    assert events == [0, 1, 0, 0, 1, 0, 0, 1, 1]
    assert list(XidEvent.objects.order_by("at").values_list("xid", "hardware", "source")) == [
        (79, True, "dcgm"), (48, True, "dcgm"), (48, True, "dcgm"), (13, False, "dcgm")]
    latest = GpuLatest.objects.get(gpu_id=gpu)
    assert (latest.last_xid, latest.last_xid_at) == (13, T0 + dt.timedelta(seconds=240))


@pytest.mark.sqlite
def test_several_samples_of_one_gpu_in_one_batch_are_applied_in_time_order(gpus):
    gpu = gpus[0].pk
    rows = [row(gpu, T0 + dt.timedelta(seconds=60), ecc_sbe=9, xid=79),
            row(gpu, T0, ecc_sbe=4, xid=79),
            row(gpu, T0 + dt.timedelta(seconds=30), ecc_sbe=4, xid=0)]
    result = write(rows)
    assert (result.samples, result.counter_rows, result.xid_events) == (3, 2, 2)
    assert GpuLatest.objects.get(gpu_id=gpu).ecc_sbe == 9


# --- rollups ----------------------------------------------------------------------------------------------------

def _bucket_sql(column: str) -> str:
    if connection.vendor == "postgresql":
        return f"to_timestamp(floor(extract(epoch FROM {column}) / 300) * 300)"
    return f"datetime((unixepoch({column}) / 300) * 300, 'unixepoch')"


@pytest.fixture
def history(gpus):
    """10 minutes of samples every 20 s for 3 GPUs, random values; a counter change and a hardware XID."""
    rng = random.Random(3)
    rows = []
    for i in range(30):
        ts = T0 + dt.timedelta(seconds=20 * i)
        rows.extend(row(g.pk, ts, temp=rng.randint(30, 90), power=round(rng.uniform(100, 700), 1),
                        mask=rng.choice([0, 0, 0x4, 0x40, 0x1]), clock=rng.randint(900, 1980),
                        ecc_sbe=i // 10, xid=79 if i >= 20 and g == gpus[0] else 0) for g in gpus)
    write(rows)
    return rows


@pytest.mark.sqlite
def test_rollup_5m_matches_a_direct_aggregate_of_the_raw_rows(gpus, history):
    rollup_range(start=T0, end=T0 + dt.timedelta(minutes=10))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT gpu_id, {_bucket_sql('ts')} AS b, count(*), min(gpu_temp_c), avg(gpu_temp_c), max(gpu_temp_c), "
            "max(mem_temp_c), min(tlimit_c), min(power_w), avg(power_w), max(power_w), avg(sm_clock_mhz), "
            "sum(CASE WHEN (throttle_mask & 236) <> 0 THEN 1 ELSE 0 END) "
            "FROM telemetry_sample GROUP BY gpu_id, b ORDER BY gpu_id, b")
        expected = cursor.fetchall()
    got = list(Rollup5m.objects.order_by("gpu_id", "bucket").values_list(
        "gpu_id", "n_samples", "gpu_temp_min", "gpu_temp_avg", "gpu_temp_max", "mem_temp_max", "tlimit_min",
        "power_min", "power_avg", "power_max", "sm_clock_avg", "throttled_samples", "throttle_s"))
    assert len(got) == len(expected) == 6
    for g, e in zip(got, expected, strict=True):
        assert g[0] == e[0] and g[1] == e[2]
        assert g[2:11] == pytest.approx([float(v) for v in e[3:12]], rel=1e-5)
        assert g[11] == e[12]
        assert g[12] == pytest.approx(e[12] * 300 / e[2], rel=1e-5)
    # Counters: ecc_sbe 0 -> 1 -> 2 at samples 10 (200 s) and 20 (400 s): one delta in each bucket.
    deltas = dict(Rollup5m.objects.filter(gpu=gpus[1]).values_list("bucket", "d_ecc_sbe"))
    assert deltas == {T0: 1, T0 + dt.timedelta(minutes=5): 1}
    xids = dict(Rollup5m.objects.filter(gpu=gpus[0]).values_list("bucket", "hw_xid_count"))
    assert xids == {T0: 0, T0 + dt.timedelta(minutes=5): 1}


@pytest.mark.sqlite
def test_rollup_1h_and_groups(gpus, history):
    rollup_range(start=T0, end=T0 + dt.timedelta(hours=1))
    hour = Rollup1h.objects.get(gpu=gpus[0], bucket=T0)
    temps = [r.gpu_temp_c for r in history if r.gpu_id == gpus[0].pk]
    assert hour.n_samples == 30
    assert hour.gpu_temp_avg == pytest.approx(sum(temps) / 30)
    assert (hour.gpu_temp_min, hour.gpu_temp_max) == (min(temps), max(temps))
    rack = RollupGroup5m.objects.get(level="rack", group_id=gpus[0].rack_id, bucket=T0)
    per_gpu = Rollup5m.objects.filter(bucket=T0)
    assert rack.n_gpus == 3
    assert rack.gpu_temp_max == max(r.gpu_temp_max for r in per_gpu)
    assert rack.power_sum == pytest.approx(sum(r.power_avg for r in per_gpu), rel=1e-5)
    assert RollupGroup5m.objects.filter(level="site", group_id=gpus[0].site_id).count() == 2


@pytest.mark.sqlite
def test_rollup_tick_is_incremental_and_keeps_late_data_within_the_grace(gpus):
    grace = dt.timedelta(minutes=2)
    RollupCursor.objects.create(resolution="5m", done_until=T0)
    RollupCursor.objects.create(resolution="1h", done_until=T0)
    write([row(gpus[0].pk, T0 + dt.timedelta(minutes=1), temp=50)])
    end = T0 + dt.timedelta(minutes=5)
    assert rollup_tick(now=end + dt.timedelta(minutes=1), grace=grace)["5m"] == 0  # within the grace: waits
    write([row(gpus[0].pk, end - dt.timedelta(seconds=1), temp=70)])  # late, but within the grace
    assert rollup_tick(now=end + grace, grace=grace)["5m"] == 1
    assert rollup_tick(now=end + grace, grace=grace) == {"5m": 0, "1h": 0}  # re-run: nothing to do
    rollup = Rollup5m.objects.get(gpu=gpus[0], bucket=T0)
    assert (rollup.n_samples, rollup.gpu_temp_max) == (2, 70)
    assert RollupCursor.objects.get(resolution="5m").done_until == end
    # An hour is rolled up once all of its 5-minute buckets are.
    result = rollup_tick(now=T0 + dt.timedelta(hours=1, minutes=3), grace=grace)
    assert result["1h"] == 1
    assert Rollup1h.objects.get(gpu=gpus[0], bucket=T0).n_samples == 2


# --- inbox and merge under concurrency (real commits, two connections) -------------------------------------------

@postgres_only
@pytest.mark.django_db(transaction=True)
def test_merge_runs_safely_alongside_ingest_and_itself():
    """One thread writes 40 batches into the inbox while two others merge in a loop: every sample lands in the
    raw table exactly once, and the XID gauge (changing every 10th batch) gives exactly one event per change."""
    import threading

    from django.db import connections

    server = factories.server()
    gpus = [factories.gpu(server).pk for _ in range(4)]
    batches = 40
    done = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for b in range(batches):
                with transaction.atomic():
                    get_store().write_samples([row(g, T0 + dt.timedelta(seconds=15 * b), xid=70 + b // 10)
                                               for g in gpus])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            done.set()
            connections.close_all()

    def merger() -> None:
        try:
            while not done.is_set():
                get_store().merge()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer), threading.Thread(target=merger), threading.Thread(target=merger)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    get_store().merge()
    assert count("telemetry_inbox") == 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*), count(DISTINCT (gpu_id, ts)) FROM telemetry_sample")
        assert cursor.fetchone() == (batches * len(gpus), batches * len(gpus))
    assert XidEvent.objects.count() == 4 * len(gpus)  # 70, 71, 72, 73 per GPU
    assert set(GpuLatest.objects.values_list("ts", "last_xid")) == {(T0 + dt.timedelta(seconds=15 * 39), 73)}
