"""Visible scheduler state: the server and rack pages, the API and the dashboard's attention list show the node's
state, reason and job count (from the beat refresh); without a scheduler the pages say so."""

import pytest
from django.urls import reverse

from inventory.scheduler.refresh import scheduler_refresh
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


def test_pages_and_api_show_node_state_reason_and_jobs(users, slurm, client, api):
    rack = factories.rack(factories.site())
    busy = factories.server(rack, hostname="gpu01.dc.example")
    taken = factories.server(rack, hostname="node-b")
    from fleet.audit import SYSTEM
    from inventory.services import record_update

    record_update(obj=taken, actor=SYSTEM, scheduler_node="gpu02")  # the per-server override
    job = slurm.sbatch("gpu01", 60)
    slurm.run("scontrol", "update", "NodeName=gpu02", "State=DRAIN", "Reason=DIMM errors, ticket 55")
    assert scheduler_refresh()["nodes"] == 4
    client.force_login(users["viewer"])
    page = client.get(reverse("server-detail", args=[busy.pk])).content.decode()
    assert "allocated" in page and str(job) in page
    page = client.get(reverse("server-detail", args=[taken.pk])).content.decode()
    assert "DIMM errors, ticket 55" in page and "Fleet will not resume it" in page and "(override)" in page
    page = client.get(reverse("rack-detail", args=[rack.pk])).content.decode()
    assert "1 job" in page and "drained" in page
    dashboard = client.get(reverse("dashboard")).content.decode()
    attention = dashboard[dashboard.index('id="scheduler-attention"'):]
    assert "gpu02" in attention and "DIMM errors" in attention and "gpu01" not in attention
    data = api("viewer").get(f"/api/v1/servers/{busy.pk}/").json()
    assert data["scheduler"]["state"] == "allocated" and data["scheduler"]["job_ids"] == [job]
    data = api("viewer").get(f"/api/v1/servers/{taken.pk}/").json()
    assert data["scheduler_node"] == "gpu02" and data["scheduler"]["drained_by"] == "other"
    assert data["scheduler"]["reason"] == "DIMM errors, ticket 55"
    record_update(obj=taken, actor=SYSTEM, scheduler_node="gpu03")  # re-mapped: the next refresh follows
    scheduler_refresh()
    data = api("viewer").get(f"/api/v1/servers/{taken.pk}/").json()
    assert data["scheduler"]["name"] == "gpu03" and data["scheduler"]["state"] == "idle"


def test_without_a_scheduler_the_pages_say_so(users, client, api, settings):
    settings.FLEET_SCHEDULER = ""
    server = factories.server(factories.rack(factories.site()))
    client.force_login(users["viewer"])
    assert "No scheduler configured" in client.get(reverse("server-detail", args=[server.pk])).content.decode()
    assert "(no scheduler)" in client.get(reverse("rack-detail", args=[server.rack_id])).content.decode()
    assert "No scheduler configured" in client.get(reverse("dashboard")).content.decode()
    assert api("viewer").get(f"/api/v1/servers/{server.pk}/").json()["scheduler"] is None
    assert scheduler_refresh() == {"nodes": 0}
