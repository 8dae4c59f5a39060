"""Diagnostic results in through the API, the server page's upload and ``manage.py ingest_diag``; placed on GPUs
by serial, bus id or the host's slot order, and refused (nothing written) when they cannot be placed."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from acceptance.models import AcceptanceCheck, CheckThreshold, DiagnosticResult, DiagnosticRun, RunGpu
from fleet.models import AuditEvent
from tests import factories
from tests.acceptance.helpers import FIXTURES, doc4, fixture

pytestmark = pytest.mark.django_db


@pytest.fixture
def host():
    server = factories.server(hostname="gpu-node-1")
    gpus = [factories.gpu(server, state="received") for _ in range(4)]
    return server, gpus


def test_api_dcgm4_with_serials_places_by_serial_and_keeps_unknown_tests(api, host):
    server, gpus = host
    document = json.loads(fixture("dcgm4-schema-level3-unknown-test.json"))
    for entity, gpu in zip(document["entity_groups"][0]["entities"], gpus, strict=True):
        entity["serial_num"] = gpu.serial
    response = api("operator").post("/api/v1/acceptance/diag-runs/", {"document": document}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["level"] == 3 and body["level_inferred"] and body["dcgm_version"] == "4.2.3"
    assert [(g["gpu"], g["placed_by"], g["verdict"]) for g in body["gpus"]] == [
        (g.pk, "serial", "pass") for g in gpus]
    assert DiagnosticResult.objects.filter(test="hbm_channel_sweep").count() == 4
    run = DiagnosticRun.objects.get(pk=body["id"])
    assert run.document["future_top_level"] == {"anything": True}
    detail = api("viewer").get(f"/api/v1/acceptance/diag-runs/{run.pk}/").json()
    assert {r["test"] for r in detail["results"]} >= {"software", "memory", "hbm_channel_sweep"}


def test_api_dcgm3_without_serials_placed_by_host_slot_order(api, host):
    server, gpus = host
    text = fixture("dcgm3.1.0-nvidia-jsonresult-8gpu.txt")
    refused = api("operator").post("/api/v1/acceptance/diag-runs/", {"document": text, "host": "gpu-node-1"},
                                   format="json")
    assert refused.status_code == 400  # 8 GPU entities, the host has 4 in Fleet
    messages = refused.json()["document"]
    assert any("GPU 4: gpu-node-1 has only 4 GPU(s)" in m for m in messages)
    assert not DiagnosticRun.objects.exists() and not AuditEvent.objects.filter(action="import").exists()
    ok = api("operator").post("/api/v1/acceptance/diag-runs/", {
        "document": fixture("dcgm3-virtualclient-r3-skip.json"), "host": "gpu-node-1", "level": 3}, format="json")
    assert ok.status_code == 201
    first = sorted(gpus, key=lambda g: g.pci_bus_id)[0]
    row = ok.json()["gpus"][0]
    assert (row["gpu"], row["placed_by"], row["verdict"]) == (first.pk, "host_index", "pass")
    assert "EUD Test: skipped" in row["reasons"]


def test_unplaceable_and_malformed_documents_are_refused(api, host):
    client = api("operator")
    no_host = client.post("/api/v1/acceptance/diag-runs/", {"document": fixture("dcgm3-virtualclient-r2.json")},
                          format="json")
    assert no_host.status_code == 400 and "name the host" in no_host.json()["document"][0]
    unknown_serial = doc4({0: "Pass"}, serials={0: "999999999"})
    assert client.post("/api/v1/acceptance/diag-runs/", {"document": unknown_serial}, format="json").status_code == 400
    wrong = client.post("/api/v1/acceptance/diag-runs/", {"document": '{"DCGM Health": {}}', "host": "gpu-node-1"},
                        format="json")
    assert wrong.status_code == 400 and "dcgmi diag" in wrong.json()["document"][0]
    assert client.post("/api/v1/acceptance/diag-runs/", {"document": "x", "host": "nope"},
                       format="json").json()["host"] == ["No server named 'nope'."]
    assert api("viewer").post("/api/v1/acceptance/diag-runs/", {"document": "{}"}, format="json").status_code == 403
    assert not DiagnosticRun.objects.exists()


def test_runtime_error_run_is_incomplete_and_mismatched_serials_refused(api, host):
    server, gpus = host
    document = json.loads(fixture("dcgm4-schema-runtime-error.json"))
    client = api("operator")
    # The document's serials are not Fleet's, and Fleet's GPUs at those slots have other serials: no guessing.
    refused = client.post("/api/v1/acceptance/diag-runs/", {"document": document, "host": "gpu-node-1"},
                          format="json")
    assert refused.status_code == 400 and "refusing to guess" in refused.json()["document"][0]
    for entity, gpu in zip(document["entity_groups"][0]["entities"], gpus, strict=True):
        entity["serial_num"] = gpu.serial
    response = client.post("/api/v1/acceptance/diag-runs/", {"document": document, "host": "gpu-node-1",
                                                             "level": 3}, format="json")
    assert response.status_code == 201
    rows = response.json()["gpus"]
    assert {r["verdict"] for r in rows} == {"incomplete"}
    assert "killed by signal 9" in rows[0]["reasons"][0]
    assert "killed by signal 9" in response.json()["runtime_error"]


def test_real_dcgm4_documents_placed_by_slot_and_a_config_failure_fails_burn_in(api):
    """Real DCGM 4.5.2 output (GB10, one GPU, no serial): placed by the host's slot; DCGM's own ``Fail`` of the
    ``software`` test (persistence mode) is a failed run, and a GPU in burn-in moves to ``burn_in_failed``."""
    server = factories.server(hostname="spark-043a")
    gpu = factories.gpu(server, state="burn_in")
    client = api("operator")
    response = client.post("/api/v1/acceptance/diag-runs/", {
        "document": fixture("dcgm4.5.2-glimmer-gb10-level2-plugins-allowed.json"), "host": "spark-043a"},
        format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["dcgm_version"], body["driver_version"], body["level"], body["level_inferred"]) == (
        "4.5.2", "580.82.09", 2, True)
    row = body["gpus"][0]
    assert (row["gpu"], row["placed_by"], row["verdict"]) == (gpu.pk, "host_index", "fail")
    assert row["reasons"][0].startswith("software: fail (Persistence Mode: Persistence mode for GPU 0 is disabled")
    gpu.refresh_from_db()
    assert gpu.state == "burn_in_failed"
    assert set(DiagnosticResult.objects.values_list("test", "status")) == {
        ("software", "fail"), ("memory", "pass"), ("pcie", "pass")}
    assert DiagnosticResult.objects.get(test="software").error_ids == [29]
    # The 4.2.3 level-2 run whose memory and pcie tests were skipped is a failure too (software), never a pass.
    again = client.post("/api/v1/acceptance/diag-runs/", {
        "document": fixture("dcgm4.2.3-glimmer-gb10-level2-partial-skip.json"), "host": "spark-043a", "level": 2},
        format="json").json()
    assert again["gpus"][0]["verdict"] == "fail"


def test_upload_on_the_server_page(client, users, host):
    server, gpus = host
    client.force_login(users["operator"])
    page = client.get(f"/servers/{server.pk}/")
    assert 'id="diag-upload"' in page.content.decode()
    with open(FIXTURES / "dcgm3-virtualclient-r2.json", "rb") as handle:
        response = client.post(f"/acceptance/servers/{server.pk}/upload/", {"file": handle, "level": "2"})
    run = DiagnosticRun.objects.get()
    assert response.status_code == 302 and response.url == f"/acceptance/runs/{run.pk}/"
    assert run.source == "upload" and run.level == 2 and not run.level_inferred
    detail = client.get(response.url).content.decode()
    assert "Denylist" in detail and "placed by host_index" in detail
    bad = client.post(f"/acceptance/servers/{server.pk}/upload/", {"file": io.BytesIO(b"garbage")})
    assert bad.status_code == 302 and DiagnosticRun.objects.count() == 1


def test_ingest_diag_command(host):
    server, gpus = host
    out = io.StringIO()
    call_command("ingest_diag", str(FIXTURES / "dcgm3-virtualclient-failed-malformed.json"), "--host", "gpu-node-1",
                 stdout=out)
    assert "GPU 0 fail" in out.getvalue()
    assert RunGpu.objects.get().reasons[0].startswith("CUDA Main Library: fail (Cannot open library libcuda.so")
    with pytest.raises(CommandError, match="No server named"):
        call_command("ingest_diag", str(FIXTURES / "dcgm3-virtualclient-r2.json"), "--host", "nope")
    with pytest.raises(CommandError, match="Not valid JSON"):
        call_command("ingest_diag", str(FIXTURES.parent / "SOURCES.md"), "--host", "gpu-node-1")
    assert DiagnosticRun.objects.count() == 1


def test_acceptance_checks_with_thresholds(api, host):
    server, gpus = host
    CheckThreshold.objects.create(gpu_model=gpus[0].model, name="nccl_allreduce_busbw", min_value=350, unit="GB/s")
    client = api("operator")
    ok = client.post("/api/v1/acceptance/checks/", {"gpu": gpus[0].pk, "name": "nccl_allreduce_busbw",
                                                    "value": 362.0}, format="json")
    assert ok.status_code == 201 and ok.json()["passed"] is True and ok.json()["threshold"]["min"] == 350
    low = client.post("/api/v1/acceptance/checks/", {"gpu": gpus[1].pk, "name": "nccl_allreduce_busbw",
                                                     "value": 201.5, "details": "ring, 8 GPUs"}, format="json")
    assert low.json()["passed"] is False
    no_threshold = client.post("/api/v1/acceptance/checks/", {"gpu": gpus[0].pk, "name": "hpl_tflops",
                                                              "value": 50.0}, format="json")
    assert no_threshold.status_code == 400 and "passed" in no_threshold.json()
    given = client.post("/api/v1/acceptance/checks/", {"gpu": gpus[0].pk, "name": "nvbandwidth", "passed": True,
                                                       "details": "all pairs ok"}, format="json")
    assert given.status_code == 201
    assert AcceptanceCheck.objects.count() == 3
