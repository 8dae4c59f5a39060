"""The REST API: CRUD through the services, the UI's filters, cursor pagination, lifecycle and placement
actions, error shapes, the OpenAPI schema and docs, and pinned query counts."""

import datetime as dt
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet import dispatch
from fleet import tasks as fleet_tasks
from fleet.models import AuditEvent, Job, JobStatus
from inventory import selectors, services
from inventory.models import (
    FirmwareObservation,
    Gpu,
    GpuModel,
    GpuMove,
    GpuStateChange,
    Hall,
    NvlinkDomain,
    PowerFeed,
    Rack,
    Row,
    Server,
    ServerPlatform,
    Site,
)
from tests import factories
from tests.acceptance.helpers import pass_run

pytestmark = pytest.mark.django_db
V1 = "/api/v1"


def _hall():
    return Hall.objects.get(pk=factories.rack().row.hall_id)


# resource, model, create payload (built inside the test), update payload
RESOURCES = [
    ("sites", Site, lambda: {"code": "fra9", "name": "Frankfurt 9", "pue": "1.25"}, {"name": "Frankfurt nine"}),
    ("halls", Hall, lambda: {"site": factories.site().pk, "name": "H1"}, {"name": "H2"}),
    ("rows", Row, lambda: {"hall": _hall().pk, "name": "R9"}, {"name": "R10"}),
    ("power-feeds", PowerFeed, lambda: {"site": factories.site().pk, "name": "PDU-A", "capacity_kw": "400.00"},
     {"capacity_kw": "450.00"}),
    ("racks", Rack, lambda: {"row": factories.rack().row_id, "name": "rack-x", "position": 7,
                             "power_feeds": [PowerFeed.objects.first().pk]}, {"power_budget_kw": "60.00"}),
    ("nvlink-domains", NvlinkDomain, lambda: {"site": factories.site().pk, "name": "nvl72-1"}, {"name": "nvl72-2"}),
    ("gpu-models", GpuModel, lambda: {"sku": "B200-SXM6-180GB", "name": "NVIDIA B200"}, {"tdp_w": 1000}),
    ("platforms", ServerPlatform, lambda: {"name": "HGX B200 8-GPU", "gpu_model": factories.gpu_model().pk},
     {"vendor": "Supermicro"}),
    ("servers", Server, lambda: {"hostname": "GPU-Node-9", "rack": factories.rack().pk, "rack_unit": 10},
     {"bmc_address": "10.0.0.9"}),
    ("gpus", Gpu, lambda: {"serial": "1650124099999", "uuid": "GPU-abcdef01-1111-2222-3333-444455556666",
                           "model": factories.gpu_model().pk}, {"asset_tag": "A-0001"}),
]


@pytest.mark.parametrize(("resource", "model", "create", "update"), RESOURCES, ids=[r[0] for r in RESOURCES])
def test_crud(api, resource, model, create, update):
    client = api("operator")
    created = client.post(f"{V1}/{resource}/", create(), format="json")
    assert created.status_code == 201, created.json()
    pk = created.json()["id"]
    assert client.get(f"{V1}/{resource}/{pk}/").json()["id"] == pk

    changed = client.patch(f"{V1}/{resource}/{pk}/", update, format="json")
    assert changed.status_code == 200, changed.json()
    for name, value in update.items():
        assert changed.json()[name] == value
    assert AuditEvent.objects.filter(object_id=str(pk), content_type__model=model._meta.model_name,
                                     action__in=["create", "update"]).count() == 2

    assert client.delete(f"{V1}/{resource}/{pk}/").status_code == 403  # operators do not delete
    deleted = api("admin").delete(f"{V1}/{resource}/{pk}/")
    if model is Gpu:  # a GPU always has history (its first state row)
        assert deleted.status_code == 409
        assert deleted.json()["protected_by"] == {"gpu state changes": 1}
        assert model.objects.filter(pk=pk).exists()
    else:
        assert deleted.status_code == 204
        assert not model.objects.filter(pk=pk).exists()


@pytest.mark.sqlite
def test_site_crud_and_errors(api):
    client = api("operator")
    assert client.post(f"{V1}/sites/", {"code": "ams1", "name": "Amsterdam"}, format="json").status_code == 201
    duplicate = client.post(f"{V1}/sites/", {"code": "ams1", "name": "Again"}, format="json")
    assert duplicate.status_code == 400 and "code" in duplicate.json()
    missing = client.post(f"{V1}/sites/", {"name": "No code"}, format="json")
    assert missing.json() == {"code": ["This field is required."], "request_id": missing["X-Request-ID"]}
    bad_pue = client.post(f"{V1}/sites/", {"code": "x1", "name": "X", "pue": "0.50"}, format="json")
    assert bad_pue.status_code == 400 and "non_field_errors" in bad_pue.json()
    site = Site.objects.get(code="ams1")
    services.record_create(model_class=Hall, actor=None, site=site, name="H1")
    refused = api("admin").delete(f"{V1}/sites/{site.pk}/")
    assert refused.status_code == 409
    assert refused.json()["protected_by"] == {"halls": 1} and "ams1" in refused.json()["detail"]


def test_gpu_representation_nests_model_server_and_site(api):
    server = factories.server(hostname="node-a")
    gpu = factories.gpu(server, slot=3, vbios_version="96.00.89.00.01")
    body = api("viewer").get(f"{V1}/gpus/{gpu.pk}/").json()
    assert body["model"] == {"id": gpu.model_id, "sku": "H100-SXM5-80GB", "name": "NVIDIA H100 80GB HBM3"}
    assert body["server"] == {"id": server.pk, "hostname": "node-a"}
    assert body["site"] == {"id": server.site_id, "code": server.site.code}
    assert body["rack"] == {"id": server.rack_id, "name": server.rack.name}
    assert (body["state"], body["module_id"], body["identity"]) == ("in_service", 3, gpu.serial)


def test_gpu_state_and_placement_are_read_only(api):
    gpu = factories.gpu(factories.server())
    client = api("operator")
    refused = client.patch(f"{V1}/gpus/{gpu.pk}/", {"state": "rma", "server": None}, format="json")
    assert refused.status_code == 400
    assert "transition" in refused.json()["state"][0] and "move" in refused.json()["server"][0]
    # Sending back what a GET returned (a round trip) is fine.
    body = client.get(f"{V1}/gpus/{gpu.pk}/").json()
    body.update(asset_tag="A-77", model=gpu.model_id)
    assert client.put(f"{V1}/gpus/{gpu.pk}/", body, format="json").status_code == 200
    gpu.refresh_from_db()
    assert (gpu.asset_tag, gpu.state) == ("A-77", "in_service")


def test_gpu_masked_serial_is_stored_as_raw(api):
    created = api("operator").post(f"{V1}/gpus/", {"serial": "0000000000000", "model": factories.gpu_model().pk},
                                   format="json").json()
    assert (created["serial"], created["serial_raw"], created["identity_masked"]) == (None, "0000000000000", True)


# --- filters and pagination ------------------------------------------------------------------------------


@pytest.fixture
def small_fleet():
    site_a, site_b = factories.site("fra1"), factories.site("ams1")
    rack_a, rack_b = factories.rack(site_a), factories.rack(site_b)
    node_a, node_b = factories.server(rack_a, hostname="fra1-n001"), factories.server(rack_b, hostname="ams1-n001")
    b1 = factories.gpu(node_b, vbios_version="92.00.45")
    services.record_update(obj=b1, actor=None, model=factories.gpu_model("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"))
    return {
        "a1": factories.gpu(node_a, vbios_version="96.00.89", asset_tag="T-1"),
        "a2": factories.gpu(node_a, vbios_version="96.00.99", state="drained"),
        "b1": b1,
        "spare": factories.gpu(state="spare"),
        "rack_a": rack_a, "node_a": node_a,
    }


def _ids(response):
    assert response.status_code == 200, response.json()
    return {row["id"] for row in response.json()["results"]}


@pytest.mark.parametrize(("query", "expect"), [
    ("site=fra1", {"a1", "a2"}),
    ("server=ams1-n001", {"b1"}),
    ("model=A100-SXM4-80GB", {"b1"}),
    ("state=drained&state=spare", {"a2", "spare"}),
    ("vbios=96.00.89", {"a1"}),
    ("unplaced=true", {"spare"}),
    ("q=fra1-n", {"a1", "a2"}),
    ("q=T-1", {"a1"}),
])
def test_gpu_filters(api, small_fleet, query, expect):
    assert _ids(api("viewer").get(f"{V1}/gpus/?{query}")) == {small_fleet[k].pk for k in expect}


def test_gpu_filters_by_row_rack_serial_and_uuid(api, small_fleet):
    client, a1 = api("viewer"), small_fleet["a1"]
    rack = small_fleet["rack_a"]
    assert _ids(client.get(f"{V1}/gpus/?rack={rack.pk}")) == {a1.pk, small_fleet["a2"].pk}
    assert _ids(client.get(f"{V1}/gpus/?row={rack.row_id}")) == {a1.pk, small_fleet["a2"].pk}
    assert _ids(client.get(f"{V1}/gpus/?q={a1.serial}")) == {a1.pk}
    assert _ids(client.get(f"{V1}/gpus/?q={a1.uuid.upper()}")) == {a1.pk}
    assert _ids(client.get(f"{V1}/gpus/?q={a1.uuid[4:]}")) == {a1.pk}
    bad = client.get(f"{V1}/gpus/?site=nowhere")
    assert bad.status_code == 400 and "site" in bad.json()


def test_server_and_small_filters(api, small_fleet):
    client = api("viewer")
    node_a = small_fleet["node_a"]
    assert _ids(client.get(f"{V1}/servers/?site=fra1")) == {node_a.pk}
    assert _ids(client.get(f"{V1}/servers/?q=ams1")) == {Server.objects.get(hostname="ams1-n001").pk}
    assert _ids(client.get(f"{V1}/racks/?site=fra1")) == {small_fleet["rack_a"].pk}
    assert _ids(client.get(f"{V1}/gpu-state-changes/?to_state=drained")) == set(
        GpuStateChange.objects.filter(to_state="drained").values_list("id", flat=True))
    assert len(_ids(client.get(f"{V1}/gpu-moves/?to_server=fra1-n001"))) == 2


@pytest.mark.sqlite
def test_cursor_pagination_walks_every_page(api):
    gpus = [factories.gpu() for _ in range(7)]
    client, seen, url, pages = api("viewer"), [], f"{V1}/gpus/?page_size=3", 0
    while url:
        body = client.get(url).json()
        assert "count" not in body
        seen += [row["id"] for row in body["results"]]
        url, pages = body["next"], pages + 1
    assert pages == 3 and seen == sorted(g.pk for g in gpus)


def test_history_lists_are_newest_first_and_read_only(api):
    gpu = factories.gpu(state="in_service")
    services.gpu_transition(gpu=gpu, to_state="drained", actor=None)
    client = api("viewer")
    rows = client.get(f"{V1}/gpu-state-changes/?gpu={gpu.pk}").json()["results"]
    assert [r["to_state"] for r in rows] == ["drained", "in_service"]
    for resource in ("gpu-state-changes", "gpu-moves", "firmware-observations", "audit-events", "jobs"):
        assert client.get(f"{V1}/{resource}/").status_code == 200
        assert api("admin").post(f"{V1}/{resource}/", {}, format="json").status_code == 405


# --- lifecycle and placement actions ---------------------------------------------------------------------


@pytest.mark.sqlite
def test_transition(api):
    gpu = factories.gpu(state="in_service")
    client = api("operator")
    ok = client.post(f"{V1}/gpus/{gpu.pk}/transition/", {"to_state": "drained", "reason": "XID 79"}, format="json")
    assert ok.status_code == 200 and ok.json()["state"] == "drained"
    assert GpuStateChange.objects.filter(gpu=gpu, to_state="drained", reason="XID 79").exists()

    illegal = client.post(f"{V1}/gpus/{gpu.pk}/transition/", {"to_state": "disposed"}, format="json")
    assert illegal.status_code == 400
    message = illegal.json()["non_field_errors"][0]
    assert "'drained'" in message and "'disposed'" in message
    unknown = client.post(f"{V1}/gpus/{gpu.pk}/transition/", {"to_state": "melted"}, format="json")
    assert unknown.status_code == 400 and "to_state" in unknown.json()
    assert client.post(f"{V1}/gpus/999999/transition/", {"to_state": "drained"}, format="json").status_code == 404


def test_bulk_transition_sync_by_ids_and_by_filter(api, small_fleet):
    client = api("operator")
    by_ids = client.post(f"{V1}/gpus/bulk-transition/", {
        "gpus": [small_fleet["a1"].pk, small_fleet["b1"].pk], "to_state": "drained", "reason": "maintenance"},
        format="json")
    assert by_ids.status_code == 200 and by_ids.json() == {"done": 2, "to_state": "drained"}

    # Back to service needs a passing diagnostic since the drain (the acceptance app's gate).
    pass_run(Gpu.objects.filter(site__code="fra1", state="drained").order_by("id"))
    by_filter = client.post(f"{V1}/gpus/bulk-transition/", {
        "gpus": {"site": "fra1", "state": "drained"}, "to_state": "in_service"}, format="json")
    assert by_filter.json() == {"done": 2, "to_state": "in_service"}
    assert set(Gpu.objects.filter(site__code="fra1").values_list("state", flat=True)) == {"in_service"}


@pytest.mark.parametrize(("gpus", "field_message"), [
    ({"sitee": "fra1"}, "Unknown filter sitee"),
    ({}, "at least one criterion"),
    ({"state": ""}, "at least one criterion"),
    ([999999], "No GPU has id 999999"),
    ("all", "list of GPU ids or a filter"),
])
def test_bulk_transition_refuses_a_vague_selection(api, small_fleet, gpus, field_message):
    response = api("operator").post(f"{V1}/gpus/bulk-transition/", {"gpus": gpus, "to_state": "drained"},
                                    format="json")
    assert response.status_code == 400
    assert field_message in str(response.json()["gpus"])
    assert not GpuStateChange.objects.filter(to_state="drained").exclude(gpu=small_fleet["a2"]).exists()


def test_bulk_transition_is_all_or_nothing(api, small_fleet):
    response = api("operator").post(f"{V1}/gpus/bulk-transition/", {
        "gpus": [small_fleet["a1"].pk, small_fleet["spare"].pk], "to_state": "drained"}, format="json")
    assert response.status_code == 400
    assert response.json()["non_field_errors"] == [
        f"{small_fleet['spare'].serial}: A GPU cannot go from 'spare' to 'drained'. "
        "From 'spare' it may go to: burn_in, decommissioning, rma."]
    assert Gpu.objects.get(pk=small_fleet["a1"].pk).state == "in_service"


def test_bulk_transition_above_the_limit_is_a_job(api, operator, settings, monkeypatch,
                                                  django_capture_on_commit_callbacks):
    settings.FLEET_BULK_SYNC_LIMIT, settings.FLEET_BULK_CHUNK = 3, 2
    gpus = [factories.gpu(state="in_service") for _ in range(5)]
    # The worker's chunk task runs here, synchronously, where the commit hook would enqueue it.
    monkeypatch.setattr(dispatch, "send", lambda name, *args: fleet_tasks.job_chunk_task(*args))
    client = api("operator")
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = client.post(f"{V1}/gpus/bulk-transition/", {"gpus": [g.pk for g in gpus], "to_state": "drained"},
                               format="json")
    assert response.status_code == 202 and len(callbacks) == 1  # one hook sends the job's 3 chunks
    job = response.json()
    assert (job["total"], job["kind"]) == (5, "gpu_bulk_transition")
    assert response["Location"] == job["url"] and job["url"].endswith(f"/api/v1/jobs/{job['id']}/")

    progress = client.get(job["url"]).json()
    assert (progress["status"], progress["done"], progress["percent"], progress["finished"]) == (
        JobStatus.SUCCEEDED, 5, 100, True)
    assert Job.objects.get(pk=job["id"]).created_by == operator
    assert set(Gpu.objects.values_list("state", flat=True)) == {"drained"}
    events = AuditEvent.objects.filter(action="transition")
    assert events.count() == 5 and set(events.values_list("source", "actor_name")) == {("worker", operator.username)}


def test_move(api, small_fleet):
    client, gpu = api("operator"), small_fleet["spare"]
    node_a = small_fleet["node_a"]
    moved = client.post(f"{V1}/gpus/{gpu.pk}/move/", {"server": "FRA1-N001", "pci_bus_id": "0000:9b:00",
                                                      "module_id": 5, "reason": "install"}, format="json")
    assert moved.status_code == 200, moved.json()
    body = moved.json()
    assert (body["server"]["hostname"], body["pci_bus_id"], body["module_id"]) == (
        "fra1-n001", "00000000:9B:00.0", 5)
    assert body["site"]["code"] == "fra1" and body["rack"]["id"] == small_fleet["rack_a"].pk
    assert GpuMove.objects.filter(gpu=gpu, kind="from_spares", to_server=node_a).exists()

    clash = client.post(f"{V1}/gpus/{small_fleet['b1'].pk}/move/", {"server": node_a.pk,
                                                                   "pci_bus_id": "00000000:9B:00.0"}, format="json")
    assert clash.status_code == 400 and "move that GPU out first" in clash.json()["pci_bus_id"][0]

    spares = client.post(f"{V1}/gpus/{gpu.pk}/move/", {"server": None, "to_spares": True}, format="json")
    assert spares.status_code == 200 and spares.json()["server"] is None and spares.json()["site"] is None
    assert GpuMove.objects.filter(gpu=gpu).first().kind == "to_spares"


@pytest.mark.parametrize(("payload", "field"), [
    ({"server": "no-such-host"}, "server"),
    ({"pci_bus_id": "18:00.0"}, "server"),
    ({"server": None, "pci_bus_id": "zz"}, "pci_bus_id"),
    ({"server": None, "module_id": -1}, "module_id"),
    ({"server": "node-x", "to_spares": True}, "to_spares"),
])
def test_move_field_errors(api, payload, field):
    gpu = factories.gpu(factories.server(hostname="node-x"))
    response = api("operator").post(f"{V1}/gpus/{gpu.pk}/move/", payload, format="json")
    assert response.status_code == 400 and field in response.json(), response.json()


# --- import: request validation (the import itself is tested with the importer) -------------------------


def test_import_request_validation(api, settings):
    from django.core.files.uploadedfile import SimpleUploadedFile

    client = api("operator")
    missing = client.post(f"{V1}/imports/", {"format": "csv"}, format="multipart")
    assert missing.status_code == 400 and "file" in missing.json()
    settings.FLEET_IMPORT_MAX_BYTES = 10
    big = client.post(f"{V1}/imports/", {"file": SimpleUploadedFile("x.csv", b"serial\n" * 10)},
                      format="multipart")
    assert big.status_code == 400 and "limit" in big.json()["file"][0]
    bad_format = client.post(f"{V1}/imports/", {"file": SimpleUploadedFile("x.csv", b"a"), "format": "xls"},
                             format="multipart")
    assert "format" in bad_format.json()


def test_service_validation_errors_become_field_messages():
    from django.core.exceptions import NON_FIELD_ERRORS, ValidationError

    from fleet.api import exception_handler

    as_dict = exception_handler(ValidationError({"name": "Too long.", NON_FIELD_ERRORS: ["Clash."]}), {})
    assert (as_dict.status_code, as_dict.data) == (400, {"name": ["Too long."], "non_field_errors": ["Clash."]})
    as_list = exception_handler(ValidationError(["One.", "Two."]), {})
    assert (as_list.status_code, as_list.data) == (400, {"non_field_errors": ["One.", "Two."]})


# --- auth, schema, docs ------------------------------------------------------------------------------------


def test_obtain_token(client, users):
    response = client.post(f"{V1}/auth/token/", {"username": "viewer-user", "password": "pw-for-tests-only"})
    assert response.status_code == 200
    token = response.json()["token"]
    assert client.get(f"{V1}/gpus/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 200
    assert client.post(f"{V1}/auth/token/", {"username": "viewer-user", "password": "wrong"}).status_code == 400


def test_session_auth(client, users):
    client.force_login(users["viewer"])
    assert client.get(f"{V1}/sites/").status_code == 200


def test_schema_is_openapi_3_with_the_gpu_paths(client, users):
    client.force_login(users["viewer"])  # the schema is for signed-in users (FLEET_PUBLIC_SCHEMA opens it)
    response = client.get("/api/schema/?format=json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    for path in ("/api/v1/gpus/", "/api/v1/gpus/{id}/", "/api/v1/gpus/{id}/transition/", "/api/v1/gpus/{id}/move/",
                 "/api/v1/gpus/bulk-transition/", "/api/v1/imports/", "/api/v1/audit-events/", "/api/v1/jobs/{id}/"):
        assert path in schema["paths"], path
    transition = schema["paths"]["/api/v1/gpus/{id}/transition/"]["post"]
    assert {"200", "400", "401", "403", "404"} <= set(transition["responses"])
    assert set(schema["paths"]["/api/v1/gpus/bulk-transition/"]["post"]["responses"]) >= {"200", "202", "400"}
    assert "409" in schema["paths"]["/api/v1/sites/{id}/"]["delete"]["responses"]


def test_swagger_ui_uses_only_local_assets(client, users):
    client.force_login(users["viewer"])
    response = client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets and all(url.startswith("/static/") for url in assets), assets
    assert "/api/schema/" in html


# --- query counts: one query per page for the data, whatever the page size ------------------------------


def _queries(client, url):
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def test_gpu_list_query_count_does_not_grow(api, django_assert_max_num_queries):
    client = api("viewer")
    server = factories.server()
    for slot in range(10):
        factories.gpu(server, slot=slot)
    ten = _queries(client, f"{V1}/gpus/")
    for _ in range(40):
        factories.gpu(factories.server())
    with django_assert_max_num_queries(3):  # token + user, the user's roles, the page
        body = client.get(f"{V1}/gpus/?page_size=50").json()
    assert len(body["results"]) == 50
    assert _queries(client, f"{V1}/gpus/?page_size=50") == ten


LISTS = ["sites", "halls", "rows", "power-feeds", "racks", "nvlink-domains", "gpu-models", "platforms", "servers",
         "gpus", "gpu-state-changes", "gpu-moves", "firmware-observations", "audit-events", "jobs"]


@pytest.mark.parametrize("resource", LISTS)
def test_every_list_is_one_query_per_page(api, operator, django_assert_max_num_queries, resource):
    client = api("viewer")
    now = timezone.now()
    for n in range(3):
        server = factories.server()
        gpu = factories.gpu(server)
        services.gpu_move(gpu=gpu, to_server=None, actor=operator, to_spares=True)
        domain = services.record_create(model_class=NvlinkDomain, actor=operator, site=server.site, name=f"nvl-{n}")
        services.record_update(obj=server, actor=operator, nvlink_domain=domain)
        services.record_create(model_class=FirmwareObservation, actor=operator, gpu=gpu, component="gpu_vbios",
                               version="96.00.89", source="api-test", first_seen=now, last_seen=now)
        Job.objects.create(kind="gpu_bulk_transition", total=1, created_by=operator)
    # token + user, the user's roles, the page (racks: + one prefetch of power feed ids)
    with django_assert_max_num_queries(4 if resource == "racks" else 3):
        assert len(client.get(f"{V1}/{resource}/").json()["results"]) >= 1


def test_api_root_lists_the_resources(api):
    body = api("viewer").get(f"{V1}/").json()
    assert set(LISTS) <= set(body) and body["gpus"].endswith("/api/v1/gpus/")


def test_server_list_query_count_does_not_grow(api, django_assert_max_num_queries):
    client = api("viewer")
    rack = factories.rack()
    for unit in range(10):
        factories.server(rack, rack_unit=unit + 1)
    ten = _queries(client, f"{V1}/servers/")
    for _ in range(40):
        factories.server()
    with django_assert_max_num_queries(3):
        assert len(client.get(f"{V1}/servers/").json()["results"]) == 50
    assert _queries(client, f"{V1}/servers/") == ten


# --- import ------------------------------------------------------------------------------------------------


def test_import_dry_run_then_apply(api):
    from pathlib import Path

    from django.core.files.uploadedfile import SimpleUploadedFile

    content = (Path(__file__).resolve().parent.parent / "fixtures/nvidia-smi-csv/h100-8gpu-units.csv").read_bytes()
    client = api("operator")

    def upload(**fields):
        return client.post(f"{V1}/imports/", {"file": SimpleUploadedFile("h100.csv", content), "server": "gpu-h100-01",
                                             **fields}, format="multipart")

    preview = upload(dry_run=True)
    assert preview.status_code == 200, preview.json()
    assert (preview.json()["created"], preview.json()["applied"], preview.json()["format"]) == (
        8, False, "nvidia-smi-csv")
    assert not Gpu.objects.exists()

    applied = upload(format="nvidia-smi-csv").json()
    assert (applied["created"], applied["applied"], applied["servers_created"]) == (8, True, ["gpu-h100-01"])
    assert Gpu.objects.filter(server__hostname="gpu-h100-01").count() == 8
    assert set(AuditEvent.objects.filter(action="create", content_type__model="gpu")
               .values_list("source", "actor_name")) == {("api", "operator-user")}
    assert upload().json()["unchanged"] == 8  # the same file again changes nothing


def test_import_errors_are_a_400_and_import_nothing(api):
    from django.core.files.uploadedfile import SimpleUploadedFile

    bad = b"serial,uuid,model,state\n1650000000001,,NVIDIA H100 80GB HBM3,melted\n"
    response = api("operator").post(f"{V1}/imports/", {"file": SimpleUploadedFile("bad.csv", bad)},
                                    format="multipart")
    assert response.status_code == 400
    body = response.json()
    assert body["applied"] is False and body["created"] == 0
    assert body["errors"] and {"file", "line", "field", "message"} <= set(body["errors"][0])
    assert body["errors"][0]["file"] == "bad.csv" and body["errors"][0]["line"] == 2
    assert not Gpu.objects.exists()


@pytest.mark.django_db
def test_gpu_fast_representation_equals_the_generic_one():
    """GpuSerializer writes its document out directly for speed; it must equal DRF's field-by-field one."""
    from rest_framework import serializers as drf_serializers

    from inventory.api.serializers import GpuSerializer

    server = factories.server()
    placed = factories.gpu(server, asset_tag="A-7", warranty_end=dt.date(2029, 1, 31))
    spare = factories.gpu(state="spare", serial=None, serial_raw="0000000000000", identity_masked=True)
    for gpu in selectors.gpu_list().filter(pk__in=[placed.pk, spare.pk]):
        fast = GpuSerializer().to_representation(gpu)
        generic = drf_serializers.ModelSerializer.to_representation(GpuSerializer(), gpu)
        assert fast == dict(generic)
        assert list(fast) == list(generic)  # same field order as the schema


@pytest.mark.django_db
def test_export_streams_the_filtered_gpus_as_fleet_csv_that_imports_back_unchanged(api):
    from inventory.imports import gpus_import

    server = factories.server()
    kept = [factories.gpu(server) for _ in range(3)]
    factories.gpu(state="spare")
    response = api("viewer").get("/api/v1/gpus/export/", {"server": server.hostname})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    body = b"".join(response.streaming_content)
    lines = body.decode().splitlines()
    assert lines[0].startswith("serial,uuid,model") and len(lines) == 4
    assert {g.serial for g in kept} == {line.split(",")[0] for line in lines[1:]}
    result = gpus_import(content=body, filename="export.csv", fmt="csv", actor=None)
    assert not result.errors and result.unchanged == 3 and (result.created, result.updated, result.moved) == (0, 0, 0)


@pytest.mark.django_db
def test_list_rows_from_values_equal_the_detail_documents(api):
    """The list builds documents from .values() rows, the detail from the instance: the same GPU reads the same."""
    server = factories.server()
    factories.gpu(server, asset_tag="A-9", warranty_end=dt.date(2030, 6, 30))
    factories.gpu(server, serial=None, uuid=None, serial_raw="REDACTED", identity_masked=True)
    factories.gpu(state="spare")
    client = api("viewer")
    listed = client.get("/api/v1/gpus/").json()["results"]
    assert len(listed) == 3 and listed[1]["identity"] == f"{server.hostname}:{listed[1]['pci_bus_id']}"
    for document in listed:
        assert client.get(f"/api/v1/gpus/{document['id']}/").json() == document
