"""The burn-in progress of a delivery (page and API) reads a fixed number of queries, whatever the number of GPUs:
the gate's evidence is loaded for every GPU of the group at once (``gate.evaluate_many``)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from acceptance import gate, services
from acceptance.models import BurnInPolicy
from fleet.audit import SYSTEM
from inventory.models import Gpu
from procurement.services import orders
from tests import factories
from tests.acceptance.helpers import doc4, pass_run
from tests.procurement import helpers as procurement

pytestmark = pytest.mark.django_db

QUERIES = 11


def delivery_with_every_outcome(n: int, reference: str):
    """``n`` GPUs (a multiple of 5) in five equal parts: received; in burn-in with a passing run but no NCCL check
    (pending); in service; in burn-in and ready (run and check passed); failed burn-in."""
    po = procurement.order(quantity=n, price="10000", reference=reference)  # under the approval threshold
    rows = orders.receipt_rows(serials="\n".join(f"{reference}-{i:04d}" for i in range(n)))[0]
    delivery = orders.delivery_receive(order_line=procurement.line(po), site=factories.site(),
                                       received_on=dt.date(2026, 3, 1), rows=rows, actor=SYSTEM)
    gpus = list(Gpu.objects.filter(asset__delivery=delivery).order_by("id"))
    BurnInPolicy.objects.get_or_create(gpu_model=gpus[0].model, defaults={
        "min_level": 3, "required_runs": 1, "min_hours": 0, "required_tests": ["memory"],
        "required_checks": ["nccl_allreduce_busbw"]})
    q = n // 5
    services.burn_in_start(gpus=gpus[q:], actor=SYSTEM)
    pass_run(gpus[q:4 * q], level=3)
    for gpu in gpus[2 * q:4 * q]:
        services.check_record(gpu=gpu, name="nccl_allreduce_busbw", passed=True, actor=SYSTEM)
    failing = gpus[4 * q:]
    services.diag_ingest(document=json.dumps(doc4({i: "Fail" for i in range(q)}, serials={
        i: g.serial for i, g in enumerate(failing)})), server=None, level=3, actor=SYSTEM)
    moved = services.burn_in_complete(gpus=list(Gpu.objects.filter(pk__in=[g.pk for g in gpus[2 * q:3 * q]])),
                                      actor=SYSTEM)
    assert len(moved.moved) == q
    return delivery


def test_progress_page_and_api_queries_do_not_grow_with_the_delivery(client, users, api):
    small, large = delivery_with_every_outcome(5, "PO-S"), delivery_with_every_outcome(50, "PO-L")
    client.force_login(users["viewer"])
    viewer = api("viewer")
    pages, apis = [], []
    for delivery, n in ((small, 5), (large, 50)):
        with CaptureQueriesContext(connection) as page_queries:
            page = client.get(f"/acceptance/deliveries/{delivery.pk}/")
        html = page.content.decode()
        assert f"{2 * n // 5} passed" in html and f"{n // 5} failed" in html and f"{2 * n // 5} pending" in html
        pages.append(len(page_queries))
        with CaptureQueriesContext(connection) as api_queries:
            body = viewer.get(f"/api/v1/acceptance/deliveries/{delivery.pk}/burn-in/").json()
        assert body["counts"] == {"passed": 2 * n // 5, "failed": n // 5, "pending": 2 * n // 5}
        reasons = {r["reason"] for r in body["gpus"]}
        assert "no nccl_allreduce_busbw result" in reasons and "policy met: ready for service" in reasons
        apis.append(len(api_queries))
    # Sign-in (2), the delivery, its GPU ids and GPUs (3), GPUs that ever failed burn-in (1), and the gate's
    # evidence for the whole group (5: policies, failure reasons, verdicts, passed tests, latest checks).
    assert pages[0] == pages[1] == apis[0] == apis[1] == QUERIES, (pages, apis)


def test_gate_of_the_group_is_the_gate_of_each_gpu(django_assert_max_num_queries):
    """``evaluate_many`` answers what ``evaluate`` answers for each GPU on its own (the lifecycle asks that one)."""
    delivery = delivery_with_every_outcome(10, "PO-G")
    gpus = list(Gpu.objects.filter(asset__delivery=delivery).order_by("id"))
    with django_assert_max_num_queries(5):
        group = gate.evaluate_many(gpus)
    assert {pk: (s.met, s.failed, s.reasons, s.passing_runs) for pk, s in group.items()} == {
        g.pk: (s.met, s.failed, s.reasons, s.passing_runs) for g in gpus for s in [gate.evaluate(g)]}
    assert sorted({s.met for s in group.values()}) == [False, True]
