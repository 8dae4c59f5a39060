"""The operator web UI: pages, roles, transitions (one and bulk), keyset pages, htmx partials, CSV
export, import preview/confirm, and the query count of the GPU list."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from fleet.audit import SYSTEM
from fleet.models import AuditEvent, Job, JobStatus
from inventory import services
from inventory.models import Gpu, GpuStateChange, ImportRun, Server
from inventory.views.gpus import filter_choices_forget
from tests import factories

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def fleet(db):
    """A small fleet: one site, a rack with two servers of GPUs, an unplaced server, a spare, a masked GPU."""
    site = factories.site("ams1")
    rack = factories.rack(site, name="ams1-r01")
    node_a = factories.server(rack, hostname="node-a", rack_unit=10)
    node_b = factories.server(rack, hostname="node-b", rack_unit=2)
    loose = services.record_create(model_class=Server, actor=SYSTEM, hostname="loose-1")  # seen, never racked
    gpus_a = [factories.gpu(node_a, serial=f"A{i:03d}") for i in range(4)]
    gpus_b = [factories.gpu(node_b, serial=f"B{i:03d}", state="drained") for i in range(2)]
    spare = factories.gpu(state="spare", serial="SPARE1")
    masked = factories.gpu(node_b, serial=None, serial_raw="0000000000000", identity_masked=True,
                           uuid=None, uuid_raw="GPU-00000000-0000-0000-0000-000000000000")
    return {"site": site, "rack": rack, "row": rack.row, "node_a": node_a, "node_b": node_b, "loose": loose,
            "gpus_a": gpus_a, "gpus_b": gpus_b, "spare": spare, "masked": masked}


@pytest.fixture
def as_role(client, make_user):
    def login(role):
        user = make_user(role, username=f"ui-{role}")
        client.force_login(user)
        return user

    return login


def _pages(fleet):
    job = Job.objects.create(kind="gpu_bulk_transition", total=10, done=4, params={"to_state": "drained"})
    return [
        reverse("dashboard"),
        reverse("gpu-list"),
        reverse("gpu-list") + "?state=in_service&site=ams1",
        reverse("gpu-detail", args=[fleet["gpus_a"][0].pk]),
        reverse("gpu-detail", args=[fleet["masked"].pk]),
        reverse("server-list"),
        reverse("server-list") + "?unplaced=true",
        reverse("server-detail", args=[fleet["node_a"].pk]),
        reverse("server-detail", args=[fleet["loose"].pk]),
        reverse("rack-detail", args=[fleet["rack"].pk]),
        reverse("row-detail", args=[fleet["row"].pk]),
        reverse("site-list"),
        reverse("site-detail", args=["ams1"]),
        reverse("audit-list"),
        reverse("audit-list") + "?source=system&action=create",
        reverse("job-detail", args=[job.pk]),
    ]


# --- access ---------------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_every_page_renders_for_a_viewer(client, as_role, fleet):
    as_role("viewer")
    for url in _pages(fleet):
        response = client.get(url)
        assert response.status_code == 200, url
        assert b'name="csrfmiddlewaretoken"' in response.content  # the logout form
        assert b"<form method=\"post\" action=\"/gpus/" not in response.content, url  # no write forms


@pytest.mark.sqlite
@pytest.mark.django_db
def test_anonymous_users_are_sent_to_the_login_page(client, fleet):
    for url in [*_pages(fleet), reverse("import-upload"), reverse("gpu-export")]:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login") + "?next="), url
    response = client.post(reverse("gpu-transition", args=[fleet["spare"].pk]), {"to_state": "burn_in"})
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert client.get(reverse("login")).status_code == 200


@pytest.mark.django_db
def test_an_htmx_request_without_a_session_redirects_the_whole_page(client):
    response = client.get(reverse("gpu-list"), **HTMX)
    assert response["HX-Redirect"].startswith("/login/?next=")


@pytest.mark.sqlite
@pytest.mark.django_db
def test_a_user_without_a_role_gets_403(client, as_role, fleet):
    as_role(None)
    for url in _pages(fleet):
        assert client.get(url).status_code == 403, url
    assert b"no Fleet role" in client.get(reverse("dashboard")).content


@pytest.mark.django_db
def test_viewers_cannot_post_or_import(client, as_role, fleet):
    as_role("viewer")
    gpu = fleet["gpus_a"][0]
    assert client.post(reverse("gpu-transition", args=[gpu.pk]), {"to_state": "drained"}).status_code == 403
    assert client.post(reverse("gpu-bulk-transition"), {"gpu": [gpu.pk], "to_state": "drained",
                                                        "scope": "selected"}).status_code == 403
    assert client.get(reverse("import-upload")).status_code == 403
    gpu.refresh_from_db()
    assert gpu.state == "in_service"
    page = client.get(reverse("gpu-detail", args=[gpu.pk])).content.decode()
    assert f'action="/gpus/{gpu.pk}/transition/"' not in page and "<select" not in page
    listing = client.get(reverse("gpu-list")).content.decode()
    assert 'name="gpu"' not in listing and "Bulk transition" not in listing
    assert ">Import<" not in listing  # no Import link in the nav


@pytest.mark.django_db
def test_logout_is_a_post(client, as_role):
    as_role("viewer")
    assert client.post(reverse("logout")).status_code == 302
    assert client.get(reverse("dashboard")).status_code == 302


# --- one GPU ---------------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_gpu_page_shows_identity_placement_and_history(client, as_role, fleet):
    as_role("operator")
    masked = fleet["masked"]
    page = client.get(reverse("gpu-detail", args=[masked.pk])).content.decode()
    assert "masked identity" in page and "0000000000000" in page and "GPU-00000000-0000" in page
    assert "node-b" in page and "ams1-r01" in page and masked.pci_bus_id in page
    spare = client.get(reverse("gpu-detail", args=[fleet["spare"].pk])).content.decode()
    options = re.findall(r'<option value="(\w+)"', spare)
    assert options == ["burn_in", "rma", "decommissioning"]  # lifecycle.allowed_targets("spare")
    assert client.get(reverse("gpu-detail", args=[999999])).status_code == 404


@pytest.mark.django_db
def test_operator_transition_changes_state_with_a_ui_audit_event(client, as_role, fleet):
    operator = as_role("operator")
    gpu = fleet["gpus_a"][0]
    response = client.post(reverse("gpu-transition", args=[gpu.pk]),
                           {"to_state": "drained", "reason": "XID 79 on job 1234"}, follow=True)
    assert response.redirect_chain[-1][0] == reverse("gpu-detail", args=[gpu.pk])
    gpu.refresh_from_db()
    assert gpu.state == "drained"
    change = GpuStateChange.objects.filter(gpu=gpu).first()
    assert (change.from_state, change.to_state, change.actor_name, change.reason) == (
        "in_service", "drained", operator.username, "XID 79 on job 1234")
    event = AuditEvent.objects.get(object_id=str(gpu.pk), action="transition")
    assert (event.source, event.actor_id, event.changes) == ("ui", operator.pk, {"state": ["in_service", "drained"]})
    page = response.content.decode()
    assert "XID 79 on job 1234" in page and "In service → Drained" in page


@pytest.mark.django_db
def test_illegal_transition_is_a_form_error_naming_both_states(client, as_role, fleet):
    as_role("operator")
    gpu = fleet["gpus_a"][0]
    response = client.post(reverse("gpu-transition", args=[gpu.pk]), {"to_state": "disposed", "reason": "x"})
    assert response.status_code == 200
    errors = response.context["form"].errors["to_state"]
    assert "'in_service'" in errors[0] and "'disposed'" in errors[0]
    assert "A GPU cannot go from" in response.content.decode()
    gpu.refresh_from_db()
    assert gpu.state == "in_service"
    assert not AuditEvent.objects.filter(object_id=str(gpu.pk), action="transition").exists()
    bad = client.post(reverse("gpu-transition", args=[gpu.pk]), {"to_state": "melted"})
    assert "melted" in bad.context["form"].errors["to_state"][0]


# --- bulk ------------------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_bulk_transition_of_selected_gpus_runs_now(client, as_role, fleet):
    as_role("operator")
    ids = [g.pk for g in fleet["gpus_a"][:3]]
    response = client.post(reverse("gpu-bulk-transition"), {"gpu": ids, "to_state": "drained", "scope": "selected",
                                                             "reason": "rack maintenance", "filter": "site=ams1"},
                           follow=True)
    assert response.redirect_chain[-1][0] == reverse("gpu-list") + "?site=ams1"
    assert "3 GPUs moved to Drained." in response.content.decode()
    assert set(Gpu.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"drained"}
    assert Gpu.objects.get(pk=fleet["gpus_a"][3].pk).state == "in_service"
    assert set(AuditEvent.objects.filter(action="transition").values_list("source", flat=True)) == {"ui"}


@pytest.mark.django_db
def test_bulk_transition_with_an_illegal_gpu_changes_nothing_and_says_why(client, as_role, fleet):
    as_role("operator")
    ids = [fleet["gpus_a"][0].pk, fleet["spare"].pk]  # spare -> drained is not allowed
    response = client.post(reverse("gpu-bulk-transition"), {"gpu": ids, "to_state": "drained", "scope": "selected"},
                           follow=True)
    page = response.content.decode()
    assert "Nothing was changed" in page and "SPARE1" in page and "&#x27;spare&#x27;" in page
    assert not GpuStateChange.objects.filter(to_state="drained", gpu_id__in=ids).exists()
    empty = client.post(reverse("gpu-bulk-transition"), {"to_state": "drained", "scope": "selected"}, follow=True)
    assert "Select at least one GPU" in empty.content.decode()


@pytest.mark.django_db
def test_bulk_transition_above_the_limit_becomes_a_job_with_progress(client, as_role, fleet, settings, eager_celery,
                                                                     django_capture_on_commit_callbacks):
    settings.FLEET_BULK_SYNC_LIMIT = 3
    settings.FLEET_BULK_CHUNK = 2
    as_role("operator")
    # "All GPUs matching the filter": the four in_service GPUs of node-a.
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("gpu-bulk-transition"), {
            "to_state": "drained", "scope": "filter", "filter": "server=node-a&state=in_service", "reason": "drain"})
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("job-detail", args=[job.pk])
    assert (job.status, job.total, job.done, job.failed) == (JobStatus.SUCCEEDED, 4, 4, 0)
    assert set(Gpu.objects.filter(server=fleet["node_a"]).values_list("state", flat=True)) == {"drained"}
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "4 of 4 done" in page and 'aria-valuenow="100"' in page and "every 1s" not in page


@pytest.mark.django_db
def test_job_progress_partial_polls_until_the_job_ends(client, as_role):
    as_role("viewer")
    job = Job.objects.create(kind="gpu_bulk_transition", total=1000, done=250, status=JobStatus.RUNNING,
                             params={"to_state": "drained"})
    partial = client.get(reverse("job-detail", args=[job.pk]), **HTMX).content.decode()
    assert partial.lstrip().startswith('<section class="panel" id="job-progress"')
    assert 'hx-trigger="every 1s"' in partial and "250 of 1000 done" in partial and "<nav" not in partial
    job.status, job.done = JobStatus.SUCCEEDED, 1000
    job.save()
    partial = client.get(reverse("job-detail", args=[job.pk]), **HTMX).content.decode()
    assert "hx-trigger" not in partial and "Succeeded" in partial


@pytest.mark.django_db
def test_bulk_on_the_whole_fleet_needs_a_filter(client, as_role, fleet):
    as_role("operator")
    response = client.post(reverse("gpu-bulk-transition"), {"to_state": "drained", "scope": "filter", "filter": ""},
                           follow=True)
    assert "Set a valid filter first" in response.content.decode()
    bad = client.post(reverse("gpu-bulk-transition"), {"to_state": "drained", "scope": "filter",
                                                       "filter": "site=nowhere"}, follow=True)
    assert "Set a valid filter first" in bad.content.decode()
    assert not GpuStateChange.objects.filter(to_state="drained", actor_name="ui-operator").exists()


# --- the GPU list ----------------------------------------------------------------------------------------

def _ids(response):
    return [gpu["id"] for gpu in response.context["page"].items]


@pytest.mark.django_db
@pytest.mark.parametrize("sort", ["id", "-id", "serial", "state"])
def test_keyset_pages_walk_every_gpu_once(client, as_role, fleet, settings, sort):
    settings.FLEET_PAGE_SIZE = 4
    as_role("viewer")
    extra = [factories.gpu(state=state, serial=serial) for state, serial in
             [("rma", "C1"), ("spare", None), ("in_service", "A001x"), ("received", None)]]
    assert extra
    url, seen, pages = reverse("gpu-list") + f"?sort={sort}", [], 0
    while url:
        response = client.get(url)
        seen += _ids(response)
        pages += 1
        next_link = re.search(r'rel="next" href="([^"]+)"', response.content.decode())
        url = next_link.group(1).replace("&amp;", "&") if next_link else None
    expected = Gpu.objects.order_by("id").values_list("id", flat=True)
    assert len(seen) == len(set(seen)) == Gpu.objects.count() and set(seen) == set(expected)
    assert pages == -(-Gpu.objects.count() // 4)
    if sort == "-id":
        assert seen == sorted(seen, reverse=True)
    if sort == "serial":
        by_pk = dict(Gpu.objects.values_list("pk", "serial"))
        real = [by_pk[pk] for pk in seen if by_pk[pk] is not None]
        assert real == sorted(real) and all(by_pk[pk] is None for pk in seen[len(real):])  # NULLs last


@pytest.mark.django_db
def test_a_bad_cursor_gives_the_first_page(client, as_role, fleet):
    as_role("viewer")
    first = _ids(client.get(reverse("gpu-list")))
    assert _ids(client.get(reverse("gpu-list") + "?after=abc")) == first
    by_serial = _ids(client.get(reverse("gpu-list") + "?sort=serial"))
    assert _ids(client.get(reverse("gpu-list") + "?sort=serial&after=forged:token")) == by_serial


@pytest.mark.django_db
def test_filters(client, as_role, fleet):
    as_role("viewer")
    url = reverse("gpu-list")

    def ids(query):
        return set(_ids(client.get(f"{url}?{query}")))

    assert ids("state=drained") == {g.pk for g in fleet["gpus_b"]}
    assert ids("state=drained&state=spare") == {g.pk for g in fleet["gpus_b"]} | {fleet["spare"].pk}
    assert ids("q=A002") == {fleet["gpus_a"][2].pk}
    assert ids("q=node-a") == {g.pk for g in fleet["gpus_a"]}  # hostname prefix
    assert ids(f"rack={fleet['rack'].pk}&state=in_service") == {g.pk for g in fleet["gpus_a"]} | {fleet["masked"].pk}
    assert ids("site=ams1&masked=true") == {fleet["masked"].pk}
    assert ids("unplaced=true") == {fleet["spare"].pk}
    assert ids("server=node-b") == {g.pk for g in fleet["gpus_b"]} | {fleet["masked"].pk}
    response = client.get(f"{url}?site=nowhere")
    assert _ids(response) == [] and "Select a valid choice" in response.content.decode()


@pytest.mark.django_db
def test_htmx_gets_only_the_table_partial(client, as_role, fleet):
    as_role("operator")
    full = client.get(reverse("gpu-list") + "?state=drained")
    assert b"<html" in full.content and b'id="gpu-filters"' in full.content and b'id="gpu-table"' in full.content
    partial = client.get(reverse("gpu-list") + "?state=drained", **HTMX)
    body = partial.content.decode()
    assert body.lstrip().startswith('<div class="panel flush" id="gpu-table">')
    assert "<html" not in body and "gpu-filters" not in body and "<nav" not in body
    assert "B000" in body and "A000" not in body
    assert 'name="gpu"' in body and "Bulk transition" in body  # operator tools come with the table
    assert "HX-Request" in partial["Vary"]
    restore = client.get(reverse("gpu-list") + "?state=drained", HTTP_HX_HISTORY_RESTORE_REQUEST="true", **HTMX)
    assert b"<html" in restore.content  # back button after a cache miss gets the whole page


@pytest.mark.django_db
def test_links_keep_the_filter_and_work_without_javascript(client, as_role, fleet, settings):
    settings.FLEET_PAGE_SIZE = 2
    as_role("viewer")
    page = client.get(reverse("gpu-list") + "?site=ams1").content.decode()
    next_link = re.search(r'rel="next" href="([^"]+)" hx-get="([^"]+)"', page)
    assert next_link.group(1) == next_link.group(2) and "site=ams1" in next_link.group(1)
    assert 'hx-push-url="true"' in page
    second = client.get(next_link.group(1).replace("&amp;", "&")).content.decode()
    assert "« First page</a>" in second and 'href="/gpus/?site=ams1"' in second
    assert 'href="/gpus/export.csv?site=ams1"' in page


def _gpu_queries(captured):
    return [q["sql"] for q in captured if 'FROM "inventory_gpu"' in q["sql"]]


@pytest.mark.django_db
@pytest.mark.parametrize("headers", [{}, HTMX], ids=["full-page", "htmx-partial"])
def test_gpu_list_query_count_does_not_grow_with_rows(client, as_role, django_assert_max_num_queries, headers):
    """Pinned: user + user's groups (roles) + ONE query for the table (the session comes from the cache
    after the first request); the full page adds the site and model choices of the filter form when its
    process has not read them in the last 30 s. 5 GPUs or 60, the same number."""
    as_role("operator")
    server = factories.server()
    for i in range(5):
        factories.gpu(server, slot=i % 8 + 1, pci_bus_id=f"0000{i:04X}:18:00.0")
    expected = 3 if headers else 5
    url = reverse("gpu-list")
    filter_choices_forget()
    with django_assert_max_num_queries(expected), CaptureQueriesContext(connection) as small:
        assert len(_ids(client.get(url, **headers))) == 5
    for i in range(5, 60):
        factories.gpu(factories.server() if i % 8 == 0 else server, slot=i % 8 + 1,
                      pci_bus_id=f"0000{i:04X}:18:00.0")
    filter_choices_forget()
    with django_assert_max_num_queries(expected), CaptureQueriesContext(connection) as large:
        response = client.get(url, **headers)
    assert len(response.context["page"].items) == 50
    assert len(small) == len(large) == expected
    with CaptureQueriesContext(connection) as warm:  # the choices were read a moment ago
        client.get(url, **headers)
    assert len(warm) == 3
    table = _gpu_queries(large)
    assert len(table) == 1 and "LIMIT 51" in table[0] and "OFFSET" not in table[0] and "COUNT(" not in table[0]
    # Next page: still one table query, a keyset range.
    with CaptureQueriesContext(connection) as nxt:
        client.get(url + f"?after={response.context['page'].next_after}", **headers)
    table = _gpu_queries(nxt)
    assert len(table) == 1 and '"inventory_gpu"."id" >' in table[0] and "OFFSET" not in table[0]
    assert len(nxt) == len(warm)


# --- CSV export ------------------------------------------------------------------------------------------

@pytest.mark.sqlite
@pytest.mark.django_db
def test_csv_export_streams_the_filtered_gpus(client, as_role, fleet):
    as_role("viewer")
    response = client.get(reverse("gpu-export") + "?state=drained")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].startswith('attachment; filename="fleet-gpus-')
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    header, body = rows[0], rows[1:]
    assert header[0] == "serial" and "state" in header
    assert sorted(r[0] for r in body) == ["B000", "B001"]
    assert {r[header.index("state")] for r in body} == {"drained"}
    assert {r[header.index("hostname")] for r in body} == {"node-b"}


# --- other pages -----------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_dashboard_counts_and_attention_links(client, as_role, fleet):
    as_role("viewer")
    page = client.get(reverse("dashboard")).content.decode()
    assert "8 GPUs in the fleet" in page
    assert 'href="/gpus/?state=drained"' in page and 'href="/gpus/?masked=true"' in page
    assert 'href="/gpus/?model=H100-SXM5-80GB"' in page and 'href="/gpus/?site=ams1"' in page
    assert "loose-1" in page  # a server that needs a rack position


@pytest.mark.django_db
def test_rack_elevation_and_server_pages(client, as_role, fleet):
    as_role("viewer")
    rack = client.get(reverse("rack-detail", args=[fleet["rack"].pk]))
    units = {u.unit: u for u in rack.context["elevation"].units}
    assert units[17].server.hostname == "node-a" and units[17].span == 8 and units[10].covered  # 8U at U10
    assert units[9].server.hostname == "node-b" and units[1].server is None and not units[1].covered
    page = rack.content.decode()
    assert page.index("U48") < page.index("node-a") < page.index("node-b") and "PDU-" in page
    loose = client.get(reverse("server-detail", args=[fleet["loose"].pk])).content.decode()
    assert "needs a rack position" in loose
    servers = client.get(reverse("server-list") + "?unplaced=true")
    assert [s.hostname for s in servers.context["page"].items] == ["loose-1"]
    site = client.get(reverse("site-detail", args=["ams1"])).content.decode()
    assert fleet["row"].name in site and "In service" in site


@pytest.mark.django_db
def test_audit_log_filters_and_pages(client, as_role, fleet, settings):
    operator = as_role("operator")
    services.gpu_transition(gpu=fleet["spare"], to_state="burn_in", actor=SYSTEM, reason="seed")
    client.post(reverse("gpu-transition", args=[fleet["gpus_a"][0].pk]), {"to_state": "drained", "reason": "r"})
    ui = client.get(reverse("audit-list") + "?source=ui")
    assert [row["event"].actor_name for row in ui.context["rows"]] == [operator.username]
    assert "in_service" in ui.content.decode() and "drained" in ui.content.decode()
    settings.FLEET_PAGE_SIZE = 5
    url, seen = reverse("audit-list"), []
    while url:
        response = client.get(url)
        seen += [row["event"].pk for row in response.context["rows"]]
        nxt = re.search(r'rel="next" href="([^"]+)"', response.content.decode())
        url = nxt.group(1).replace("&amp;", "&") if nxt else None
    assert seen == sorted(seen, reverse=True) and len(seen) == AuditEvent.objects.count()
    partial = client.get(reverse("audit-list") + "?action=transition", **HTMX).content.decode()
    assert partial.lstrip().startswith('<div class="panel flush" id="audit-table">')


# --- import ----------------------------------------------------------------------------------------------

def _upload(client, content: bytes, name="gpus.csv", **fields):
    upload = SimpleUploadedFile(name, content, content_type="text/csv")
    return client.post(reverse("import-upload"), {"file": upload, "fmt": "csv", "server_hint": "", **fields})


@pytest.mark.django_db
def test_import_upload_preview_confirm(client, as_role, fleet):
    as_role("operator")
    content = (b"serial,model,hostname,module_id,pci_bus_id\n"
               b"IMP0001,NVIDIA H100 80GB HBM3,node-new-1,1,00000000:18:00.0\n"
               b"IMP0002,NVIDIA H100 80GB HBM3,node-new-1,2,00000000:2A:00.0\n")
    response = _upload(client, content)
    run = ImportRun.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("import-preview", args=[run.pk])
    preview = client.get(response["Location"])
    page = preview.content.decode()
    assert run.summary["created"] == 2 and not run.summary["errors"] and "IMP0002" in page and "Confirm import" in page
    assert not Gpu.objects.filter(serial__startswith="IMP").exists()  # a preview changes nothing
    confirmed = client.post(reverse("import-preview", args=[run.pk]), follow=True)
    assert "Imported gpus.csv: 2 created" in confirmed.content.decode()
    run.refresh_from_db()
    assert run.status == ImportRun.Status.APPLIED
    assert set(Gpu.objects.filter(serial__startswith="IMP").values_list("server__hostname", flat=True)) == {
        "node-new-1"}
    assert Server.objects.get(hostname="node-new-1").rack_id is None
    again = client.post(reverse("import-preview", args=[run.pk]), follow=True)
    assert "already confirmed" in again.content.decode()


@pytest.mark.django_db
def test_import_with_errors_cannot_be_confirmed(client, as_role, fleet):
    as_role("operator")
    _upload(client, b"serial,model,hostname,module_id,pci_bus_id\nBAD1,NVIDIA H100 80GB HBM3,node-x,1,not-a-bus\n")
    run = ImportRun.objects.get()
    page = client.get(reverse("import-preview", args=[run.pk])).content.decode()
    assert run.summary["errors"] and 'id="import-errors"' in page and "Confirm import" not in page
    response = client.post(reverse("import-preview", args=[run.pk]), follow=True)
    assert "found errors" in response.content.decode()
    assert not Gpu.objects.filter(serial="BAD1").exists()


@pytest.mark.django_db
def test_import_rejects_a_file_over_the_limit(client, as_role, settings):
    as_role("operator")
    settings.FLEET_IMPORT_MAX_BYTES = 10
    response = _upload(client, b"serial,model\nX,Y\n")
    assert response.status_code == 200 and "imports are limited to 10" in response.content.decode()
    assert not ImportRun.objects.exists()


@pytest.mark.django_db
def test_import_nvidia_smi_xml_with_a_server_hostname(client, as_role):
    as_role("operator")
    xml = (Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi-xml" / "dual_a5000-v13.xml").read_bytes()
    upload = SimpleUploadedFile("dual_a5000.xml", xml, content_type="application/xml")
    response = client.post(reverse("import-upload"), {"file": upload, "fmt": "auto", "server_hint": "ws-01"})
    run = ImportRun.objects.get()
    assert response.status_code == 302 and run.summary["created"] == 2 and not run.summary["errors"]
    page = client.get(reverse("import-preview", args=[run.pk])).content.decode()
    assert "ws-01" in page and page.count('<span class="badge state-in_service">create</span>') == 2
    client.post(reverse("import-preview", args=[run.pk]))
    assert Gpu.objects.filter(server__hostname="ws-01").count() == 2


@pytest.mark.django_db
def test_import_preview_shows_ignored_columns_of_newer_drivers_as_a_notice(client, as_role, fleet):
    as_role("operator")
    content = (b"name, serial, uuid, pci.bus_id, gsp.mode.current, kmd_version, bbx.time_run\n"
               b"NVIDIA B200, 1653024000099, GPU-3f9a2c1e-8b4d-4e7a-9c21-6d5f0a8b7e99, 00000000:18:00.0, Enabled, "
               b"610.12, 77\n")
    response = _upload(client, content, name="b200.csv", fmt="auto")
    run = ImportRun.objects.get()
    page = client.get(response["Location"]).content.decode()

    assert not run.summary["errors"] and run.summary["created"] == 1
    assert 'id="import-notices"' in page and "gsp.mode.current" in page and "Confirm import" in page
