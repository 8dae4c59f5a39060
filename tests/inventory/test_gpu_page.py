"""The GPU page with something in every panel (its own sections, telemetry, procurement, acceptance): what it
shows, and the queries it costs, pinned."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from acceptance import services as acceptance_services
from acceptance.models import BurnInPolicy
from fleet.audit import SYSTEM
from inventory import services
from inventory.models import FirmwareComponent, Gpu, NvlinkDomain
from procurement.services import orders, rma
from telemetry.health import health_evaluate
from tests import factories
from tests.acceptance.helpers import doc4, pass_run
from tests.procurement import helpers as procurement
from tests.telemetry.test_health import sample, write, xids

pytestmark = pytest.mark.django_db

# The GPU page of a GPU in burn-in with data in every panel, as a viewer: the session's user and its groups
# (2); the GPU with its model, server and NVLink domain, site, hall and row, rack, telemetry's latest sample and
# procurement's asset with its order line and order (1); the audit trail (1); XIDs and open health flags (2);
# RMA cases (1); verdicts, checks and the burn-in policy, which the gate judges by (3); state history, moves
# and observed firmware (3). (20 at the branch's base: the hall and the panels' rows read on their own, the
# open RMA case and the policy read twice, the gate's verdicts and checks read again.)
GPU_PAGE_QUERIES = 13


@pytest.fixture
def full_gpu(db):
    """A GPU bought on an order, placed in a server of an NVLink domain, in burn-in with a passing run and a
    check, with telemetry (an XID 79 and its open flag), a firmware observation, and the replacement on another
    board's RMA case."""
    now = timezone.now()
    rack = factories.rack(factories.site("pg1"), name="pg1-r07")
    domain = services.record_create(model_class=NvlinkDomain, actor=SYSTEM, site=rack.site, name="nvl-pg1-0")
    server = factories.server(rack, hostname="pg-node-01", rack_unit=4)
    services.record_update(obj=server, actor=SYSTEM, nvlink_domain=domain)
    po = procurement.order(quantity=2, reference="PO-PAGE-1")
    orders.delivery_receive(order_line=procurement.line(po), site=rack.site, received_on=dt.date(2026, 2, 1),
                            rows=orders.receipt_rows(serials="PG-OLD\nPG-GPU")[0], actor=SYSTEM)
    old, gpu = Gpu.objects.get(serial="PG-OLD"), Gpu.objects.get(serial="PG-GPU")
    case = rma.rma_open(gpu=old, cause="hbm", opened_on=dt.date(2026, 2, 10), vendor_case="SM-4711", actor=SYSTEM)
    rma.rma_ship(case=case, shipped_on=dt.date(2026, 2, 11), carrier="UPS", tracking="1Z999", actor=SYSTEM)
    rma.rma_replace(case=case, serial="PG-GPU", received_on=dt.date(2026, 2, 20), actor=SYSTEM)
    gpu = services.gpu_move(gpu=gpu, to_server=server, to_pci_bus_id="00000000:1B:00.0", to_module_id=3,
                            actor=SYSTEM, reason="racked for burn-in")
    services.firmware_observe(gpu=gpu, component=FirmwareComponent.GPU_VBIOS, version="96.00.99.00.01",
                              source="redfish", seen_at=now - dt.timedelta(hours=3), actor=SYSTEM)
    acceptance_services.burn_in_start(gpus=[Gpu.objects.get(pk=gpu.pk)], actor=SYSTEM)
    BurnInPolicy.objects.create(gpu_model=gpu.model, min_level=3, required_runs=2, min_hours=0,
                                required_checks=["nccl_allreduce"])
    run = acceptance_services.diag_ingest(document=json.dumps(doc4({0: "Pass"}, serials={0: "PG-GPU"})),
                                          server=server, level=3, source="test", actor=SYSTEM)
    acceptance_services.check_record(gpu=gpu, name="nccl_allreduce", passed=True, value=391.5, unit="GB/s",
                                     actor=SYSTEM)
    xids(gpu, 79, start=now - dt.timedelta(hours=2))
    write([sample(gpu, now - dt.timedelta(minutes=1), temp=67, power=612.0)])
    health_evaluate(now=now)
    return {"gpu": Gpu.objects.get(pk=gpu.pk), "old": old, "run": run, "server": server}


def _page(client, gpu: Gpu) -> str:
    response = client.get(reverse("gpu-detail", args=[gpu.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_the_page_shows_every_panel(client, users, full_gpu):
    client.force_login(users["viewer"])
    gpu, old = full_gpu["gpu"], full_gpu["old"]
    body = _page(client, gpu)
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body))
    # Inventory: identity, placement (hall and row through the GPU's row), state, history, moves, firmware, audit.
    assert "<h1><span class=\"mono\">PG-GPU</span>" in body and "Burn-in" in text
    hall = gpu.row.hall.name
    assert f"{hall} › <a href=\"{reverse('row-detail', args=[gpu.row_id])}\">{gpu.row.name}</a>" in body
    assert f'<a href="{reverse("rack-detail", args=[gpu.rack_id])}">pg1-r07</a>' in body
    assert f'<a href="{reverse("server-detail", args=[full_gpu["server"].pk])}">pg-node-01</a>' in body
    assert "nvl-pg1-0" in text and "00000000:1B:00.0" in text
    assert "racked for burn-in" in text and "burn-in started" in text
    assert "96.00.99.00.01" in text and "redfish" in text
    # Telemetry: the latest sample, the XID marker, the open flag.
    assert "67 °C" in text and "612 W" in text
    assert '"xid": 79' in body and "XID 79 (GPU fell off the bus)" in text
    # Procurement: the order and warranty of the board's asset, the case it replaced a board on.
    assert "Order PO-PAGE-1 · warranty Feb. 1, 2026 – Feb. 1, 2029 · support to Feb. 1, 2031" in text
    assert "SM-4711 Supermicro Feb. 10, 2026 Replacement received replaces GPU #" + str(old.pk) in text
    # Acceptance: the run, the check, the policy and the gate's verdict on them.
    run = full_gpu["run"]
    assert f'href="{reverse("acceptance-run", args=[run.pk])}"' in body
    assert f"#{run.pk} {timezone.localtime(run.ran_at):%Y-%m-%d %H:%M} " in text and " pg-node-01 3 4.2.3 Pass " in text
    assert "nccl_allreduce pass 391.5 GB/s" in text
    assert "Policy: level 3+, 2 passing run(s) over 0 h, checks nccl_allreduce." in text
    assert "Not yet 1 of 2 passing level 3+ diagnostic run(s) since burn-in started" in text


def test_the_failed_boards_page_names_its_replacement(client, users, full_gpu):
    client.force_login(users["viewer"])
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", _page(client, full_gpu["old"])))
    assert "SM-4711 Supermicro Feb. 10, 2026 Replacement received replaced by PG-GPU" in text


def test_the_page_costs_a_fixed_number_of_queries(client, users, full_gpu, django_assert_num_queries):
    client.force_login(users["viewer"])
    _page(client, full_gpu["gpu"])  # the content types and URL resolvers of a first visit
    with django_assert_num_queries(GPU_PAGE_QUERIES):
        _page(client, full_gpu["gpu"])


def test_more_history_costs_no_more_queries(client, users, full_gpu):
    """Rows in every list (a second run and check, more XIDs, another firmware version, state changes) cost
    the page no query per row."""
    client.force_login(users["viewer"])
    gpu = full_gpu["gpu"]
    _page(client, gpu)
    with CaptureQueriesContext(connection) as before:
        _page(client, gpu)
    now = timezone.now()
    pass_run([gpu], level=3)
    acceptance_services.check_record(gpu=gpu, name="nvbandwidth", passed=True, actor=SYSTEM)
    xids(gpu, 74, 79, start=now - dt.timedelta(minutes=50))
    services.firmware_observe(gpu=Gpu.objects.get(pk=gpu.pk), component=FirmwareComponent.GPU_VBIOS,
                              version="96.00.99.00.02", source="redfish", seen_at=now, actor=SYSTEM)
    with CaptureQueriesContext(connection) as after:
        _page(client, gpu)
    assert len(after) == len(before) == GPU_PAGE_QUERIES
