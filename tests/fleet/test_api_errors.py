"""The API's error contract (fleet/api_errors.py, docs/api.md) and strict query parameters (fleet/filters.py):
one JSON error body per kind of error, under every /api/ URL, and a 400 naming an unknown parameter."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from fleet.models import AuditEvent
from tests import factories

pytestmark = pytest.mark.django_db
V1 = "/api/v1"


def field_errors(response) -> dict:
    assert response.status_code == 400, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    body.pop("request_id", None)  # every error names the request (fleet.middleware); the fields are the point here
    assert all(isinstance(v, list) for v in body.values()), body
    return body


def detail_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["code"] == code and isinstance(body["detail"], str)
    return body


# --- strict query parameters -------------------------------------------------------------------------------

def test_gpu_exact_filters_find_one_gpu(api):
    server = factories.server(hostname="node-exact-1")
    target = factories.gpu(server, serial="EXACT-0001", asset_tag="AT-EXACT-1")
    factories.gpu(server, serial="EXACT-0002")
    client = api("viewer")

    for query in (f"serial={target.serial}", f"uuid={target.uuid}", f"uuid={target.uuid.removeprefix('GPU-')}",
                  "asset_tag=AT-EXACT-1"):
        results = client.get(f"{V1}/gpus/?{query}").json()["results"]
        assert [gpu["id"] for gpu in results] == [target.pk], query
    assert len(client.get(f"{V1}/gpus/?hostname=NODE-EXACT-1").json()["results"]) == 2
    assert client.get(f"{V1}/gpus/?serial=NOPE").json()["results"] == []
    assert client.get(f"{V1}/gpus/?serial=EXACT").json()["results"] == []  # exact, not a prefix
    assert [s["id"] for s in client.get(f"{V1}/servers/?hostname=node-exact-1").json()["results"]] == [server.pk]


@pytest.mark.parametrize("url", [f"{V1}/gpus/?serail=X", f"{V1}/servers/?serial_number=1", f"{V1}/audit-events/?who=x",
                                 f"{V1}/jobs/?kind=x&colour=red", f"{V1}/telemetry/history/?id=1&metric=gpu_temp&x=1",
                                 f"{V1}/firmware/labels/?nodes=1"])
def test_an_unknown_query_parameter_is_a_400_naming_it(api, url):
    name = url.rsplit("&", 1)[-1].split("?")[-1].split("=")[0]
    body = field_errors(api("viewer").get(url))
    assert list(body) == [name]
    assert "Unknown query parameter" in body[name][0]


def test_an_unknown_parameter_on_an_object_is_a_400_too(api):
    gpu = factories.gpu()
    assert field_errors(api("viewer").get(f"{V1}/gpus/{gpu.pk}/?fields=id"))["fields"]


def test_known_parameters_still_work(api):
    factories.gpu()
    client = api("viewer")
    assert client.get(f"{V1}/gpus/?state=in_service&page_size=1&format=json").status_code == 200
    assert client.get(f"{V1}/audit-events/?at_after=2026-01-01T00:00:00Z&at_before=2030-01-01T00:00Z").status_code == 200


def test_the_gpu_list_page_refuses_an_unknown_parameter(client, users):
    client.force_login(users["viewer"])
    gpu = factories.gpu(serial="PAGE-0001")
    response = client.get(reverse("gpu-list") + "?serail=PAGE-0001")
    assert response.status_code == 400
    page = response.content.decode()
    assert "serail" in page and "Unknown query parameter" in page and f"/gpus/{gpu.pk}/" not in page
    found = client.get(reverse("gpu-list") + "?serial=PAGE-0001&sort=-id")
    assert found.status_code == 200 and f"/gpus/{gpu.pk}/" in found.content.decode()
    assert client.get(reverse("server-list") + "?colour=red").status_code == 400
    assert client.get(reverse("gpu-export") + "?colour=red").status_code == 400


# --- one error body per kind ------------------------------------------------------------------------------

@pytest.mark.parametrize("param", ["at_after", "at_before"])
@pytest.mark.parametrize("url", ["audit-events", "gpu-state-changes", "gpu-moves"])
def test_a_utc_offset_postgresql_refuses_is_a_400_not_a_500(api, url, param):
    body = field_errors(api("viewer").get(f"{V1}/{url}/?{param}=2026-01-01T00:00:00%2B16:00"))
    assert "UTC offset" in " ".join(body[param.split("_")[0]])
    assert api("viewer").get(f"{V1}/{url}/?{param}=2026-01-01T00:00:00%2B15:59").status_code == 200


def test_a_body_that_is_not_json_is_a_400_with_field_errors(api):
    response = api("operator").post(f"{V1}/sites/", "{not json", content_type="application/json")
    body = field_errors(response)
    assert "JSON parse error" in body["non_field_errors"][0]


def test_non_numeric_ids_and_unknown_urls_answer_json_404(api, client):
    for url in (f"{V1}/gpus/abc/", f"{V1}/no-such-thing/", f"{V1}/gpus/12x/transition/"):
        detail_error(api("operator").post(url) if url.endswith("transition/") else api("viewer").get(url),
                     404, "not_found")
    assert client.get("/no-such-page/").status_code == 404
    assert not client.get("/no-such-page/")["Content-Type"].startswith("application/json")


def test_a_bad_cursor_is_a_400_naming_it(api):
    factories.gpu()
    for cursor in ("garbage", "cD1hYmM="):  # not base64 / a position that is not an id ("p=abc")
        assert "cursor" in field_errors(api("viewer").get(f"{V1}/gpus/?cursor={cursor}"))


def test_a_text_endpoint_answers_its_errors_in_json(api):
    body = field_errors(api("viewer").get(f"{V1}/firmware/labels/?format=AAA"))
    assert "AAA" in body["format"][0] and "slurm" in body["format"][0]
    detail_error(api(None).get(f"{V1}/firmware/labels/"), 401, "not_authenticated")


def test_errors_carry_the_request_id_when_the_request_has_one(rf):
    from rest_framework.exceptions import NotFound
    from rest_framework.request import Request

    from fleet.api_errors import exception_handler

    request = rf.get("/api/v1/gpus/1/")
    assert "request_id" not in exception_handler(NotFound(), {"request": Request(request)}).data  # tolerated
    request.request_id = "r-123"
    assert exception_handler(NotFound(), {"request": Request(request)}).data == {
        "detail": "Not found.", "code": "not_found", "request_id": "r-123"}


def test_a_refused_delete_is_a_409_in_the_detail_shape(api):
    gpu = factories.gpu()
    response = api("admin").delete(f"{V1}/gpu-models/{gpu.model_id}/")
    body = detail_error(response, 409, "protected")
    assert body["protected_by"]
    assert not AuditEvent.objects.filter(action="delete").exists()


def test_the_audit_page_refuses_an_unknown_parameter_and_an_invalid_filter_shows_nothing(client, users):
    client.force_login(users["viewer"])
    factories.gpu()  # audited
    assert AuditEvent.objects.exists()
    refused = client.get(reverse("audit-list") + "?who=x")
    assert refused.status_code == 400 and "Unknown query parameter" in refused.content.decode()
    invalid = client.get(reverse("audit-list") + "?since=not-a-date")
    assert invalid.status_code == 200 and 'class="toolbar errors"' in invalid.content.decode()
    assert client.get(reverse("audit-list") + "?action=create").status_code == 200


def test_a_format_suffix_naming_no_renderer_is_a_404(api):
    gpu = factories.gpu()
    detail_error(api("viewer").get(f"{V1}/gpu-models/{gpu.model_id}.4/"), 404, "not_found")
    assert api("viewer").get(f"{V1}/gpu-models/{gpu.model_id}.json/").status_code == 200


# --- Django's and the server's own refusals under /api/ (h17b) -------------------------------------------------

def test_a_form_with_too_many_fields_is_a_json_400(api, settings):
    """Django's DATA_UPLOAD_MAX_NUMBER_FIELDS refusal inside a DRF view (the contract test found it on
    ``POST .../orders/{id}/receive/``): the project's field-errors shape, not Django's HTML page."""
    from tests.procurement import helpers

    order = helpers.order(reference="PO-FIELDS")
    fields = {f"f{n}": "x" for n in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1)}
    body = field_errors(api("operator").post(f"{V1}/procurement/orders/{order.pk}/receive/", fields))
    assert "more than" in body["non_field_errors"][0] and "fields" in body["non_field_errors"][0]


def test_django_refusals_outside_a_view_answer_json_under_api_and_html_elsewhere(rf):
    from django.core.exceptions import TooManyFieldsSent

    from fleet.api_errors import bad_request

    api_answer = bad_request(rf.post("/api/v1/gpus/"), TooManyFieldsSent("too many"))
    assert api_answer.status_code == 400 and api_answer["Content-Type"] == "application/json"
    assert "more than" in json.loads(api_answer.content)["non_field_errors"][0]
    page = bad_request(rf.post("/gpus/"), TooManyFieldsSent("too many"))
    assert page.status_code == 400 and page["Content-Type"].startswith("text/html")


def test_an_over_long_url_is_a_json_414_under_api(api, client, settings):
    settings.FLEET_MAX_URL_LENGTH = 2000
    long_query = "serial=" + "9" * 2100
    body = detail_error(api("viewer").get(f"{V1}/gpus/?{long_query}"), 414, "uri_too_long")
    assert "at most 2000" in body["detail"]
    page = client.get(f"/gpus/?{long_query}")
    assert page.status_code == 414 and page["Content-Type"].startswith("text/plain")


def test_options_on_an_action_without_a_body_describes_the_route(api, users, settings, tmp_path):
    """``OPTIONS .../agent-token/`` was a 500 (DRF asked the view for a serializer it does not have)."""
    from tests.decommission.decom_factories import walk

    settings.DECOMMISSION_SIGNING_KEY_DIR = str(tmp_path / "keys")
    asset = walk("approved", users=users).assets.first()
    response = api("admin").options(f"{V1}/decommission/assets/{asset.pk}/agent-token/")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response.json()["name"] == "Agent token"


def test_options_on_a_text_endpoint_answers_json(api):
    response = api("viewer").options(f"{V1}/firmware/labels/")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert "text/plain" in response.json()["renders"]


def test_under_the_projects_gunicorn_an_over_long_url_is_fleets_json_414(tmp_path):
    """Served as the Procfile serves it (gunicorn with fleet/gunicorn_conf.py): a URL past gunicorn's default
    request-line limit (4,094 bytes) reaches Fleet, and one past Fleet's limit is Fleet's JSON 414, not
    gunicorn's HTML page."""
    import http.client
    import os
    import socket
    import subprocess
    import sys
    import time
    from pathlib import Path

    from django.db import connection

    db = connection.settings_dict
    url = (f"sqlite:///{db['NAME']}" if connection.vendor == "sqlite" else
           f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "DATABASE_URL": url, "PORT": str(port), "GUNICORN_WORKERS": "1",
           "FLEET_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "fleet.settings"}
    process = subprocess.Popen(  # noqa: S603 - fixed arguments
        [str(Path(sys.executable).parent / "gunicorn"), "fleet.wsgi", "--config", "fleet/gunicorn_conf.py"],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def get(path: str) -> tuple[int, str, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read()

    try:
        deadline = time.monotonic() + 120
        while True:  # until the server answers
            try:
                get("/healthz")
                break
            except OSError:
                assert process.poll() is None, process.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, "gunicorn did not start"
                time.sleep(0.2)
        status, content_type, _ = get(f"{V1}/gpus/?serial={'9' * 5000}")
        assert (status, content_type) == (401, "application/json")  # past gunicorn's old limit: Fleet answers
        status, content_type, body = get(f"{V1}/gpus/?serial={'9' * 9000}")
        assert (status, content_type) == (414, "application/json"), body[:200]
        assert json.loads(body)["code"] == "uri_too_long"
    finally:
        process.terminate()
        process.wait(timeout=30)
