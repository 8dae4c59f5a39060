"""The procurement API: role matrix, 400s with field errors that write nothing, the receipt and RMA flows,
forecasts and the backtest."""

import datetime as dt

import pytest

from fleet.audit import SYSTEM
from fleet.models import AuditEvent, AuditSource
from inventory.models import Gpu
from procurement.models import GpuAsset, PurchaseOrder, RmaCase
from procurement.services import history
from tests import factories
from tests.procurement import helpers

pytestmark = pytest.mark.django_db
BASE = "/api/v1/procurement"


def order_body(quantity=4, price="30000.00"):
    return {"vendor": helpers.vendor().pk, "reference": "PO-API-1", "ordered_on": "2026-01-05",
            "promised_on": "2026-03-01", "currency": "USD",
            "lines": [{"gpu_model": factories.gpu_model().pk, "quantity": quantity, "unit_price": price}]}


@pytest.mark.parametrize(("role", "read", "write"), [(None, 401, 401), ("viewer", 200, 403), ("operator", 200, 201),
                                                     ("approver", 200, 201), ("admin", 200, 201)])
def test_role_matrix(api, role, read, write):
    client = api(role)
    assert client.get(f"{BASE}/orders/").status_code == read
    assert client.get(f"{BASE}/forecasts/").status_code == read
    assert client.post(f"{BASE}/orders/", order_body(), format="json").status_code == write


def test_only_approvers_approve(api, settings):
    settings.PROCUREMENT_APPROVAL_THRESHOLD = 1000
    created = api("operator").post(f"{BASE}/orders/", order_body(), format="json").json()
    assert created["status"] == "awaiting_approval"
    assert api("operator").post(f"{BASE}/orders/{created['id']}/approve/").status_code == 403
    response = api("approver").post(f"{BASE}/orders/{created['id']}/approve/")
    assert response.status_code == 200 and response.json()["status"] == "approved"
    event = AuditEvent.objects.filter(content_type__model="purchaseorder", object_id=str(created["id"])).first()
    assert event.source == AuditSource.API and event.actor_name == "approver-user"


@pytest.mark.parametrize(("change", "field"), [
    ({"promised_on": "2025-12-01"}, "promised_on"),
    ({"lines": [{"gpu_model": None, "quantity": 1, "unit_price": "1"}]}, "lines"),
    ({"lines": [{"gpu_model": 1, "quantity": -3, "unit_price": "1"}]}, "lines"),
    ({"lines": []}, "lines"),
    ({"currency": "dollars"}, "currency"),
])
def test_bad_orders_are_400_with_the_field_and_write_nothing(api, change, field):
    factories.gpu_model()
    response = api().post(f"{BASE}/orders/", {**order_body(), **change}, format="json")
    assert response.status_code == 400, response.content
    errors = response.json()
    assert errors.pop("request_id") == response["X-Request-ID"]  # every error names its request
    assert any(name == field or name.startswith(f"{field}[") for name in errors), errors
    assert all(isinstance(v, list) and all(isinstance(m, str) for m in v) for v in errors.values())  # flat shape
    assert not PurchaseOrder.objects.exists()


def test_receive_and_rma_through_the_api(api):
    client = api()
    order = client.post(f"{BASE}/orders/", order_body(quantity=2), format="json").json()
    line = order["lines"][0]["id"]
    site = factories.site("ams1")
    too_many = client.post(f"{BASE}/orders/{order['id']}/receive/",
                           {"line": line, "site": "ams1", "received_on": "2026-02-20", "serials": ["A", "B", "C"]},
                           format="json")
    assert too_many.status_code == 400 and "line 3: quantity: over-delivery" in too_many.json()["rows"][0]
    assert not Gpu.objects.exists()
    ok = client.post(f"{BASE}/orders/{order['id']}/receive/",
                     {"line": line, "site": "ams1", "received_on": "2026-02-20", "serials": ["A", "B"]},
                     format="json")
    assert ok.status_code == 201 and ok.json()["gpu_count"] == 2
    gpu = Gpu.objects.get(serial="A")
    assert GpuAsset.objects.get(gpu=gpu).site == site
    opened = client.post(f"{BASE}/rma-cases/", {"gpu": gpu.pk, "cause": "nvlink", "opened_on": "2026-03-01",
                                                "evidence_kind": "xid", "xid": 74}, format="json")
    assert opened.status_code == 201, opened.content
    case = opened.json()
    assert case["vendor"]["name"] == "Supermicro" and case["failure"]["cause"] == "nvlink"
    assert client.post(f"{BASE}/rma-cases/{case['id']}/close/", {"closed_on": "2026-02-01"},
                       format="json").status_code == 400
    assert client.post(f"{BASE}/rma-cases/{case['id']}/replace/", {"serial": "N1", "received_on": "2026-03-09"},
                       format="json").status_code == 400  # not shipped yet
    assert client.post(f"{BASE}/rma-cases/{case['id']}/ship/", {"shipped_on": "2026-03-02", "carrier": "DHL",
                                                                "tracking": "JD1"}, format="json").status_code == 200
    replaced = client.post(f"{BASE}/rma-cases/{case['id']}/replace/", {"serial": "N1", "received_on": "2026-03-09"},
                           format="json")
    assert replaced.json()["replacement"]["serial"] == "N1"
    assert RmaCase.objects.get().replacement.serial == "N1"
    assert api("viewer").post(f"{BASE}/rma-cases/{case['id']}/close/", {"closed_on": "2026-03-10"},
                              format="json").status_code == 403


def test_a_body_that_does_not_parse_is_a_field_error(api):
    response = api().post(f"{BASE}/vendors/", data="\x00", content_type="application/json")
    assert response.status_code == 400 and list(response.json()) == ["non_field_errors", "request_id"]


def test_unknown_filters_are_400(api):
    assert api("viewer").get(f"{BASE}/forecasts/", {"colour": "red"}).status_code == 400
    assert api("viewer").get(f"{BASE}/rma-cases/", {"status": "lost"}).status_code == 400
    assert api("viewer").get(f"{BASE}/backtest/", {"date_from": "2020-01-01"}).status_code == 400


def test_forecasts_and_backtest(api):
    factories.gpu_model()
    factories.site("fra1")
    rows = ["serial,model,site,in_service_at,failed_at,removed_at,cause,batch"]
    for i in range(300):
        failed = f"2024-{1 + i % 12:02d}-15" if i % 10 == 0 else ""
        rows.append(f"F{i},NVIDIA H100 80GB HBM3,fra1,2023-01-10,{failed},,{'gpu' if failed else ''},B1")
    assert history.history_import(text="\n".join(rows) + "\n", actor=SYSTEM).ok
    run = api("operator").post(f"{BASE}/forecast-runs/", {"as_of": "2025-01-01", "lead_days": 90}, format="json")
    assert run.status_code == 201
    listed = api("viewer").get(f"{BASE}/forecasts/", {"scope": "model"}).json()["results"]
    assert len(listed) == 1 and listed[0]["failures"] == 30 and listed[0]["installed"] == 270
    assert listed[0]["as_of"] == "2025-01-01" and listed[0]["recommended"] >= 1
    result = api("viewer").get(f"{BASE}/backtest/", {"date_from": "2024-01-01", "date_to": "2024-06-01",
                                                     "lead_days": 90}).json()
    assert [o["as_of"] for o in result["origins"]] == [dt.date(2024, m, 1).isoformat() for m in range(1, 7)]
    assert result["origins"][0]["site"] is None and set(result["rules"]) == {"1%", "2%", "3%", "4%", "5%"}
    # One model: its own scores and verdict are those of the whole backtest.
    assert list(result["models"]) == ["NVIDIA H100 80GB HBM3"]
    assert result["models"]["NVIDIA H100 80GB HBM3"]["verdict"] == result["verdict"]
    assert result["models"]["NVIDIA H100 80GB HBM3"]["mean_stock"] == result["mean_stock"]
