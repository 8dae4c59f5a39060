"""Telemetry API and the ingest sources page: push (auth, size limit, parse errors, summary), history tiers,
heatmap shape, sources and XID event lists (role matrix, query counts), the OpenAPI schema."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from telemetry import partitions, services
from telemetry.models import IngestSource, XidEvent
from telemetry.rollup import FIVE_MIN, floor, rollup_range
from telemetry.selectors import (
    heatmap_data,
    heatmap_frames,
    heatmap_layout_forget,
    history,
    history_tier,
)
from telemetry.store import SampleRow, get_store
from tests import factories

pytestmark = pytest.mark.django_db
PUSH = "/api/v1/telemetry/prometheus"


@pytest.fixture(autouse=True)
def _fresh_caches():
    services.identity_cache_clear()
    partitions.partitions_forget()
    heatmap_layout_forget()


@pytest.fixture
def node():
    server = factories.server(hostname="node-00100")
    return server, [factories.gpu(server) for _ in range(2)]


def body_for(gpus, temp: int = 55) -> str:
    return "".join(f'DCGM_FI_DEV_GPU_TEMP{{UUID="{g.uuid}",Hostname="node-00100"}} {temp}\n'
                   f'DCGM_FI_DEV_XID_ERRORS{{UUID="{g.uuid}",Hostname="node-00100"}} 79\n' for g in gpus)


@pytest.mark.sqlite
def test_push_writes_and_summarises(api, node):
    _, gpus = node
    response = api("operator").post(f"{PUSH}?source=rack-1", body_for(gpus) + 'DCGM_FI_DEV_GPU_TEMP{UUID="GPU-0f0e0d0c-'
                                    '1111-2222-3333-444455556666"} NaN\n', content_type="text/plain")
    assert response.status_code == 200, response.content
    # PostgreSQL: the samples are in the inbox; the merge finds the XID gauge changes (SQLite: at once).
    inbox = connection.vendor == "postgresql"
    assert response.json() == {"samples": 2, "unknown": 1, "rejected": {"nan": 1}, "xid_events": 0 if inbox else 2,
                               "unknown_examples": ["GPU-0f0e0d0c-1111-2222-3333-444455556666"], "notices": [],
                               "visible": "after_merge" if inbox else "now",
                               "visible_within_s": 15.0 if inbox else 0.0}
    assert IngestSource.objects.get(name="rack-1").kind == "push"
    services.telemetry_merge()
    assert XidEvent.objects.filter(ingest_source__name="rack-1").count() == 2
    again = api("operator").post(f"{PUSH}?source=rack-1", body_for(gpus), content_type="text/plain")
    assert again.json()["xid_events"] == 0  # the gauge did not change
    services.telemetry_merge()
    assert XidEvent.objects.count() == 2


@pytest.mark.sqlite
@pytest.mark.parametrize(("role", "status"), [(None, 401), ("viewer", 403), ("operator", 200), ("approver", 200),
                                              ("admin", 200)])
def test_push_role_matrix(api, node, role, status):
    response = api(role).post(PUSH, body_for(node[1]), content_type="text/plain")
    assert response.status_code == status


@pytest.mark.sqlite
def test_push_over_the_size_limit_is_413_json(api, node):
    with override_settings(FLEET_TELEMETRY_MAX_BYTES=100):
        response = api("operator").post(PUSH, "x" * 101, content_type="text/plain")
    assert response.status_code == 413
    assert response.json()["reason"] == "body_too_large"
    assert response.json()["request_id"] == response["X-Request-ID"]  # what a user quotes when they report it


@pytest.mark.sqlite
def test_push_parse_error_is_400_with_the_line_and_writes_nothing(api, node):
    text = body_for(node[1]) + 'DCGM_FI_DEV_GPU_TEMP{UUID="x",} 1\nnot a sample line\n'
    response = api("operator").post(PUSH, text, content_type="text/plain")
    assert response.status_code == 400
    assert response.json()["line"] == 6
    assert response.json()["reason"]
    assert response.json()["request_id"] == response["X-Request-ID"]
    assert not XidEvent.objects.exists()


@pytest.mark.sqlite
def test_ingest_endpoint_takes_other_formats(api):
    server = factories.server(hostname="xe9680-9")
    factories.gpu(server, uuid=None, pci_bus_id="00000000:9B:00.0")
    log = "[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
    response = api("operator").post("/api/v1/telemetry/ingest?format=kernel-log&host=xe9680-9", log,
                                    content_type="text/plain")
    assert response.status_code == 200, response.content
    assert response.json()["xid_events"] == 1
    bad = api("operator").post("/api/v1/telemetry/ingest?format=nope", "x", content_type="text/plain")
    assert bad.status_code == 400
    assert bad.json() == {"format": ["One of " + ", ".join(services.FORMATS) + "."], "request_id": bad["X-Request-ID"]}


# --- history and heatmap ----------------------------------------------------------------------------------

def test_history_tier_by_range():
    now = timezone.now()
    assert history_tier(scope="gpu", start=now - dt.timedelta(hours=6), end=now, now=now) == "raw"
    assert history_tier(scope="rack", start=now - dt.timedelta(hours=1), end=now, now=now) == "5m"
    assert history_tier(scope="gpu", start=now - dt.timedelta(hours=24), end=now, now=now) == "5m"
    assert history_tier(scope="gpu", start=now - dt.timedelta(days=7), end=now, now=now) == "5m"
    assert history_tier(scope="gpu", start=now - dt.timedelta(days=90), end=now, now=now) == "1h"
    assert history_tier(scope="gpu", start=now - dt.timedelta(days=100), end=now - dt.timedelta(days=99),
                        now=now) == "1h"  # 5-minute rollups are gone after 90 days
    assert history_tier(scope="gpu", start=now - dt.timedelta(days=20), end=now - dt.timedelta(days=20) +
                        dt.timedelta(hours=1), now=now) == "raw"  # compacted days keep raw samples past 14 days


@pytest.fixture
def recent(node):
    """Two hours of samples every minute for the node's GPUs, rolled up."""
    _, gpus = node
    end = floor(timezone.now(), FIVE_MIN)
    start = end - dt.timedelta(hours=2)
    rows = [SampleRow(start + dt.timedelta(minutes=m), g.pk, 300.0 + m, 0, 40 + m % 10 + i, 50, 30, 1980, None, None,
                      None, None, None, None, None, 0)
            for m in range(120) for i, g in enumerate(gpus)]
    from django.db import transaction

    with transaction.atomic():
        get_store().write_samples(rows)
    get_store().merge()
    rollup_range(start=start, end=end)
    return start, end, gpus


@pytest.mark.sqlite
def test_history_values_per_tier(recent):
    start, end, gpus = recent
    raw = history(scope="gpu", scope_id=gpus[0].pk, metric="gpu_temp", start=start, end=end)
    assert len(raw) == 120 and raw[0][1:] == (40.0, 40.0, 40.0)
    five = history(scope="gpu", scope_id=gpus[0].pk, metric="gpu_temp", start=start, end=end, resolution="5m")
    assert len(five) == 24
    assert five[0][0] == start and five[0][1:] == (40.0, 42.0, 44.0)
    rack = history(scope="rack", scope_id=gpus[0].rack_id, metric="power", start=start, end=end)
    assert len(rack) == 24 and rack[0][1:] == pytest.approx((300.0, 302.0, 304.0))


@pytest.mark.sqlite
def test_history_endpoint(api, recent):
    start, end, gpus = recent
    response = api("viewer").get("/api/v1/telemetry/history/", {
        "scope": "gpu", "id": gpus[1].pk, "metric": "gpu_temp", "start": start.isoformat(), "end": end.isoformat(),
        "resolution": "auto"})
    assert response.status_code == 200
    data = response.json()
    assert data["resolution"] == "raw" and len(data["points"]) == 120 and data["points"][0]["avg"] == 41.0
    bad = api("viewer").get("/api/v1/telemetry/history/", {"id": 1, "metric": "nope", "start": end.isoformat(),
                                                           "end": start.isoformat()})
    assert bad.status_code == 400 and "metric" in bad.json()


@pytest.mark.sqlite
def test_heatmap_data_shape(api, recent):
    _, _, gpus = recent
    other = factories.server(hostname="node-00101")
    extra = factories.gpu(other)
    data = heatmap_data(metric="gpu_temp")
    assert sorted(data["gpus"]) == sorted([g.pk for g in gpus] + [extra.pk])
    assert data["gpus"][:2] == [gpus[0].pk, gpus[1].pk] or data["gpus"][1:] == [gpus[0].pk, gpus[1].pk]
    index = data["gpus"].index(gpus[0].pk)
    assert data["values"][index] == 49  # the last sample, minute 119: 40 + 9
    assert data["values"][data["gpus"].index(extra.pk)] is None
    servers = data["groups"]["server"]
    assert len(servers["id"]) == 2 and servers["start"][0] == 0
    assert data["groups"]["server"]["name"][data["servers"][index]] == "node-00100"
    response = api("viewer").get("/api/v1/telemetry/heatmap/", {"metric": "power"})
    assert response.status_code == 200 and len(response.json()["values"]) == 3
    frames = heatmap_frames(metric="gpu_temp", start=recent[0], end=recent[1])
    assert frames["level"] == "gpu" and len(frames["times"]) == 24
    assert frames["values"][0][frames["ids"].index(gpus[0].pk)] == 42
    response = api("viewer").get("/api/v1/telemetry/heatmap/frames/", {"metric": "gpu_temp", "hours": 2})
    assert response.status_code == 200 and response.json()["level"] == "gpu"


# --- sources, XID events, the page ------------------------------------------------------------------------

@pytest.mark.sqlite
def test_sources_crud_role_matrix(api):
    payload = {"name": "node-7", "kind": "scrape", "url": "http://node-7:9400/metrics"}
    assert api("viewer").post("/api/v1/telemetry/sources/", payload, format="json").status_code == 403
    created = api("operator").post("/api/v1/telemetry/sources/", payload, format="json")
    assert created.status_code == 201, created.content
    pk = created.json()["id"]
    no_url = api("operator").post("/api/v1/telemetry/sources/", {"name": "x", "kind": "scrape"}, format="json")
    assert no_url.json() == {"url": ["A scrape source needs the exporter's URL."], "request_id": no_url["X-Request-ID"]}
    assert api("operator").patch(f"/api/v1/telemetry/sources/{pk}/", {"enabled": False},
                                 format="json").status_code == 200
    assert api("operator").delete(f"/api/v1/telemetry/sources/{pk}/").status_code == 403
    assert api("admin").delete(f"/api/v1/telemetry/sources/{pk}/").status_code == 204


def test_list_endpoints_query_counts_do_not_grow(api, node, django_assert_max_num_queries):
    _, gpus = node
    for n in range(5):
        services.telemetry_ingest(source=services.ingest_source_for(name=f"s{n}", kind="push", actor=None),
                                  content=body_for(gpus, temp=50 + n).replace("79", str(79 + n)), fmt="prometheus")
        services.telemetry_merge()
    client = api("viewer")
    client.get("/api/v1/telemetry/sources/")  # warm the token and roles
    with django_assert_max_num_queries(3):
        response = client.get("/api/v1/telemetry/sources/")
    assert len(response.json()["results"]) == 5
    with django_assert_max_num_queries(3):
        response = client.get("/api/v1/telemetry/xid-events/", {"gpu": gpus[0].pk})
    assert [e["xid"] for e in response.json()["results"]] == [83, 82, 81, 80, 79]


def test_sources_page_shows_unknown_gpus_and_operators_add_sources(client, users, node):
    services.telemetry_ingest(source=services.ingest_source_for(name="rack-9", kind="push", actor=None),
                              content='DCGM_FI_DEV_GPU_TEMP{UUID="GPU-0f0e0d0c-1111-2222-3333-444455556666"} 40\n',
                              fmt="prometheus")
    client.force_login(users["viewer"])
    page = client.get(reverse("telemetry-sources"))
    assert page.status_code == 200
    assert b"rack-9" in page.content and b"GPU-0f0e0d0c-1111-2222-3333-444455556666" in page.content
    assert b"Add a scrape source" not in page.content
    assert client.post(reverse("telemetry-sources"), {"name": "n1", "url": "http://n1:9400/metrics",
                                                      "interval_s": 30, "timeout_s": 10}).status_code == 403
    client.force_login(users["operator"])
    response = client.post(reverse("telemetry-sources"), {"name": "n1", "url": "http://n1:9400/metrics",
                                                          "interval_s": 30, "timeout_s": 10})
    assert response.status_code == 302
    source = IngestSource.objects.get(name="n1")
    assert source.kind == "scrape" and source.enabled
    client.post(reverse("telemetry-source-toggle", args=[source.pk]))
    source.refresh_from_db()
    assert not source.enabled


def test_openapi_schema_is_valid(tmp_path):
    call_command("spectacular", "--fail-on-warn", "--validate", "--file", str(tmp_path / "schema.yaml"),
                 stdout=io.StringIO(), stderr=io.StringIO())
    schema = (tmp_path / "schema.yaml").read_text()
    for path in ("/api/v1/telemetry/prometheus", "/api/v1/telemetry/history/", "/api/v1/telemetry/heatmap/",
                 "/api/v1/telemetry/heatmap/frames/", "/api/v1/telemetry/sources/", "/api/v1/telemetry/xid-events/"):
        assert f"{path}:" in schema


def test_heatmap_order_is_site_row_rack_unit_host_slot_whatever_the_insertion_order():
    """The heatmap's GPU order and its group starts, against the order computed here from the placement: site
    code, row name, rack position, rack unit, hostname, slot (GPUs created out of that order, two sites, racks at
    different positions, servers at different units, a hostname order that is not the unit order)."""
    import random

    from telemetry import selectors

    rng = random.Random(4)
    west, east = factories.site("zz-west"), factories.site("aa-east")
    racks = [factories.rack(west), factories.rack(east), factories.rack(east)]
    Rack = type(racks[0])
    Rack.objects.filter(pk=racks[2].pk).update(position=0)  # before racks[1] in the same site? own rows: by row name
    servers = [factories.server(rk, hostname=f"h{rng.randrange(1000):03d}-{i}", rack_unit=rng.choice((2, 10, 18)))
               for i, rk in enumerate(racks * 2)]
    slots = [(s, slot) for s in servers for slot in (3, 1, 2)]
    rng.shuffle(slots)
    gpus = [factories.gpu(s, slot=slot) for s, slot in slots]
    selectors.heatmap_layout_forget()
    data = heatmap_data(metric="gpu_temp")

    def key(g):
        sv, rk = g.server, g.server.rack
        return (rk.row.hall.site.code, rk.row.name, rk.row_id, rk.position, rk.pk, sv.rack_unit, sv.hostname, sv.pk,
                g.module_id, g.pci_bus_id, g.pk)

    expected = sorted((type(g).objects.select_related("server__rack__row__hall__site").get(pk=g.pk) for g in gpus),
                      key=key)
    assert data["gpus"] == [g.pk for g in expected]
    starts = [i for i, g in enumerate(expected) if i == 0 or expected[i - 1].server_id != g.server_id]
    assert data["groups"]["server"]["start"] == starts
    assert data["groups"]["site"]["name"] == ["aa-east", "zz-west"]
