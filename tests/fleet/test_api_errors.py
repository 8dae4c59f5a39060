"""The API's error contract (fleet/api_errors.py, docs/api.md) and strict query parameters (fleet/filters.py):
one JSON error body per kind of error, under every /api/ URL, and a 400 naming an unknown parameter."""

from __future__ import annotations

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
    assert all(isinstance(v, list) for k, v in body.items() if k != "request_id"), body
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
    body = detail_error(api("viewer").get(f"{V1}/firmware/labels/?format=AAA"), 404, "not_found")
    assert "AAA" not in body.get("code", "")
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
