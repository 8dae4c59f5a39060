"""The nightly forecast on a real Celery worker process: sent by name through the dispatch seam, it brings the
failure history in step with the lifecycle (a GPU sent to RMA on the Health page becomes a failure with its
flag's evidence) and stores a forecast run. Also: the lifecycle sync on its own, and receiving servers."""

import datetime as dt
import time

import pytest
from django.conf import settings
from django.utils import timezone

from fleet import dispatch
from fleet.audit import SYSTEM
from inventory import services as inventory_services
from inventory.models import Server
from procurement.models import Failure, ForecastRun, GpuAsset, ServerAsset
from procurement.services import orders, sync
from tests import factories
from tests.procurement import helpers


def _fleet():
    site = factories.site("lon1")
    rack = factories.rack(site)
    server = factories.server(rack)
    gpus = [factories.gpu(server) for _ in range(4)]
    inventory_services.gpu_transition(gpu=gpus[0], to_state="drained", actor=SYSTEM)
    inventory_services.gpu_transition(gpu=gpus[0], to_state="rma", actor=SYSTEM, reason="XID 79 after reseat")
    return gpus


@pytest.mark.django_db
def test_lifecycle_sync_records_each_move_to_rma_once():
    gpus = _fleet()
    assert sync.history_sync(actor=SYSTEM) == {"assets": 4, "failures": 1}
    failure = Failure.objects.get()
    assert failure.gpu == gpus[0] and failure.state_change.to_state == "rma"
    assert failure.evidence == "XID 79 after reseat" and failure.site.code == "lon1"
    assert GpuAsset.objects.get(gpu=gpus[1]).in_service_on == timezone.localdate()
    assert sync.history_sync(actor=SYSTEM) == {"assets": 0, "failures": 0}


@pytest.mark.django_db
def test_a_platform_line_receives_servers():
    from inventory.models import ServerPlatform

    platform = ServerPlatform.objects.create(name="HGX B200 8-GPU")
    po = orders.order_create(vendor=helpers.vendor(), reference="PO-SRV", ordered_on=dt.date(2026, 1, 1),
                             promised_on=dt.date(2026, 2, 1), actor=SYSTEM,
                             lines=[{"platform": platform, "quantity": 2, "unit_price": "300000"}])
    orders.delivery_receive(order_line=po.lines.get(), site=factories.site(), received_on=dt.date(2026, 2, 3),
                            rows=orders.receipt_rows(serials="SRV-A\nSRV-B")[0], actor=SYSTEM)
    assert set(Server.objects.filter(platform=platform).values_list("serial", flat=True)) == {"SRV-A", "SRV-B"}
    assert ServerAsset.objects.filter(order_line__order=po).count() == 2


@pytest.mark.celery
@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (a real broker)")
@pytest.mark.django_db(transaction=True)
def test_forecast_task_runs_on_a_worker(celery_worker_process):
    _fleet()
    assert dispatch.send("procurement.tasks.forecast_compute_task")
    deadline = time.monotonic() + 90
    while not ForecastRun.objects.exists():
        assert celery_worker_process.poll() is None, celery_worker_process.stdout.read()
        assert time.monotonic() < deadline, "no forecast run from the worker"
        time.sleep(0.3)
    run = ForecastRun.objects.get()
    assert run.actor_name == "worker"
    assert run.forecasts.filter(scope="model").get().installed == 3  # one of four is in RMA
    assert Failure.objects.count() == 1  # the worker synced the lifecycle first
