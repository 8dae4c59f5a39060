#!/usr/bin/env python
"""Procurement benchmark: the failure-history import, the spares forecast and the backtest on PostgreSQL.

    .venv/bin/python bench/procurement.py     # DATABASE_URL's server; database fleet_bench_proc (re-created)

Runs against a DEDICATED database that it drops and re-creates (``fleet_bench_proc`` unless DATABASE_URL names a
database containing "bench_proc"). Measured in one run, printed with the targets:

- ``import_history`` of a 100,000-row CSV (a synthetic history, 2014-08 .. 2020-01, of a fleet at 8 sites with
  two models and a batch that goes bad): rows per second through ``history_import`` (parse, checks, COPY);
- the forecast of every site x model, pool x model and model (``forecast_compute``: load, statistics, store) on
  that history (about 100,000 boards over five and a half years): median of 3, target <= 1 s;
- a 53-origin backtest (monthly origins 2015-08-01 .. 2019-12-01, one model pooled, 90-day lead time), target
  <= 10 s, with its fill rate against the 95 % target and the fixed rules'.

The last line of output is one JSON object: ``import_history_rows_per_s``, ``forecast_s``, ``backtest_s`` (and
the backtest's ``fill_rate``). The machine's 2 cores are shared: figures are noisy.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchlib import bench_database_url, loadavg, recreate_database, say

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ROWS = int(os.environ.get("BENCH_PROC_ROWS", "100000"))


def main() -> None:
    url = bench_database_url(os.environ.get("DATABASE_URL", ""), "fleet_bench_proc")
    recreate_database(url)
    os.environ.update({"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "fleet.settings"})
    import django

    django.setup()
    from django.core.management import call_command

    from fleet.audit import SystemActor
    from inventory.models import GpuModel, Site
    from procurement.forecasting import synthetic
    from procurement.models import SparesPool
    from procurement.services.forecast import backtest_run, forecast_compute, last_scored
    from procurement.services.history import history_import

    call_command("migrate", verbosity=0)
    say(f"database {url.rsplit('/', 1)[-1]}; {loadavg()}")
    rows = synthetic.generate("bad_batch", gpus=int(ROWS * 0.87), sites=8, models=("NVIDIA H100 80GB HBM3",
                              "NVIDIA B200"), start=dt.date(2014, 8, 1), months=66, seed=2)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "history.csv"
        synthetic.write_csv(rows, str(path))
        lines = path.read_text().splitlines()[: ROWS + 1]
    text = "\n".join(lines) + "\n"
    actor = SystemActor("bench")
    started = time.perf_counter()
    result = history_import(text=text, create_missing=True, actor=actor)
    import_s = time.perf_counter() - started
    assert result.ok, result.errors[:5]
    rate = result.created / import_s
    say(f"import_history: {result.created:,} rows ({result.failures:,} failures) in {import_s:.2f} s = "
        f"{rate:,.0f} rows/s (issue: 30,000 rows under 30 s)")

    sites = list(Site.objects.order_by("code"))
    for name, members in (("west", sites[:4]), ("east", sites[4:])):
        SparesPool.objects.create(name=name).sites.set(members)
    as_of = dt.date(2020, 2, 1)
    times, run = [], None
    for _ in range(3):
        started = time.perf_counter()
        run = forecast_compute(as_of=as_of, lead_days=90, actor=actor)
        times.append(time.perf_counter() - started)
    forecast_s = statistics.median(times)
    fleet = run.forecasts.filter(scope="model").select_related("gpu_model")
    say(f"forecast: {run.forecasts.count()} scopes (8 sites x 2 models, 2 pools x 2 models, 2 models) over "
        f"{sum(f.installed for f in fleet):,} GPUs in service, {ROWS:,} boards of history: median {forecast_s:.3f} s "
        f"of {', '.join(f'{t:.3f}' for t in times)} (target <= 1 s)")
    for f in fleet:
        say(f"  {f.gpu_model}: rate {f.rate:.2%}/GPU-yr, recommended {f.recommended}, alert: {f.alert or 'none'}")

    model = GpuModel.objects.get(name="NVIDIA H100 80GB HBM3")
    last, end = last_scored(lead_days=90)
    date_to = min(dt.date(2019, 12, 1), last)  # a window past the data is refused
    say(f"history ends {end}: the last origin that can be scored with a 90-day lead time is {last}")
    started = time.perf_counter()
    bt = backtest_run(date_from=dt.date(2015, 8, 1), date_to=date_to, lead_days=90, model=model)
    backtest_s = time.perf_counter() - started
    say(f"backtest: {len(bt['origins'])} origins in {backtest_s:.2f} s (target <= 10 s); fill rate "
        f"{bt['fill_rate']:.3f} (target {bt['target_fill_rate']}), mean stock {bt['mean_stock']:.0f}, stock-out "
        f"windows {bt['stockout_windows']}")
    for name, rule in bt["rules"].items():
        say(f"  rule {name}: fill rate {rule['fill_rate']:.3f}, mean stock {rule['mean_stock']:.0f}")
    say(f"  forecast before calibration: fill rate {bt['uncalibrated']['fill_rate']:.3f}, mean stock "
        f"{bt['uncalibrated']['mean_stock']:.0f}")
    say(f"  {bt['verdict']['text']}")
    poisson = backtest_run(date_from=dt.date(2015, 8, 1), date_to=date_to, lead_days=90, model=model,
                           method="poisson", calibrate=False)
    say(f"  plain Poisson policy: fill rate {poisson['fill_rate']:.3f}, mean stock {poisson['mean_stock']:.0f}")
    say(f"{loadavg()}")
    say(json.dumps({"import_history_rows_per_s": round(rate), "forecast_s": round(forecast_s, 3),
                    "backtest_s": round(backtest_s, 2), "backtest_origins": len(bt["origins"]),
                    "fill_rate": bt["fill_rate"], "mean_stock": bt["mean_stock"],
                    "uncalibrated_fill_rate": bt["uncalibrated"]["fill_rate"],
                    "reached_target": bt["verdict"]["reached"], "winner": bt["verdict"]["winner"],
                    "dominated_by": [k for k, r in bt["rules"].items() if r["fill_rate"] >= bt["target_fill_rate"]
                                     and r["mean_stock"] < bt["mean_stock"]],
                    "poisson_fill_rate": poisson["fill_rate"]}))


if __name__ == "__main__":
    main()
