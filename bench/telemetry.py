#!/usr/bin/env python
"""Telemetry benchmark over a 100,000-GPU demo fleet on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/fleet_bench_tel .venv/bin/python bench/telemetry.py

Runs against a DEDICATED database that it drops and re-creates (``fleet_bench_tel`` unless DATABASE_URL names a
database containing "bench"). Seeds ``--gpus`` GPUs (seed_demo), generates dcgm-exporter text PER NODE (one exporter
per node, as dcgm-exporter runs: 8 GPUs and ~47 kB per body, 12,500 bodies for 100,000 GPUs; default counter set,
``telemetry.synth``) with one scrape source per node, and measures in one run:

- ingest: the full path for one scrape of the fleet, ``telemetry_ingest_many`` over groups of ``--group`` bodies
  (what one scrape task does after its fetches: parse + map identities + ONE inbox COPY + the per-source
  status), samples/s;
- write: the write stage alone given the parsed, mapped rows (the inbox COPY, one transaction per group, as
  ingest does), samples/s, next to a raw binary COPY of the same rows' 8 raw columns into an empty unindexed
  table with the raw table's columns (also one transaction per group), and their ratio;
- merge: the deferred work, measured and printed (not hidden): one merge of one scrape of every GPU from the
  inbox into the raw, counter, XID and latest-value tables, per step;
- bytes per raw sample on disk including indexes (the day's sample and counter partitions after VACUUM);
- rollup of one 5-minute bucket holding 10 scrapes of every GPU (per GPU and per rack/row/site);
- heatmap data for every GPU (the selector; and with JSON encoding);
- one GPU's 90-day history (1-hour tier; 90 days of 1h rollups backfilled for ``--history-gpus`` GPUs with
  generate_series), and a 1-hour raw read of one GPU for reference.

Each timed figure is the median of ``--repeat`` runs (2 shared cores: noisy). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

from benchlib import bench_database_url, recreate_database, say

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGETS = {"ingest_samples_per_s": 10_000, "write_ratio": 1 / 3, "bytes_per_sample": 70, "heatmap_ms": 200}


def timed(fn, repeat: int) -> tuple[float, list[float], object]:  # type: ignore[no-untyped-def]
    times, result = [], None
    for i in range(repeat):
        gc.collect()
        started = time.perf_counter()
        result = fn(i)
        times.append(time.perf_counter() - started)
    return statistics.median(times), times, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--history-gpus", type=int, default=1000)
    parser.add_argument("--group", type=int, default=256, help="bodies per ingest call (one scrape task's group)")
    parser.add_argument("--reuse", action="store_true", help="keep a seeded bench database (telemetry emptied)")
    args = parser.parse_args()

    url = bench_database_url(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/fleet_bench_tel"),
                             "fleet_bench_tel")
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleet.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    if not args.reuse:
        recreate_database(url)

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.utils import timezone

    from fleet.audit import SYSTEM
    from inventory.models import Gpu
    from inventory.seed import demo_seed
    from telemetry import partitions, rollup, selectors, services, store
    from telemetry.models import IngestSource
    from telemetry.parse import parse_telemetry
    from telemetry.store import get_store, raw_copy
    from telemetry.synth import dcgm_text_for

    call_command("migrate", verbosity=0)
    if not Gpu.objects.exists():
        started = time.perf_counter()
        demo_seed(gpus=args.gpus, seed=1, actor=SYSTEM)
        say(f"seed_demo --gpus {args.gpus}: {time.perf_counter() - started:.1f} s")
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE telemetry_sample, telemetry_counter, telemetry_rollup5m, telemetry_rollupgroup5m, "
                       "telemetry_rollup1h, telemetry_rollupgroup1h, telemetry_gpulatest, telemetry_xidevent, "
                       "telemetry_rollupcursor, telemetry_inbox")
    gpus = selectors.gpus_with_identity()
    n = len(gpus)
    say(f"{n:,} placed GPUs with a UUID; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")

    # One exporter per node: the GPUs of each host in one body, one scrape source per node.
    nodes: dict[str, list] = {}
    for gpu in gpus:
        nodes.setdefault(gpu[1], []).append(gpu)
    IngestSource.objects.filter(name__startswith="bench-").delete()
    IngestSource.objects.bulk_create(  # bench setup, not a measured path
        [IngestSource(name=f"bench-{host}"[:100], kind="scrape", url=f"http://{host}:9400/metrics") for host in nodes],
        batch_size=2000)
    sources = {source.name: source for source in IngestSource.objects.filter(name__startswith="bench-")}
    node_sources = [sources[f"bench-{host}"[:100]] for host in nodes]
    started = time.perf_counter()
    scrapes = [[dcgm_text_for(node, seed=seed * 100_003 + i).encode() for i, node in enumerate(nodes.values())]
               for seed in range(2)]  # two scrapes' worth, alternated (memory)
    sizes = [len(body) for body in scrapes[0]]
    say(f"dcgm-exporter text: {len(nodes):,} bodies (one per node), {statistics.median(sizes) / 1e3:.1f} kB median, "
        f"{sum(sizes) / 1e6:.0f} MB per scrape (generated in {(time.perf_counter() - started) / 2:.1f} s each)")

    bucket = rollup.floor(timezone.now(), rollup.FIVE_MIN) - rollup.FIVE_MIN
    stamps = [bucket + rollup.dt.timedelta(seconds=5 + 29 * i) for i in range(10)]  # 10 scrapes in one bucket
    partitions.partitions_maintain(today=bucket.date(), ahead_days=1, raw_days=14, rollup_days=90)
    group = args.group

    def ingest_scrape(bodies: list[bytes], now) -> int:  # type: ignore[no-untyped-def]
        samples = 0
        for start in range(0, len(bodies), group):
            items = [services.IngestItem(source, body, "prometheus")
                     for source, body in zip(node_sources[start:start + group], bodies[start:start + group],
                                             strict=True)]
            for outcome in services.telemetry_ingest_many(items=items, now=now):
                samples += outcome.samples  # type: ignore[union-attr]
        return samples

    merges: list = []

    def merge() -> None:
        merges.append(services.telemetry_merge())

    # Warm-up (not timed): loads the identity cache, inserts every GPU's latest row.
    ingest_scrape(scrapes[1], stamps[0])
    services.telemetry_merge()

    # 1. The full ingest path, one scrape of the fleet per run; the merge after it, timed on its own.
    def ingest(i: int) -> int:
        return ingest_scrape(scrapes[i % 2], stamps[1 + i])

    ingest_s, ingest_all, samples = 0.0, [], 0
    for i in range(args.repeat):
        gc.collect()
        started = time.perf_counter()
        samples = ingest(i)
        ingest_all.append(time.perf_counter() - started)
        merge()
    ingest_s = statistics.median(ingest_all)
    ingest_rate = samples / ingest_s
    say(f"ingest (parse + map + inbox COPY + source status), {len(nodes):,} bodies in groups of {group}: "
        f"{ingest_rate:,.0f} samples/s  ({samples:,} samples, {', '.join(f'{t:.2f}' for t in ingest_all)} s)  "
        f"target >= {TARGETS['ingest_samples_per_s']:,}")
    parse_s, _, parsed = timed(lambda i: [parse_telemetry(body, fmt="prometheus", host=None, now=stamps[0],
                                                          filename="bench") for body in scrapes[0]], 1)
    lines = sum(batch.lines for batch in parsed)
    say(f"  of which parse: {parse_s:.2f} s ({lines / parse_s:,.0f} lines/s, {samples / parse_s:,.0f} samples/s)")
    merge_s = statistics.median(sum(m.seconds.values()) for m in merges)
    steps = {name: statistics.median(m.seconds.get(name, 0.0) for m in merges) for name in merges[0].seconds}
    say(f"merge of one scrape ({merges[-1].samples:,} inbox rows -> raw, {merges[-1].counter_rows:,} counter rows, "
        f"{merges[-1].xid_events:,} XID events, {merges[-1].gpus:,} latest rows): {merge_s:.2f} s "
        f"({', '.join(f'{m.samples / sum(m.seconds.values()):,.0f}' for m in merges)} rows/s; "
        f"ingest waits for it: the inbox is locked meanwhile)")
    say("  per step: " + ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in steps.items()))
    say(f"  load SQL: {store.SQL_MERGE_LOAD[:300]}...")

    # 2. The write stage alone (the inbox COPY, one transaction per group) against a raw COPY of the same rows.
    oldest = bucket - rollup.dt.timedelta(days=1)

    def mapped_rows(now) -> list[list[tuple]]:  # type: ignore[no-untyped-def]
        groups = []
        for start in range(0, len(parsed), group):
            rows: list[tuple] = []
            for batch, source in zip(parsed[start:start + group], node_sources[start:start + group], strict=True):
                rows.extend(services.sample_rows(batch.samples, services.map_identities(batch.samples), now=now,
                                                 oldest=oldest, result=services.IngestResult(), source_id=source.pk))
            groups.append(rows)
        return groups

    base = 1 + args.repeat
    row_groups = [mapped_rows(stamps[base + i]) for i in range(args.repeat)]
    n_rows = sum(len(rows) for rows in row_groups[0])
    store_ = get_store()

    def write(i: int) -> None:
        for rows in row_groups[i]:
            with transaction.atomic():
                store_.write_samples(rows)

    write_all = []
    for i in range(args.repeat):
        gc.collect()
        started = time.perf_counter()
        write(i)
        write_all.append(time.perf_counter() - started)
        merge()
    write_rate = n_rows / statistics.median(write_all)
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_raw_copy")
        cursor.execute("CREATE TABLE bench_raw_copy (ts timestamptz NOT NULL, gpu_id integer NOT NULL, power_w real, "
                       "throttle_mask integer, gpu_temp_c smallint, mem_temp_c smallint, tlimit_c smallint, "
                       "sm_clock_mhz smallint)")
    raw_groups = [[row[:8] for row in rows] for rows in row_groups[0]]

    def copy(i: int) -> None:
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE bench_raw_copy")
        for rows in raw_groups:
            with transaction.atomic():
                raw_copy(rows, table="bench_raw_copy")

    copy_s, copy_all, _ = timed(copy, args.repeat)
    copy_rate = n_rows / copy_s
    say(f"write stage (inbox COPY, 17 columns): {write_rate:,.0f} samples/s ({', '.join(f'{t:.2f}' for t in write_all)} s); "
        f"raw binary COPY of the 8 raw columns: {copy_rate:,.0f} rows/s ({', '.join(f'{t:.2f}' for t in copy_all)} s); "
        f"ratio {write_rate / copy_rate:.2f}  target >= 0.33")

    # Fill the bucket to 10 scrapes for the rollup.
    for i in range(base + args.repeat, 10):
        for rows in mapped_rows(stamps[i]):
            with transaction.atomic():
                store_.write_samples(rows)
        services.telemetry_merge()

    # 3. Bytes per raw sample, including indexes, and the counter table's share in steady state: a counter row
    #    is written only when a GPU's counters change; every GPU's first sample writes a baseline row once in its
    #    life (here in the warm-up scrape), left out of the steady-state share.
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE telemetry_sample")
        cursor.execute("VACUUM ANALYZE telemetry_counter")
        day = partitions.partition_name("telemetry_sample", bucket.date())
        counter_day = partitions.partition_name("telemetry_counter", bucket.date())
        cursor.execute(f"SELECT count(*), pg_total_relation_size('{day}'), pg_relation_size('{day}') FROM {day}")
        samples, total, heap = cursor.fetchone()
        cursor.execute(f"SELECT count(*), count(*) FILTER (WHERE ts > %s), pg_total_relation_size('{counter_day}') "
                       f"FROM {counter_day}", [stamps[0]])
        counter_rows, changed_rows, counter_bytes = cursor.fetchone()
    counter_share = counter_bytes / max(counter_rows, 1) * changed_rows / samples
    bytes_per_sample = total / samples + counter_share
    say(f"bytes per raw sample: {bytes_per_sample:.1f} = sample row {total / samples:.1f} (heap {heap / samples:.1f}, "
        f"BRIN + FSM + VM {(total - heap) / samples:.2f}) + counter rows {counter_share:.2f} ({changed_rows:,} changes "
        f"in {samples:,} samples; {counter_rows - changed_rows:,} first-sample baselines not counted)  target <= 70")

    # 4. Rollup of one 5-minute bucket (10 scrapes of every GPU).
    def roll(i: int) -> int:
        with transaction.atomic():
            return rollup.rollup_5m(start=bucket, end=bucket + rollup.FIVE_MIN)

    rollup_s, rollup_all, rolled = timed(roll, args.repeat)
    say(f"rollup of one 5-minute bucket: {rollup_s:.2f} s ({rolled:,} GPU rows + groups; "
        f"{', '.join(f'{t:.2f}' for t in rollup_all)} s)")

    # 5. Heatmap data for every GPU.
    heatmap_s, heatmap_all, data = timed(lambda i: selectors.heatmap_data(metric="gpu_temp"), max(args.repeat, 5))
    json_s, _, body = timed(lambda i: json.dumps(data, default=str), 1)
    say(f"heatmap data: {heatmap_s * 1000:.0f} ms for {len(data['gpus']):,} GPUs (+ JSON {json_s * 1000:.0f} ms, "
        f"{len(body) / 1e6:.1f} MB; {', '.join(f'{t * 1000:.0f}' for t in heatmap_all)} ms)  target <= 200 ms")

    # 6. One GPU's 90-day history (1-hour tier), rollups backfilled with generate_series.
    history_ids = [g for g in Gpu.objects.filter(latest__isnull=False).order_by("id").values_list("id", flat=True)
                   [: args.history_gpus]]
    end = rollup.floor(timezone.now(), rollup.HOUR)
    start = end - rollup.dt.timedelta(days=90)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO telemetry_rollup1h (gpu_id, bucket, n_samples, gpu_temp_min, gpu_temp_avg, gpu_temp_max, "
            "mem_temp_max, tlimit_min, power_min, power_avg, power_max, sm_clock_avg, throttled_samples, throttle_s, "
            "d_ecc_sbe, d_ecc_dbe, d_remap_corr, d_remap_unc, d_pcie_replay, hw_xid_count) "
            "SELECT g, b, 120, 40 + g %% 7, 55 + g %% 9, 70 + g %% 11, 80, 10, 300, 420, 690, 1900, 0, 0, 0, 0, 0, 0, 0, 0 "
            "FROM unnest(%s::bigint[]) g CROSS JOIN generate_series(%s::timestamptz, %s::timestamptz - interval '1 hour', "
            "interval '1 hour') b ON CONFLICT DO NOTHING", [history_ids, start, end])
        cursor.execute("ANALYZE telemetry_rollup1h")
    picks = history_ids[:: max(1, len(history_ids) // 20)]
    history_s, history_all, points = timed(
        lambda i: selectors.history(scope="gpu", scope_id=picks[i % len(picks)], metric="gpu_temp", start=start,
                                    end=end), 20)
    say(f"90-day history of one GPU (1h tier, {len(points):,} points): {history_s * 1000:.1f} ms median of 20")
    raw_s, _, raw_points = timed(
        lambda i: selectors.history(scope="gpu", scope_id=history_ids[i], metric="gpu_temp",
                                    start=bucket, end=bucket + rollup.HOUR), 5)
    say(f"1-hour raw history of one GPU ({len(raw_points)} points, BRIN on (ts, gpu_id)): {raw_s * 1000:.1f} ms")

    figures = {
        "ingest_samples_per_s": round(ingest_rate), "write_samples_per_s": round(write_rate),
        "raw_copy_samples_per_s": round(copy_rate), "write_ratio": round(write_rate / copy_rate, 3),
        "bytes_per_sample": round(bytes_per_sample, 1), "rollup_5m_s": round(rollup_s, 2),
        "heatmap_ms": round(heatmap_s * 1000, 1), "history_90d_ms": round(history_s * 1000, 1),
    }
    say(f"merge_s (one scrape of {merges[-1].samples:,} GPUs, deferred from ingest): {merge_s:.2f}")
    say(json.dumps(figures))


if __name__ == "__main__":
    main()
