"""Telemetry pages and the health-flag API: the flagged-GPU page (filters, keyset pages, pinned queries), the
one-click drain / RMA (role matrix, audited, illegal transitions explained), the heatmap and its side panels,
the chart panels on the detail pages."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import include, path, reverse

from fleet.models import AuditEvent
from inventory.models import GpuState
from telemetry import api_health_urls
from telemetry.health import health_evaluate
from telemetry.models import HealthFlag
from tests import factories
from tests.telemetry.test_health import sample, write, xids

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
NOW = dt.datetime(2026, 3, 10, 12, 0, tzinfo=dt.UTC)

# The health-flag API under /api/v1/ before fleet.api_urls composes it (then this is the same route).
urlpatterns = [
    path("api/v1/", include((api_health_urls.urlpatterns, "health_api"))),
    path("", include("fleet.urls")),
]


@pytest.fixture
def flagged(db):
    """A rack of 8 GPUs: 3 with an XID 79 (drain), 1 with a remap failure (rma)."""
    rack = factories.rack(factories.site("tlm1"), name="tlm1-r01")
    server = factories.server(rack, hostname="tlm-01", rack_unit=2)
    gpus = [factories.gpu(server) for _ in range(8)]
    for gpu in gpus[:3]:
        xids(gpu, 79, start=NOW - dt.timedelta(hours=2))
    write([sample(gpus[3], NOW - dt.timedelta(minutes=1), remap_failure=True, remap_unc=8)])
    health_evaluate(now=NOW)
    return {"rack": rack, "server": server, "gpus": gpus}


@pytest.fixture
def as_role(client, make_user):
    """``as_role("operator")``: log the test client in as a new user with that role."""
    def login(role):
        client.force_login(user := make_user(role, username=f"tlm-{role}"))
        return user

    return login


def _ids(response) -> list[int]:
    return [row["flag"].pk for row in response.context["rows"]]


@pytest.mark.parametrize("headers", [{}, HTMX], ids=["full-page", "htmx-partial"])
def test_health_page_lists_flags_with_evidence_in_pinned_queries(client, as_role, flagged, headers,
                                                                 django_assert_max_num_queries):
    """Pinned: user + groups + the flags (one query with the GPU, model, server, site, rack joined); the full
    page adds the site and model choices of the filter form."""
    as_role("viewer")
    client.get(reverse("health-list"))  # warm the session cache
    with django_assert_max_num_queries(3 if headers else 5):
        response = client.get(reverse("health-list"), **headers)
    assert response.status_code == 200
    assert len(_ids(response)) == 4
    body = response.content.decode()
    assert "XID 79 (GPU fell off the bus) at 2026-03-10 10:00" in body
    assert "Row-remap failure flag set (8 uncorrectable" in body
    assert "tlm1-r01" in body and "tlm-01" in body
    assert "Send to RMA" not in body  # a viewer sees no buttons
    if headers:
        assert "<html" not in body


def test_health_filters_and_keyset_pages(client, as_role, flagged, settings):
    as_role("viewer")
    settings.FLEET_PAGE_SIZE = 2
    response = client.get(reverse("health-list"), {"severity": "drain"})
    first = _ids(response)
    assert len(first) == 2 and response.context["page"].has_next
    second = _ids(client.get(reverse("health-list"), {"severity": "drain", "after": response.context["page"].next_after}))
    assert len(second) == 1 and not set(first) & set(second)
    assert _ids(client.get(reverse("health-list"), {"kind": "row_remap_failure"})) == [
        HealthFlag.objects.get(kind="row_remap_failure").pk]
    assert len(_ids(client.get(reverse("health-list"), {"site": "tlm1"}))) == 2  # page size
    assert _ids(client.get(reverse("health-list"), {"site": "nope"})) == []  # an unknown site shows nothing


def test_one_click_drain_by_an_operator_is_audited(client, as_role, flagged):
    operator = as_role("operator")
    flag = HealthFlag.objects.filter(kind="rma_xid").first()
    response = client.post(reverse("health-flag-action", args=[flag.pk, "drain"]), **HTMX,
                           HTTP_HX_CURRENT_URL="http://testserver/telemetry/health/?severity=drain")
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith(f'<tr id="flag-{flag.pk}"')
    assert "In service → Drained" in body
    flag.gpu.refresh_from_db()
    assert flag.gpu.state == GpuState.DRAINED
    event = AuditEvent.objects.filter(action="transition", object_id=str(flag.gpu_id)).latest("id")
    assert event.actor_name == operator.username and event.source == "ui"
    assert event.message.startswith(f"Health flag #{flag.pk} RMA XID (drain): XID 79")


def test_rma_of_an_in_service_gpu_says_why_not(client, as_role, flagged):
    as_role("operator")
    flag = HealthFlag.objects.get(kind="row_remap_failure")
    response = client.post(reverse("health-flag-action", args=[flag.pk, "rma"]), {"next": "/telemetry/health/"})
    assert response.status_code == 302 and response.url == "/telemetry/health/"
    page = client.get(response.url).content.decode()
    assert "was not moved to RMA: A GPU cannot go from &#x27;in_service&#x27; to &#x27;rma&#x27;" in page
    flag.gpu.refresh_from_db()
    assert flag.gpu.state == GpuState.IN_SERVICE


def test_viewer_cannot_act_on_flags(client, as_role, flagged):
    as_role("viewer")
    flag = HealthFlag.objects.first()
    assert client.post(reverse("health-flag-action", args=[flag.pk, "drain"])).status_code == 403
    flag.gpu.refresh_from_db()
    assert flag.gpu.state == GpuState.IN_SERVICE


def test_heatmap_page_and_side_panels(client, as_role, flagged):
    as_role("viewer")
    response = client.get(reverse("telemetry-heatmap"), {"metric": "power"})
    body = response.content.decode()
    assert 'id="hm-canvas"' in body and 'data-metric="power"' in body and "heatmap.js" in body
    gpu = flagged["gpus"][3]
    panel = client.get(reverse("telemetry-heatmap-gpu", args=[gpu.pk]), **HTMX).content.decode()
    assert 'id="side-panel"' in panel and "<html" not in panel
    assert f'href="{reverse("gpu-detail", args=[gpu.pk])}"' in panel
    assert f'data-scope="gpu" data-scope-id="{gpu.pk}"' in panel
    assert "Row-remap failure flag set" in panel and "remap failure</span>" in panel
    rack_panel = client.get(reverse("telemetry-heatmap-rack", args=[flagged["rack"].pk]), **HTMX).content.decode()
    assert 'data-scope="rack"' in rack_panel


def test_detail_pages_carry_the_chart_panel(client, as_role, flagged):
    as_role("viewer")
    gpu = flagged["gpus"][0]
    with CaptureQueriesContext(connection) as gpu_queries:
        body = client.get(reverse("gpu-detail", args=[gpu.pk])).content.decode()
    assert f'data-scope="gpu" data-scope-id="{gpu.pk}"' in body and "uplot.iife.min.js" in body
    assert "XID 79 (GPU fell off the bus)" in body  # the health box
    assert '"xid": 79' in body  # the XID markers
    body = client.get(reverse("server-detail", args=[flagged["server"].pk])).content.decode()
    assert 'data-scope="server"' in body and "3 drain" in body and "1 rma" in body
    body = client.get(reverse("rack-detail", args=[flagged["rack"].pk])).content.decode()
    assert 'data-scope="rack"' in body and "3 drain" in body
    body = client.get(reverse("row-detail", args=[flagged["rack"].row_id])).content.decode()
    assert 'data-scope="row"' in body
    # The telemetry panel costs the GPU page two queries (XIDs, flags; the latest sample comes with the GPU's own
    # read), whatever the history.
    for _ in range(5):
        xids(gpu, 79, 74, start=NOW - dt.timedelta(minutes=30))
    with CaptureQueriesContext(connection) as more:
        client.get(reverse("gpu-detail", args=[gpu.pk]))
    assert len(more) == len(gpu_queries)


@pytest.mark.urls("tests.telemetry.test_views")
def test_api_lists_flags_and_acts(api, flagged, django_assert_max_num_queries):
    url = "/api/v1/telemetry/health-flags/"
    viewer = api("viewer")
    with django_assert_max_num_queries(3):  # token with its user + user groups + one page; nothing per row
        response = viewer.get(url, {"severity": "drain", "page_size": 2})
    assert response.status_code == 200
    body = response.json()
    assert len(body["results"]) == 2 and body["next"]
    item = body["results"][0]
    assert item["kind"] == "rma_xid" and item["gpu"]["hostname"] == "tlm-01"
    assert item["evidence_text"].startswith("XID 79 (GPU fell off the bus)")
    assert viewer.post(f"{url}{item['id']}/drain/").status_code == 403
    response = api("operator").post(f"{url}{item['id']}/drain/")
    assert response.status_code == 200 and response.json()["gpu"]["state"] == "drained"
    remap = HealthFlag.objects.get(kind="row_remap_failure")
    response = api("operator").post(f"{url}{remap.pk}/rma/")
    assert response.status_code == 400
    assert "cannot go from 'in_service' to 'rma'" in response.json()["non_field_errors"][0]
    assert api(None).get(url).status_code == 401
