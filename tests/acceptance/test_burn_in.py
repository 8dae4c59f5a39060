"""A delivery's GPUs through burn-in together (API and page), progress per delivery with reasons, a failing GPU to
RMA with the failing run as evidence, and infant mortality from the fleet's own records."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from acceptance import services, stats
from acceptance.models import BurnInPolicy
from fleet.audit import SYSTEM
from inventory.models import Gpu
from procurement.models import GpuAsset, RmaCase
from procurement.services import orders
from procurement.services import rma as rma_services
from tests import factories
from tests.acceptance.helpers import doc4, pass_run
from tests.procurement import helpers as procurement

pytestmark = pytest.mark.django_db


@pytest.fixture
def delivery():
    po = procurement.order(quantity=4)
    rows = orders.receipt_rows(serials="\n".join(f"BI{i:04d}" for i in range(4)))[0]
    return orders.delivery_receive(order_line=procurement.line(po), site=factories.site(),
                                   received_on=dt.date(2026, 3, 1), rows=rows, actor=SYSTEM)


def gpus_of(delivery) -> list[Gpu]:
    return list(Gpu.objects.filter(asset__delivery=delivery).order_by("id"))


def test_delivery_through_burn_in_by_api(api, delivery):
    client = api("operator")
    url = f"/api/v1/acceptance/deliveries/{delivery.pk}/burn-in/"
    started = client.post(url, {"action": "start"}, format="json")
    assert started.status_code == 200 and len(started.json()["moved"]) == 4
    progress = client.get(url).json()
    assert progress["counts"] == {"passed": 0, "failed": 0, "pending": 4}
    assert "0 of 1 passing" in progress["gpus"][0]["reason"]
    gpus = gpus_of(delivery)
    document = doc4({i: "Fail" if i == 3 else "Pass" for i in range(4)}, serials={i: g.serial for i, g in
                                                                                 enumerate(gpus)})
    run = client.post("/api/v1/acceptance/diag-runs/", {"document": document, "level": 3}, format="json").json()
    progress = client.get(url).json()
    assert progress["counts"] == {"passed": 3, "failed": 1, "pending": 0}
    failed = next(r for r in progress["gpus"] if r["outcome"] == "failed")
    assert failed["gpu"] == gpus[3].pk and f"diagnostic run #{run['id']}: memory: fail" in failed["reason"]
    gate = client.get(f"/api/v1/acceptance/gate/{gpus[3].pk}/").json()
    assert gate["state"] == "burn_in_failed" and gate["failed"]
    done = client.post(url, {"action": "complete"}, format="json").json()
    assert sorted(done["moved"]) == [g.pk for g in gpus[:3]]
    assert {g.state for g in gpus_of(delivery)} == {"in_service", "burn_in_failed"}
    assert api("viewer").post(url, {"action": "start"}, format="json").status_code == 403
    assert client.post(url, {"action": "explode"}, format="json").status_code == 400
    assert client.get("/api/v1/acceptance/deliveries/999999/burn-in/").status_code == 404


def test_delivery_page_actions_and_rma_with_the_failing_run(client, users, delivery):
    client.force_login(users["operator"])
    page_url = f"/acceptance/deliveries/{delivery.pk}/"
    client.post(page_url + "action/", {"action": "start"})
    gpus = gpus_of(delivery)
    BurnInPolicy.objects.create(gpu_model=gpus[0].model, min_level=3, required_runs=1, min_hours=0)
    pass_run(gpus[:2], level=3)
    bad = services.diag_ingest(document=json.dumps(doc4({0: "Fail"}, serials={0: gpus[2].serial})), server=None,
                               level=3, actor=SYSTEM)
    html = client.get(page_url).content.decode()
    assert "2 passed" in html and "1 failed" in html and "1 pending" in html
    response = client.post(page_url + "action/", {"action": "complete", "reason": "burn-in done"}, follow=True)
    text = response.content.decode()
    assert "2 GPUs moved into service." in text and "stays: 0 of 1 passing level 3+" in text
    # The failed GPU goes to RMA with the failing run as its evidence.
    failed = Gpu.objects.get(pk=gpus[2].pk)
    assert failed.state == "burn_in_failed"
    assert 'id="send-to-rma"' in client.get(f"/gpus/{failed.pk}/").content.decode()
    case = rma_services.rma_open(gpu=failed, cause="hbm", opened_on=dt.date(2026, 3, 4), evidence_kind="note",
                                 evidence=f"burn-in: diagnostic run #{bad.pk} memory fail (error 95)", actor=SYSTEM)
    assert Gpu.objects.get(pk=failed.pk).state == "rma" and f"#{bad.pk}" in case.failure.evidence
    assert RmaCase.objects.filter(gpu=failed).exists()
    home = client.get("/acceptance/").content.decode()
    assert delivery.order.reference in home


def test_rack_progress_page(client, users):
    server = factories.server()
    gpus = [factories.gpu(server, state="received") for _ in range(2)]
    client.force_login(users["operator"])
    client.post(f"/acceptance/racks/{server.rack_id}/action/", {"action": "start"})
    assert {g.state for g in Gpu.objects.filter(pk__in=[g.pk for g in gpus])} == {"burn_in"}
    assert "2 pending" in client.get(f"/acceptance/racks/{server.rack_id}/").content.decode()
    client.force_login(users["viewer"])
    assert client.post(f"/acceptance/racks/{server.rack_id}/action/", {"action": "start"}).status_code == 403


def test_infant_mortality_from_the_fleet(api, client, users, delivery):
    gpus = gpus_of(delivery)
    services.burn_in_start(gpus=gpus, actor=SYSTEM)
    services.diag_ingest(document=json.dumps(doc4({0: "Fail"}, serials={0: gpus[0].serial})), server=None,
                         level=3, actor=SYSTEM)
    pass_run(gpus[1:], level=3)
    services.burn_in_complete(gpus=gpus_of(delivery), actor=SYSTEM)
    long_ago = dt.date(2025, 1, 1)
    GpuAsset.objects.filter(gpu__in=gpus[1:]).update(in_service_on=long_ago, batch="LOT-7")
    rma_services.failure_record(gpu=gpus[1], failed_on=long_ago + dt.timedelta(days=20), cause="gpu", actor=SYSTEM)
    report = stats.infant_mortality_report()  # as the page asks: everything recorded so far
    by_model = {r.key: r for r in report.by["model"]}
    rate = by_model[gpus[0].model.name]
    assert (rate.n, rate.k) == (4, 2) and rate.low < 0.5 < rate.high
    body = api("viewer").get("/api/v1/acceptance/infant-mortality/").json()
    assert body["units"] >= 1 and "batches" in body
    client.force_login(users["viewer"])
    assert "By model" in client.get("/acceptance/infant-mortality/").content.decode()
