"""No look-ahead: a forecast or backtest as of a date reads only rows dated before it.

The fixture has rows on both sides of ``AS_OF`` in every table the computation reads (imported history: GPUs,
assets, failures, state rows; deliveries and their orders; RMA cases; placement moves; spares). The test computes
the forecast (every scope, with its lead times, spares and calibration) and a site-scoped backtest, then changes
EVERY row dated on or after ``AS_OF`` in each of those tables and adds more, and requires identical answers. A
last check proves the later rows are read once they are dated before the as-of date (the test would catch a
computation that ignored them because they were unreachable)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models import F

from fleet.audit import SYSTEM
from inventory.models import Gpu, GpuMove, GpuStateChange
from procurement.models import (
    Delivery,
    Failure,
    Forecast,
    GpuAsset,
    PurchaseOrder,
    RmaCase,
    SparesPool,
    Vendor,
)
from procurement.services import forecast, history, orders
from tests import factories
from tests.procurement import helpers

pytestmark = pytest.mark.django_db

AS_OF = dt.date(2025, 6, 1)
LATER = dt.datetime(2025, 6, 1, 0, 0, tzinfo=dt.UTC)  # the first instant not before AS_OF
MODEL = "NVIDIA H100 80GB HBM3"


def _at(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(12), tzinfo=dt.UTC)


@pytest.fixture
def world():
    model = factories.gpu_model()
    fra1, ams1 = factories.site("fra1"), factories.site("ams1")
    SparesPool.objects.create(name="EU").sites.set([fra1, ams1])
    ams_server = factories.server(factories.rack(ams1))
    fra_server = factories.server(factories.rack(fra1))
    # Two years of imported history at both sites; failures before and after AS_OF.
    rows = ["serial,model,site,in_service_at,failed_at,removed_at,cause,batch"]
    for i in range(240):
        site = "fra1" if i % 2 else "ams1"
        failed = ""
        if i % 6 == 0:
            failed = (dt.date(2023, 9, 1) + dt.timedelta(days=7 * i)).isoformat()
        rows.append(f"N{i:04d},{MODEL},{site},2023-06-01,{failed},,{'DBE' if failed else ''},L{i % 3}")
    assert history.history_import(text="\n".join(rows) + "\n", actor=SYSTEM).ok
    assert Failure.objects.filter(failed_on__lt=AS_OF).exists() and Failure.objects.filter(failed_on__gte=AS_OF).exists()
    # Deliveries: one before AS_OF (ordered 2025-01-05, received 2025-03-01), one after.
    before = helpers.order(quantity=6, reference="PO-B", ordered_on=dt.date(2025, 1, 5))
    orders.delivery_receive(order_line=helpers.line(before), site=fra1, received_on=dt.date(2025, 3, 1),
                            rows=orders.receipt_rows(serials="\n".join(f"DB{n}" for n in range(6)))[0],
                            actor=SYSTEM)
    after = helpers.order(quantity=4, reference="PO-A", ordered_on=dt.date(2025, 6, 20))
    orders.delivery_receive(order_line=helpers.line(after), site=ams1, received_on=dt.date(2025, 6, 25),
                            rows=orders.receipt_rows(serials="\n".join(f"DA{n}" for n in range(4)))[0],
                            actor=SYSTEM)
    # Spares on the shelf before AS_OF: four of the early delivery at fra1, and one board taken out of a server at
    # ams1 into the shelf; later, more moves and state changes.
    for gpu in Gpu.objects.filter(serial__in=["DB0", "DB1", "DB2", "DB3"]):
        GpuStateChange.objects.create(gpu=gpu, from_state="received", to_state="spare", actor_name="t",
                                      at=_at(dt.date(2025, 3, 5)))
    n1 = Gpu.objects.get(serial="N0001")
    GpuMove.objects.create(gpu=n1, kind="to_spares", from_server=ams_server, actor_name="t",
                           at=_at(dt.date(2025, 4, 1)))
    GpuStateChange.objects.create(gpu=n1, from_state="in_service", to_state="spare", actor_name="t",
                                  at=_at(dt.date(2025, 4, 1)))
    GpuMove.objects.create(gpu=Gpu.objects.get(serial="DB4"), kind="install", to_server=fra_server, actor_name="t",
                           at=_at(dt.date(2025, 7, 1)))
    # RMA turnaround: one case over before AS_OF, one after.
    vendor = Vendor.objects.get(name="Supermicro")
    RmaCase.objects.create(gpu=Gpu.objects.get(serial="N0000"), vendor=vendor, status="closed",
                           opened_on=dt.date(2025, 1, 2), replaced_on=dt.date(2025, 2, 1), closed_on=dt.date(2025, 2, 2))
    RmaCase.objects.create(gpu=Gpu.objects.get(serial="N0006"), vendor=vendor, status="replaced",
                           opened_on=dt.date(2025, 6, 3), replaced_on=dt.date(2025, 6, 5))
    return {"model": model, "fra1": fra1, "ams1": ams1, "fra_server": fra_server, "ams_server": ams_server}


def snapshot(run) -> list[tuple]:
    """Every stored figure of every scope of a run, inputs included."""
    skip = {"id", "run"}
    fields = [f.attname for f in Forecast._meta.concrete_fields if f.name not in skip]
    return sorted(tuple(str(v) for v in row) for row in run.forecasts.values_list(*fields))


def answers(world) -> dict:
    run = forecast.forecast_compute(as_of=AS_OF, actor=SYSTEM)
    bt_site = forecast.backtest_run(date_from=dt.date(2024, 3, 1), date_to=dt.date(2025, 2, 1), lead_days=60,
                                    site=world["fra1"])
    bt_fleet = forecast.backtest_run(date_from=dt.date(2024, 3, 1), date_to=dt.date(2025, 2, 1), lead_days=60)
    out = {"forecast": snapshot(run), "spares": forecast.spares_by_cell(as_of=AS_OF),
           "leads": forecast.lead_times(as_of=AS_OF), "backtest_site": bt_site, "backtest_fleet": bt_fleet}
    Forecast.objects.filter(run=run).delete()
    run.delete()
    return out


def mutate_every_later_row(world) -> None:
    """Change every row dated on or after AS_OF in each table the computation reads, and add more."""
    model, fra1, ams1 = world["model"], world["fra1"], world["ams1"]
    # Failures on or after AS_OF: other day (still later), other cause, other site; and new ones.
    later_failures = Failure.objects.filter(failed_on__gte=AS_OF)
    assert later_failures.exists()
    later_failures.update(failed_on=F("failed_on") + dt.timedelta(days=3), cause="power", site=fra1, batch="LX")
    for gpu in Gpu.objects.filter(serial__in=["N0003", "N0005", "N0007"]):
        Failure.objects.create(gpu=gpu, model=model, site=ams1, failed_on=dt.date(2025, 6, 2), cause="gpu")
    # Assets that begin or end on or after AS_OF; boards delivered after it: other site, batch, dates.
    GpuAsset.objects.filter(gpu__serial__startswith="DA").update(site=fra1, batch="LATE",
                                                                 in_service_on=dt.date(2025, 7, 1))
    GpuAsset.objects.filter(gpu__serial__in=["N0010", "N0011"]).update(removed_on=dt.date(2025, 8, 1))
    # State rows on or after AS_OF (the receipts' own rows included): other states; and new ones.
    later_states = GpuStateChange.objects.filter(at__gte=LATER)
    assert later_states.exists()
    later_states.update(to_state="spare", at=F("at") + dt.timedelta(hours=1))
    for gpu in Gpu.objects.filter(serial__in=["N0020", "N0021", "N0022"]):
        GpuStateChange.objects.create(gpu=gpu, from_state="in_service", to_state="spare", actor_name="t",
                                      at=LATER + dt.timedelta(days=1))
    Gpu.objects.filter(serial__startswith="N00").update(state="spare")
    # Moves on or after AS_OF: into the other site's server; and new ones out of servers onto the shelf.
    later_moves = GpuMove.objects.filter(at__gte=LATER)
    assert later_moves.exists()
    later_moves.update(to_server=world["ams_server"], at=F("at") + dt.timedelta(days=2))
    for gpu in Gpu.objects.filter(serial__in=["DB0", "DB1", "N0020"]):
        GpuMove.objects.create(gpu=gpu, kind="to_spares", from_server=world["ams_server"], actor_name="t",
                               at=LATER + dt.timedelta(days=3))
    # Orders and deliveries on or after AS_OF: other dates and site; and a new one with a one-day lead time.
    later_deliveries = Delivery.objects.filter(received_on__gte=AS_OF)
    assert later_deliveries.exists()
    later_deliveries.update(received_on=dt.date(2025, 6, 2), site=fra1)
    PurchaseOrder.objects.filter(ordered_on__gte=AS_OF).update(ordered_on=dt.date(2025, 6, 1),
                                                               promised_on=dt.date(2025, 6, 2))
    late = helpers.order(quantity=2, reference="PO-L", ordered_on=dt.date(2025, 9, 1))
    orders.delivery_receive(order_line=helpers.line(late), site=ams1, received_on=dt.date(2025, 9, 2),
                            rows=orders.receipt_rows(serials="DL0\nDL1")[0], actor=SYSTEM)
    # RMA cases opened or replaced on or after AS_OF: other turnaround; and a new one.
    later_rma = RmaCase.objects.filter(opened_on__gte=AS_OF)
    assert later_rma.exists()
    later_rma.update(replaced_on=dt.date(2025, 6, 4), opened_on=dt.date(2025, 6, 2))
    RmaCase.objects.create(gpu=Gpu.objects.get(serial="N0012"), vendor=Vendor.objects.get(name="Supermicro"),
                           status="replaced", opened_on=dt.date(2025, 7, 1), replaced_on=dt.date(2025, 7, 2))


def test_changing_every_later_row_leaves_the_forecast_and_backtest_unchanged(world):
    before = answers(world)
    mutate_every_later_row(world)
    after = answers(world)
    assert after["forecast"] == before["forecast"]
    assert after["spares"] == before["spares"]
    assert after["leads"] == before["leads"]
    assert after["backtest_site"] == before["backtest_site"]
    assert after["backtest_fleet"] == before["backtest_fleet"]


def test_the_fixture_s_as_of_figures_come_from_the_earlier_rows(world):
    """What the as-of computation must see, counted here from the fixture: spares 4 at fra1 (the early delivery's
    shelf) and 1 at ams1 (the board taken out of the ams1 server); one delivery of 55 days and one RMA case."""
    spares = forecast.spares_by_cell(as_of=AS_OF)
    model = world["model"].pk
    assert spares == {(world["fra1"].pk, model): 4, (world["ams1"].pk, model): 1}
    lead = forecast.lead_times(as_of=AS_OF)[model]
    assert (lead.n, lead.observed, lead.source) == (1, float((dt.date(2025, 3, 1) - dt.date(2025, 1, 5)).days),
                                                   "observed")


def test_the_later_rows_are_read_once_they_are_dated_before_the_as_of_date(world):
    later = dt.date(2025, 10, 1)
    lead = forecast.lead_times(as_of=later)[world["model"].pk]
    assert lead.n == 2  # the delivery of June 25 now counts
    before = forecast.spares_by_cell(as_of=later)
    mutate_every_later_row(world)
    assert forecast.lead_times(as_of=later)[world["model"].pk].n == 3  # and September's
    assert forecast.spares_by_cell(as_of=later) != before  # the later state rows and moves are read
