#!/usr/bin/env python
"""CPU per request of each kind of bench/load.py's mix, in-process (Django's test client, no HTTP server).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/fleet_bench_load .venv/bin/python bench/request_cpu.py

Runs on a database bench/load.py has set up (the demo fleet; nothing is written but an API token for the
viewer). For each kind of request: the Python CPU time per request (``time.process_time``, median and mean
over ``--requests``), its SQL queries and their time. The machine's other load moves CPU time much less than
wall time, so this is the figure to compare before and after a change. ``--profile KIND`` prints a
pyinstrument profile of that kind instead.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from benchlib import bench_database_url, loadavg, say
from load import MIX, next_path, pick

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# Requests of each kind per 100 picks of bench/load.py's MIX: an API list visit (plain or filtered) pages on
# 0-4 times, 2 on average.
WEIGHTS = {**{kind: weight for kind, weight in MIX if weight}, "api_cursor": 2 * sum(
    weight for kind, weight in MIX if kind in ("api_list", "api_filtered"))}
KINDS = tuple(WEIGHTS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--profile", choices=KINDS, default=None)
    parser.add_argument("--cprofile", choices=KINDS, default=None, help="cProfile of KIND (top functions)")
    parser.add_argument("--kinds", default=",".join(KINDS))
    args = parser.parse_args()
    url = bench_database_url(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/fleet_bench_load"),
                             "fleet_bench_load")
    var = Path(tempfile.mkdtemp(prefix="fleet-cpu-"))
    os.environ.update(DATABASE_URL=url, FLEET_VAR_DIR=str(var), PROMETHEUS_MULTIPROC_DIR=str(var / "prometheus"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleet.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from fleet.tokens import token_create
    from inventory.models import Gpu, Site

    user = get_user_model().objects.get(username="viewer")
    token = token_create(user=user, name="request-cpu", scope="read", actor=user)[1]
    html, api = Client(), Client(HTTP_AUTHORIZATION=f"Token {token}")
    html.force_login(user)
    rng = random.Random(1)
    rows = rng.sample(list(Gpu.objects.exclude(serial=None).values_list("id", "serial")), 1000)
    fixtures = {"ids": [row[0] for row in rows], "serials": [row[1] for row in rows], "serial_param": "serial",
                "sites": list(Site.objects.values_list("code", flat=True))}
    # Cursor pages as load.py's clients reach them: 1-4 pages on from plain and filtered first pages.
    cursors: list[str] = []
    for kind in ("api_list", "api_filtered") * 10:
        path: str | None = pick(kind, rng, fixtures)[0]
        for _ in range(rng.randint(1, 4)):
            path = next_path(api.get(path).content) if path else None
            if path:
                cursors.append(path)

    def request(kind: str):  # type: ignore[no-untyped-def]
        if kind == "api_cursor":
            return api.get(rng.choice(cursors))
        path, is_api = pick(kind, rng, fixtures)
        return (api if is_api else html).get(path)

    gc.collect()
    gc.freeze()
    say(f"{len(KINDS)} kinds, {args.requests} requests each, on {urlsplit(url).path.lstrip('/')} ({loadavg()})")
    if args.profile:
        from pyinstrument import Profiler

        for _ in range(20):
            request(args.profile)
        profiler = Profiler(interval=0.0002)
        profiler.start()
        for _ in range(args.requests):
            request(args.profile)
        profiler.stop()
        say(profiler.output_text(unicode=False, color=False, show_all=False))
        return
    if args.cprofile:
        import cProfile
        import pstats

        for _ in range(20):
            request(args.cprofile)
        profile = cProfile.Profile(time.process_time)
        profile.enable()
        for _ in range(args.requests):
            request(args.cprofile)
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(70)
        pstats.Stats(profile).sort_stats("tottime").print_stats(40)
        return
    means: dict[str, float] = {}
    for kind in args.kinds.split(","):
        for _ in range(20):
            assert request(kind).status_code == 200, kind
        captured: list[float] = []

        def timed(execute, sql, params, many, context, captured=captured):  # type: ignore[no-untyped-def]
            started = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                captured.append(time.perf_counter() - started)

        with connection.execute_wrapper(timed):
            request(kind)
        cpu = []
        for _ in range(args.requests):
            started = time.process_time()
            response = request(kind)
            cpu.append((time.process_time() - started) * 1000)
            assert response.status_code == 200, (kind, response.status_code)
        means[kind] = statistics.fmean(cpu)
        sql = sum(captured) * 1000
        say(f"  {kind:<11} CPU p50 {statistics.median(cpu):5.2f}  mean {statistics.fmean(cpu):5.2f} ms  "
            f"{len(captured)} queries {sql:4.1f} ms SQL  {len(response.content):7,d} bytes")
    if set(means) == set(KINDS):
        mixed = sum(means[k] * w for k, w in WEIGHTS.items()) / sum(WEIGHTS.values())
        say(f"  load.py's mix: {mixed:.2f} ms of CPU per request (mean, weighted as the mix)")
    say(f"end ({loadavg()})")


if __name__ == "__main__":
    main()
