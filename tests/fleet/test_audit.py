"""Every mutation path writes an audit event naming the actor, the source and the changed fields
(before and after); the audit-events API filters them; retention prunes old ones."""

import datetime as dt

import pytest
from django.utils import timezone

from fleet import tasks as fleet_tasks
from fleet.audit import SYSTEM, WORKER, SystemActor, audit_prune, audit_source, audit_write
from fleet.jobs import job_start
from fleet.models import AuditEvent, AuditSource
from inventory import services
from inventory.models import Gpu, GpuMove, PowerFeed, Site
from tests import factories

pytestmark = pytest.mark.django_db


def _event(action, obj):
    return AuditEvent.objects.filter(action=action, object_id=str(obj.pk),
                                     content_type__model=obj._meta.model_name).get()


# --- REST API ---------------------------------------------------------------------------------------------


def test_api_create_update_delete(api, users):
    client = api("operator")
    created = client.post("/api/v1/sites/", {"code": "osl1", "name": "Oslo"}, format="json").json()
    site = Site.objects.get(pk=created["id"])
    event = _event("create", site)
    assert (event.source, event.actor, event.actor_name) == ("api", users["operator"], "operator-user")
    assert event.changes["code"] == [None, "osl1"] and event.changes["pue"] == [None, "1.30"]

    client.patch(f"/api/v1/sites/{site.pk}/", {"name": "Oslo 1", "pue": "1.10"}, format="json")
    event = _event("update", site)
    assert event.source == "api"
    assert event.changes == {"name": ["Oslo", "Oslo 1"], "pue": ["1.30", "1.10"]}

    api("admin").delete(f"/api/v1/sites/{site.pk}/")
    event = _event("delete", site)
    assert (event.source, event.actor_name) == ("api", "admin-user")
    assert event.changes["code"] == ["osl1", None] and event.object_repr == "osl1"


def test_api_patch_without_changes_writes_nothing(api):
    site = factories.site("nop1")
    api("operator").patch(f"/api/v1/sites/{site.pk}/", {"name": site.name}, format="json")
    assert not AuditEvent.objects.filter(action="update").exists()


def test_api_transition_and_move(api, users):
    gpu = factories.gpu(state="in_service")
    server = factories.server(hostname="node-m")
    client = api("operator")
    client.post(f"/api/v1/gpus/{gpu.pk}/transition/", {"to_state": "drained", "reason": "XID 48"}, format="json")
    event = _event("transition", gpu)
    assert (event.source, event.actor, event.changes, event.message) == (
        "api", users["operator"], {"state": ["in_service", "drained"]}, "XID 48")

    client.post(f"/api/v1/gpus/{gpu.pk}/move/", {"server": "node-m", "pci_bus_id": "00000000:18:00.0"},
                format="json")
    event = _event("move", gpu)
    assert event.source == "api"
    assert event.changes == {"server_id": [None, server.pk], "pci_bus_id": ["", "00000000:18:00.0"]}


# --- Django admin -------------------------------------------------------------------------------------------


def _site_form(**values):
    return {"code": "adm1", "name": "Admin site", "timezone": "UTC", "electricity_price_kwh": "0.2000",
            "pue": "1.40", **values}


def test_admin_create_change_delete(client, users):
    client.force_login(users["admin"])
    assert client.post("/admin/inventory/site/add/", _site_form()).status_code == 302
    site = Site.objects.get(code="adm1")
    event = _event("create", site)
    assert (event.source, event.actor, event.changes["name"]) == ("admin", users["admin"], [None, "Admin site"])

    assert client.post(f"/admin/inventory/site/{site.pk}/change/", _site_form(name="Renamed")).status_code == 302
    event = _event("update", site)
    assert (event.source, event.actor_name, event.changes) == ("admin", "admin-user",
                                                               {"name": ["Admin site", "Renamed"]})

    assert client.post(f"/admin/inventory/site/{site.pk}/delete/", {"post": "yes"}).status_code == 302
    assert _event("delete", site).changes["code"] == ["adm1", None]


def test_admin_bulk_delete_is_audited_per_object(client, users):
    client.force_login(users["admin"])
    sites = [factories.site(f"bd{i}") for i in range(3)]
    response = client.post("/admin/inventory/site/", {"action": "delete_selected", "post": "yes",
                                                      "_selected_action": [s.pk for s in sites]})
    assert response.status_code == 302 and not Site.objects.filter(code__startswith="bd").exists()
    assert AuditEvent.objects.filter(action="delete", source="admin", actor_name="admin-user").count() == 3


def test_admin_refuses_to_delete_what_has_history(client, users):
    client.force_login(users["admin"])
    gpu = factories.gpu(factories.server())
    page = client.post(f"/admin/inventory/site/{gpu.site_id}/delete/", {"post": "yes"})
    assert page.status_code == 200 and "Cannot delete site" in page.content.decode()
    assert Site.objects.filter(pk=gpu.site_id).exists()
    assert not AuditEvent.objects.filter(action="delete").exists()


def test_admin_gpu_edit_is_an_update_and_a_recorded_move(client, users):
    client.force_login(users["operator"])
    gpu = factories.gpu(factories.server(hostname="node-old"), slot=1, asset_tag="A-1")
    target = factories.server(hostname="node-new")
    form = client.get(f"/admin/inventory/gpu/{gpu.pk}/change/").context["adminform"].form
    data = {name: value for name, value in form.initial.items() if value is not None and name in form.fields}
    data.update(asset_tag="A-2", server=target.pk, pci_bus_id="00000000:2A:00.0", module_id="2",
                serial=gpu.serial, uuid=gpu.uuid)
    assert "state" not in form.fields  # transitions only through the action
    response = client.post(f"/admin/inventory/gpu/{gpu.pk}/change/", data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    gpu.refresh_from_db()
    assert (gpu.asset_tag, gpu.server, gpu.site_id, gpu.module_id) == ("A-2", target, target.site_id, 2)
    assert _event("update", gpu).changes == {"asset_tag": ["A-1", "A-2"]}
    move = _event("move", gpu)
    assert (move.source, move.actor_name) == ("admin", "operator-user")
    assert GpuMove.objects.filter(gpu=gpu, kind="move", to_server=target).exists()


def test_admin_transition_action(client, users):
    client.force_login(users["operator"])
    gpus = [factories.gpu(state="in_service") for _ in range(2)]
    page = client.post("/admin/inventory/gpu/", {"action": "transition_selected",
                                                 "_selected_action": [g.pk for g in gpus]})
    assert page.status_code == 200 and "2 GPUs selected" in page.content.decode()
    client.post("/admin/inventory/gpu/", {"action": "transition_selected", "_selected_action": [g.pk for g in gpus],
                                          "apply": "1", "to_state": "drained", "reason": "swap"})
    events = AuditEvent.objects.filter(action="transition")
    assert set(events.values_list("source", "actor_name", "message")) == {("admin", "operator-user", "swap")}
    assert events.count() == 2

    refused = client.post("/admin/inventory/gpu/", {"action": "transition_selected", "apply": "1",
                                                    "_selected_action": [gpus[0].pk], "to_state": "disposed"},
                          follow=True)
    assert "'drained' to 'disposed'" in str(list(refused.context["messages"])[-1])


# --- workers and commands -----------------------------------------------------------------------------------


def test_worker_source(operator, settings):
    gpu = factories.gpu(state="in_service")
    with audit_source(AuditSource.WORKER):
        services.gpu_transition(gpu=gpu, to_state="drained", actor=WORKER)
    event = _event("transition", gpu)
    assert (event.source, event.actor, event.actor_name) == ("worker", None, "worker")

    # The real chunk task sets the source itself and acts for the user who started the job.
    others = [factories.gpu(state="in_service") for _ in range(2)]
    job = job_start(kind=services.BULK_TRANSITION_JOB, ids=[g.pk for g in others], actor=operator, chunk_size=10,
                    params={"to_state": "drained", "reason": "job"})
    fleet_tasks.job_chunk_task(job.pk, 0)
    for g in others:
        assert (_event("transition", g).source, _event("transition", g).actor) == ("worker", operator)


def test_cli_source():
    site = factories.site("cli1")
    with audit_source(AuditSource.CLI):
        services.record_update(obj=site, actor=SystemActor("cli:root"), name="From the shell")
    event = _event("update", site)
    assert (event.source, event.actor_name, event.changes["name"][1]) == ("cli", "cli:root", "From the shell")


# --- the audit-events API -------------------------------------------------------------------------------------


@pytest.fixture
def trail(api, users):
    client = api("operator")
    client.post("/api/v1/sites/", {"code": "f1", "name": "F1"}, format="json")
    gpu = factories.gpu(state="in_service")  # factories act as "system", source "system"
    client.post(f"/api/v1/gpus/{gpu.pk}/transition/", {"to_state": "drained"}, format="json")
    old = audit_write(actor=None, action="update", obj=gpu, at=timezone.now() - dt.timedelta(days=3))
    return {"gpu": gpu, "old": old}


def _ids(response):
    assert response.status_code == 200, response.json()
    return [row["id"] for row in response.json()["results"]]


@pytest.mark.parametrize(("query", "expect"), [
    ("action=transition", lambda t: AuditEvent.objects.filter(action="transition")),
    ("source=api", lambda t: AuditEvent.objects.filter(source="api")),
    ("actor_name=operator-user", lambda t: AuditEvent.objects.filter(actor_name="operator-user")),
    ("content_type=inventory.site", lambda t: AuditEvent.objects.filter(content_type__model="site")),
    ("content_type=inventory.gpu&action=transition", lambda t: AuditEvent.objects.filter(action="transition")),
    ("object_id={gpu}", lambda t: AuditEvent.objects.filter(object_id=str(t["gpu"].pk), content_type__model="gpu")),
    ("at_before={day_ago}", lambda t: AuditEvent.objects.filter(pk=t["old"].pk)),
    ("at_after={day_ago}", lambda t: AuditEvent.objects.exclude(pk=t["old"].pk)),
])
def test_audit_event_filters(api, trail, query, expect):
    day_ago = (timezone.now() - dt.timedelta(days=1)).isoformat().replace("+00:00", "Z")
    url = "/api/v1/audit-events/?" + query.format(gpu=trail["gpu"].pk, day_ago=day_ago)
    expected = list(expect(trail).order_by("-id").values_list("id", flat=True))
    assert expected and _ids(api("viewer").get(url)) == expected


def test_audit_event_representation_and_bad_filter(api, trail):
    client = api("viewer")
    row = client.get("/api/v1/audit-events/?action=transition").json()["results"][0]
    assert row["content_type"] == "inventory.gpu" and row["changes"] == {"state": ["in_service", "drained"]}
    assert (row["source"], row["actor_name"]) == ("api", "operator-user")
    bad = client.get("/api/v1/audit-events/?content_type=inventory.nothing")
    assert bad.status_code == 400 and "inventory.nothing" in bad.json()["content_type"][0]


# --- retention ----------------------------------------------------------------------------------------------


def _aged(days):
    gpu = Gpu.objects.first() or factories.gpu()
    return audit_write(actor=None, action="update", obj=gpu, at=timezone.now() - dt.timedelta(days=days))


def test_audit_prune():
    old, recent = _aged(40), _aged(5)
    assert audit_prune(older_than_days=30) == 1
    assert not AuditEvent.objects.filter(pk=old.pk).exists() and AuditEvent.objects.filter(pk=recent.pk).exists()
    assert audit_prune(older_than_days=0) == 0  # 0 keeps everything


def test_audit_prune_task_uses_the_retention_setting(settings):
    old, recent = _aged(40), _aged(5)
    settings.FLEET_AUDIT_RETENTION_DAYS = 0
    assert fleet_tasks.audit_prune_task() == 0 and AuditEvent.objects.filter(pk=old.pk).exists()
    settings.FLEET_AUDIT_RETENTION_DAYS = 30
    assert fleet_tasks.audit_prune_task() == 1
    assert list(AuditEvent.objects.filter(pk__in=[old.pk, recent.pk]).values_list("pk", flat=True)) == [recent.pk]


def test_admin_gpu_create_goes_through_the_gpu_service(client, users):
    client.force_login(users["operator"])
    server, model = factories.server(hostname="node-add"), factories.gpu_model()
    response = client.post("/admin/inventory/gpu/add/", {
        "serial": "1650000000042", "serial_raw": "", "uuid": "", "uuid_raw": "", "model": model.pk,
        "board_part_number": "", "asset_tag": "", "server": server.pk, "module_id": "1",
        "pci_bus_id": "00000000:18:00.0", "vbios_version": "", "inforom_image": "", "driver_version": ""})
    assert response.status_code == 302, response.context["adminform"].form.errors
    gpu = Gpu.objects.get(serial="1650000000042")
    assert (gpu.state, gpu.server, gpu.site_id) == ("received", server, server.site_id)
    assert gpu.state_changes.get().to_state == "received" and gpu.moves.get().kind == "install"
    event = _event("create", gpu)
    assert (event.source, event.actor_name) == ("admin", "operator-user")


@pytest.mark.django_db
def test_many_to_many_changes_are_audited(operator):
    """A rack's power feeds (many-to-many) show in its create and update events."""
    rack = factories.rack()
    created = AuditEvent.objects.filter(action="create", object_id=str(rack.pk), content_type__model="rack").get()
    first_feed = list(rack.power_feeds.values_list("pk", flat=True))
    assert created.changes["power_feeds"] == [None, first_feed]
    second = services.record_create(model_class=PowerFeed, actor=SYSTEM, site=rack.site, name="PDU-B")
    changes = services.record_update(obj=rack, actor=operator, power_feeds=[*first_feed, second.pk])
    assert changes == {"power_feeds": [first_feed, sorted([*first_feed, second.pk])]}
    event = AuditEvent.objects.filter(action="update", object_id=str(rack.pk), content_type__model="rack").get()
    assert event.changes == changes and event.actor_name == operator.username
