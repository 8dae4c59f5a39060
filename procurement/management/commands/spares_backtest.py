"""``python manage.py spares_backtest --from DATE --to DATE [--lead-days 90] [--fill-rate 0.95] [--model M]
[--site S | --pool P] [--method adaptive|nb|poisson] [--format text|json]``

Rolls the spares forecast monthly (origins on the 1st of each month) over the stored failure history: per origin,
the stock recommended as of that origin (only history before it) and the failures of the following lead time;
then the fill rate achieved, mean stock and stock-out windows, and the same for fixed rules (1-5 % of the
installed base). With ``--format json`` the last line is one JSON object.
"""

from __future__ import annotations

import datetime as dt
import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from inventory.models import GpuModel, Site
from procurement.forecasting.engine import METHODS
from procurement.models import SparesPool
from procurement.services.forecast import BacktestWindowError, backtest_run


def _date(value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError as exc:
        raise CommandError(f"'{value}' is not a date (YYYY-MM-DD)") from exc


class Command(BaseCommand):
    help = "Backtest the spares policy against the failure history (monthly origins)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--from", dest="date_from", required=True)
        parser.add_argument("--to", dest="date_to", required=True)
        parser.add_argument("--lead-days", type=int, default=90)
        parser.add_argument("--fill-rate", type=float, default=None)
        parser.add_argument("--model", help="GPU model name or SKU (default: every model, each pooled)")
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--site", help="site code")
        group.add_argument("--pool", help="spares pool name")
        parser.add_argument("--method", choices=sorted(METHODS), default="adaptive")
        parser.add_argument("--format", choices=["text", "json"], default="text")

    def handle(self, *args, **o) -> None:  # type: ignore[no-untyped-def]
        date_from, date_to = _date(o["date_from"]), _date(o["date_to"])
        if date_to < date_from:
            raise CommandError(f"--to {date_to} is before --from {date_from}")
        if o["lead_days"] <= 0:
            raise CommandError("--lead-days must be positive")
        if o["fill_rate"] is not None and not 0.5 <= o["fill_rate"] < 1:
            raise CommandError("--fill-rate must be between 0.5 and 1 (for example 0.95)")
        model = site = pool = None
        if o["model"]:
            model = GpuModel.objects.filter(name=o["model"]).first() or GpuModel.objects.filter(sku=o["model"]).first()
            if model is None:
                raise CommandError(f"--model: unknown model '{o['model']}'")
        if o["site"]:
            site = Site.objects.filter(code=o["site"]).first()
            if site is None:
                raise CommandError(f"--site: unknown site '{o['site']}'")
        if o["pool"]:
            pool = SparesPool.objects.filter(name=o["pool"]).first()
            if pool is None:
                raise CommandError(f"--pool: unknown spares pool '{o['pool']}'")
        try:
            result = backtest_run(date_from=date_from, date_to=date_to, lead_days=o["lead_days"],
                                  fill_rate=o["fill_rate"], model=model, site=site, pool=pool, method=o["method"])
        except BacktestWindowError as exc:
            raise CommandError(f"--to {exc}") from exc
        if o["format"] == "json":
            self.stdout.write(json.dumps(result))
            return
        self.stdout.write(f"{'as of':<11} {'model':<24} {'scope':<10} {'installed':>9} {'stock':>6} {'demand':>6} "
                          "sizing")
        for row in result["origins"]:
            scope = row.get("pool") or row.get("site") or "fleet"
            self.stdout.write(f"{row['as_of']:<11} {row['model'][:24]:<24} {scope[:10]:<10} {row['installed']:>9} "
                              f"{row['recommended']:>6} {row['demand']:>6} {row['sizing']}"
                              f"{'  ALERT' if row['alert'] else ''}")
        self.stdout.write(f"\n{result['verdict']['text']}")
        if len(result["models"]) > 1:
            for name, scores in result["models"].items():
                self.stdout.write(f"  {name}: {scores['verdict']['text']}")
        unc = result["uncalibrated"]
        self.stdout.write(f"forecast before calibration: fill rate {unc['fill_rate']:.1%}, mean stock "
                          f"{unc['mean_stock']:.1f}")
        self.stdout.write(f"policy ({result['method']}, target {result['target_fill_rate']:.1%}, lead "
                          f"{result['lead_days']} d): fill rate {result['fill_rate']:.1%}, mean stock "
                          f"{result['mean_stock']:.1f}, stock-out windows {result['stockout_windows']}")
        for name, rule in result["rules"].items():
            self.stdout.write(f"rule {name:>3} of installed: fill rate {rule['fill_rate']:.1%}, mean stock "
                              f"{rule['mean_stock']:.1f}, stock-out windows {rule['stockout_windows']}")
