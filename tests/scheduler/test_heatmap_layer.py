"""The heatmap's "scheduler" layer: each GPU cell is its node's state as beat's refresh saw it (idle, mixed,
allocated, drained, down, ...), "not in the scheduler" for a server no node matched, "no scheduler" everywhere
without one; the layer is registered by inventory (which owns the scheduler state), the page offers it with a
legend, the API names its categories. Rows written directly, then rows written by the real refresh against the
test Slurm cluster."""

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from inventory.heatmap_layers import HEATMAP_LAYERS
from inventory.models import SchedulerNode
from inventory.scheduler.refresh import scheduler_refresh
from telemetry.selectors import heatmap_data, heatmap_layout_forget
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


def _cells(document):
    """{gpu id: the label of its cell}."""
    labels = [c["label"] for c in document["categories"]]
    return {gpu: labels[v] for gpu, v in zip(document["gpus"], document["values"], strict=True)}


def _servers(names):
    rack = factories.rack(factories.site())
    servers = {name: factories.server(rack, hostname=f"{name}.dc.example", rack_unit=2 + 2 * i)
               for i, name in enumerate(names)}
    gpus = {name: [factories.gpu(server) for _ in range(2)] for name, server in servers.items()}
    heatmap_layout_forget()
    return servers, gpus


def test_cells_show_their_nodes_state_from_the_rows(settings, client, users, api):
    settings.FLEET_SCHEDULER = "slurm"  # the layer reads rows only: no scheduler is asked
    servers, gpus = _servers(["n1", "n2", "n3", "n4", "n5", "n6"])
    now = timezone.now()
    for name, state in (("n1", "idle"), ("n2", "allocated"), ("n3", "mixed"), ("n4", "drained"), ("n5", "down")):
        SchedulerNode.objects.create(name=name, server=servers[name], state=state, refreshed_at=now,
                                     job_count=1 if state in ("allocated", "mixed") else 0)
    cells = _cells(heatmap_data(metric="scheduler"))
    expected = {"n1": "idle", "n2": "allocated", "n3": "mixed", "n4": "drained", "n5": "down",
                "n6": "not in the scheduler"}
    assert {name: {cells[g.pk] for g in gpus[name]} for name in expected} == {
        name: {label} for name, label in expected.items()}

    settings.FLEET_SCHEDULER = ""
    assert set(_cells(heatmap_data(metric="scheduler")).values()) == {"no scheduler"}

    assert HEATMAP_LAYERS["scheduler"].label == "Workload scheduler"
    client.force_login(users["viewer"])
    page = client.get(reverse("telemetry-heatmap"), {"metric": "scheduler"}).content.decode()
    assert 'data-metric="scheduler" data-layer>Workload scheduler</a>' in page
    assert 'id="hm-legend"' in page
    body = api("viewer").get(reverse("api:telemetry-heatmap"), {"metric": "scheduler"}).json()
    assert [c["label"] for c in body["categories"]][:7] == [
        "idle", "mixed", "allocated", "draining", "drained", "reserved", "down"]
    assert body["unit"] == "node state" and len(body["gpus"]) == 12
    assert api("viewer").get(reverse("api:telemetry-heatmap"), {"metric": "gpu_temp"}).json()["categories"] == []


def test_cells_follow_the_real_cluster_through_the_refresh(slurm):
    servers, gpus = _servers(["gpu01", "gpu02", "gpu03", "elsewhere"])
    slurm.sbatch("gpu01", 60)
    slurm.run("scontrol", "update", "NodeName=gpu02", "State=DRAIN", "Reason=fan replacement")
    slurm.run("scontrol", "update", "NodeName=gpu04", "State=DOWN", "Reason=no power")
    assert scheduler_refresh()["nodes"] == 4
    cells = _cells(heatmap_data(metric="scheduler"))
    assert {name: {cells[g.pk] for g in gs} for name, gs in gpus.items()} == {
        "gpu01": {"allocated"}, "gpu02": {"drained"}, "gpu03": {"idle"}, "elsewhere": {"not in the scheduler"}}
    assert SchedulerNode.objects.get(name="gpu04").state == "down"  # a node without a server: no cell
    assert SchedulerNode.objects.get(name="gpu01").refreshed_at > timezone.now() - dt.timedelta(minutes=1)
