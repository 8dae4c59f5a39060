"""Query counts of the procurement lists (API and pages) stay flat as rows grow."""

import datetime as dt

import pytest

from fleet.audit import SYSTEM
from procurement.services import forecast, history, orders, rma
from tests import factories
from tests.procurement import helpers

pytestmark = pytest.mark.django_db
BASE = "/api/v1/procurement"


@pytest.fixture
def data():
    factories.gpu_model()
    for code in ("q1", "q2", "q3"):
        factories.site(code)
    rows = ["serial,model,site,in_service_at,failed_at,removed_at,cause,batch"]
    rows += [f"Q{i},NVIDIA H100 80GB HBM3,q{1 + i % 3},2024-01-01,{'2025-03-03' if i % 5 == 0 else ''},,"
             f"{'gpu' if i % 5 == 0 else ''},B" for i in range(60)]
    assert history.history_import(text="\n".join(rows) + "\n", actor=SYSTEM).ok
    for n in range(4):
        po = helpers.order(quantity=3, reference=f"PO-Q{n}")
        orders.delivery_receive(order_line=helpers.line(po), site=factories.site(), received_on=dt.date(2026, 2, 1),
                                rows=orders.receipt_rows(serials=f"QR{n}A\nQR{n}B")[0], actor=SYSTEM)
    from inventory.models import Gpu

    for gpu in Gpu.objects.filter(serial__startswith="QR")[:5]:
        rma.rma_open(gpu=gpu, cause="hbm", opened_on=dt.date(2026, 3, 1), actor=SYSTEM)
    forecast.forecast_compute(actor=SYSTEM, lead_days=90)


# What each list shows of the fixture: (field, values every one of which must be listed) or a minimum count.
LISTED = {
    "orders/": ("reference", {"PO-Q0", "PO-Q1", "PO-Q2", "PO-Q3"}),
    "deliveries/": ("received_on", {"2026-02-01"}),
    "rma-cases/": ("opened_on", {"2026-03-01"}),
    "failures/": 12 + 5,  # 12 from the history (every fifth of 60), 5 from the RMA cases
    "forecasts/": 1, "warranty/": 1, "vendors/": ("name", {"Supermicro"}), "pools/": 0, "forecast-runs/": 1,
}


@pytest.mark.parametrize(("path", "limit"), [
    ("orders/", 6), ("deliveries/", 5), ("rma-cases/", 5), ("failures/", 5), ("forecasts/", 6), ("warranty/", 5),
    ("vendors/", 5), ("pools/", 6), ("forecast-runs/", 5)])
def test_api_lists(api, data, django_assert_max_num_queries, path, limit):
    client = api("viewer")
    with django_assert_max_num_queries(limit):
        response = client.get(f"{BASE}/{path}")
    assert response.status_code == 200
    body = response.json()
    rows = body["results"] if isinstance(body, dict) else body
    expected = LISTED[path]
    if isinstance(expected, int):
        assert len(rows) >= expected, (path, len(rows))
    else:
        field, values = expected
        assert values <= {str(row[field]) for row in rows}, (path, rows[:3])


@pytest.mark.parametrize(("path", "limit", "shows"), [
    ("/procurement/", 12, ["PO-Q0", "PO-Q3"]), ("/procurement/rma/", 10, ["QR0A", "March 1, 2026"]),
    ("/procurement/forecast/", 10, ["q1", "q2", "q3"])])
def test_pages(client, users, data, django_assert_max_num_queries, path, limit, shows):
    client.force_login(users["viewer"])
    with django_assert_max_num_queries(limit):
        response = client.get(path)
    assert response.status_code == 200
    body = response.content.decode()
    assert all(value in body for value in shows), [value for value in shows if value not in body]
