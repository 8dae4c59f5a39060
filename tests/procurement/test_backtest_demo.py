"""The backtest on the demo's data, seeded by the code ``make run``'s bootstrap calls (``seed_demo`` with 2,000
GPUs, then ``procurement_demo_seed``; the firmware, telemetry and acceptance demos it also runs write nothing the
backtest reads), over the backtest page's default window (the last three years up to the last date that can be
scored).

The fixed rules are counted here from the database (the GPUs of each model in service at each origin, the failures
in the following 90 days), not taken from the backtest's arrays, and must agree with what the backtest reports;
the page must say which won and by how much, as counted here. The policy reaches the target fill. That no fixed
rule reaches it with less mean stock is not met: the 3 % rule does (docs/procurement.md: what the young models'
learning costs); the test that says so is marked as a shortfall, strict, with the figures, and reports them when
it runs."""

from __future__ import annotations

import datetime as dt
import io
import re
from collections import defaultdict

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import transaction
from django.test import Client, override_settings
from django.utils import timezone

from fleet.audit import SYSTEM
from fleet.roles import user_set_role
from inventory.models import GpuModel
from procurement.demo import procurement_demo_seed
from procurement.models import Failure, GpuAsset
from procurement.services.forecast import backtest_run, last_scored
from tests.procurement import helpers

LEAD = dt.timedelta(days=90)
TARGET = 0.95


def counted_rules(models: dict[int, str], origins: list[dt.date]) -> dict[tuple[str, str], tuple[int, int]]:
    """(model, origin) -> (GPUs in service at the origin, failures in the lead time after it), from the rows: a
    board is in service from its service date until its removal or its first failure (a board that fails on the
    origin's day is still in service at it)."""
    first_failure: dict[int, dt.date] = {}
    failures: dict[int, list[dt.date]] = defaultdict(list)
    for gpu_id, model_id, day in Failure.objects.values_list("gpu_id", "model_id", "failed_on"):
        first_failure[gpu_id] = min(day, first_failure.get(gpu_id, day))
        failures[model_id].append(day)
    boards = defaultdict(list)
    for gpu_id, model_id, start, removed in GpuAsset.objects.exclude(in_service_on=None).values_list(
            "gpu_id", "model_id", "in_service_on", "removed_on"):
        ends = [d for d in (removed, first_failure.get(gpu_id)) if d is not None]
        boards[model_id].append((start, min(ends) if ends else None))
    out = {}
    for model_id, name in models.items():
        for o in origins:
            installed = sum(1 for start, end in boards[model_id] if start < o and (end is None or end >= o))
            demand = sum(1 for day in failures[model_id] if o <= day < o + LEAD)
            out[(name, o.isoformat())] = (installed, demand)
    return out


@pytest.fixture(scope="module")
def demo(django_db_setup, django_db_blocker):
    """Seed, run the backtest and render the page in one transaction, rolled back: the rest of the suite sees an
    empty database. The page is read with a cache of its own (the page caches its backtest per window)."""
    with django_db_blocker.unblock(), transaction.atomic():
        call_command("seed_demo", gpus=2000, seed=1, stdout=io.StringIO())
        procurement_demo_seed(actor=SYSTEM)
        today = timezone.localdate()
        last, _ = last_scored(lead_days=90)
        date_from = dt.date(today.year - 3, today.month, 1)
        result = backtest_run(date_from=date_from, date_to=last, lead_days=90)
        origins = sorted({dt.date.fromisoformat(r["as_of"]) for r in result["origins"]})
        counted = counted_rules(dict(GpuModel.objects.values_list("id", "name")), origins)
        viewer = get_user_model().objects.create_user(username="demo-viewer", password="pw-for-tests-only")  # noqa: S106
        user_set_role(viewer, "viewer")
        client = Client()
        client.force_login(viewer)
        with override_settings(CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                                   "LOCATION": "backtest-demo"}}):
            html = client.get("/procurement/forecast/backtest/").content.decode()
        transaction.set_rollback(True)
    return {"result": result, "counted": counted, "html": html.replace("&#x27;", "'"), "window": (date_from, last)}


def figures(result: dict) -> str:
    rules = ", ".join(f"{k} rule {r['fill_rate']:.3f} / {r['mean_stock']:.2f}" for k, r in result["rules"].items())
    return (f"policy {result['fill_rate']:.3f} / {result['mean_stock']:.2f} (forecast before calibration "
            f"{result['uncalibrated']['fill_rate']:.3f} / {result['uncalibrated']['mean_stock']:.2f}); {rules}")


@pytest.mark.django_db
def test_the_fixed_rules_counted_from_the_database_agree_with_the_backtest(demo):
    result, counted = demo["result"], demo["counted"]
    rows = result["origins"]
    assert len(rows) == len(counted) and len({r["model"] for r in rows}) == 3
    for r in rows:
        installed, demand = counted[(r["model"], r["as_of"])]
        assert (r["installed"], r["demand"]) == (installed, demand), r
        assert r["rules"] == {f"{k}%": -(-installed * k // 100) for k in (1, 2, 3, 4, 5)}, r
    total = sum(d for _, d in counted.values())
    for k in (1, 2, 3, 4, 5):
        stock = {key: -(-installed * k // 100) for key, (installed, _) in counted.items()}
        fill = sum(min(stock[key], d) for key, (_, d) in counted.items()) / total
        mean = sum(stock.values()) / len(stock)
        assert result["rules"][f"{k}%"]["fill_rate"] == round(fill, 4), (k, fill)
        assert result["rules"][f"{k}%"]["mean_stock"] == round(mean, 2), (k, mean)


@pytest.mark.django_db
def test_the_policy_reaches_the_target_fill(demo):
    result = demo["result"]
    assert result["fill_rate"] >= TARGET, figures(result)
    assert result["verdict"]["reached"]


@pytest.mark.django_db
def test_the_page_says_which_won_and_by_how_much(demo):
    result, html = demo["result"], demo["html"]
    date_from, last = demo["window"]
    # The page ran the same window: as many origins, from its first month to the last that can be scored.
    assert f"<h2>Backtest: {len(result['origins'])} origins, lead 90 days, target 0.95</h2>" in html
    assert f'value="{date_from.isoformat()}"' in html and f'value="{last.isoformat()}"' in html
    overall = re.search(r'<p id="backtest-verdict"><strong>All models together: ([^<]+)</strong>', html)
    assert overall and overall.group(1).startswith(helpers.expected_verdict(result["origins"], TARGET)), (
        overall, figures(result))
    said = dict(re.findall(r'<p class="model-verdict" data-model="([^"]+)">([^<]+)</p>', html))
    assert len(said) == 3
    for model, text in said.items():
        rows = [r for r in result["origins"] if r["model"] == model]
        assert text.startswith(helpers.expected_verdict(rows, TARGET)), (model, text)


@pytest.mark.xfail(reason="A shortfall on the demo's data (seeded 2026-12-05): the 3 % rule reaches 0.975 with mean "
                          "stock 8.71; the policy 0.958 with 10.53 (0.970 with 9.99 before the hold during alerts). "
                          "Until each model has 12 windows of its own the forecast is used as it is: 506 spares over "
                          "those 77 model-origins against the rule's 383; the other 25 would have to hold 382 and "
                          "cover 320 of their 341 failures (the 2 % rule holds 344 and covers 298; with hindsight "
                          "333); docs/procurement.md", strict=True)
@pytest.mark.django_db
def test_no_fixed_rule_reaches_the_target_with_less_mean_stock(demo):
    result = demo["result"]
    cheaper = [k for k, r in result["rules"].items()
               if r["fill_rate"] >= TARGET and r["mean_stock"] < result["mean_stock"]]
    assert cheaper == [], figures(result)
