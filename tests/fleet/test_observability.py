"""Operators' signals: /healthz, /readyz, /metrics (protected; multiprocess counters; data gauges), request ids
(in, out, on audit events and error pages), JSON logs, and the schema served to signed-in users only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import RequestFactory
from django.urls import reverse

from fleet.models import AuditAction, AuditEvent, Job, JobStatus
from fleet.tokens import token_create
from fleet.views import server_error

ROOT = Path(__file__).resolve().parents[2]


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the exposition text (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        series, value = line.rsplit(" ", 1)
        metric_name, _, rest = series.partition("{")
        found = ",".join(sorted(rest.rstrip("}").split(","))) if rest else ""
        if metric_name == name and found == want:
            return float(value)
    return 0.0


def test_healthz_is_cheap_and_public(client, db, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert response.status_code == 200 and response.content == b"ok\n"


def test_readyz_checks_database_broker_and_migrations(client, db, settings):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {"ready": True, "database": "ok", "migrations": "ok", "broker": "ok"}
    # A broker nobody listens on: not ready, and it says why.
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    down = client.get("/readyz")
    assert down.status_code == 503
    assert down.json()["broker"].startswith("ConnectionError") and down.json()["database"] == "ok"


def test_metrics_are_protected(client, users, settings):
    assert client.get("/metrics").status_code in (401, 403)
    _, push = token_create(user=users["operator"], name="exp", scope="push", actor=users["operator"])
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Token {push}").status_code == 403
    _, read = token_create(user=users["viewer"], name="prom", scope="read", actor=users["viewer"])
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Token {read}").status_code == 200
    settings.FLEET_METRICS_TOKEN = "scrape-secret"  # noqa: S105
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret").status_code == 200
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code in (401, 403)


def test_metrics_count_requests_per_view_and_read_the_fleets_state(client, users):
    client.force_login(users["viewer"])
    before = client.get("/metrics").content.decode()
    client.get("/api/v1/gpus/")
    client.get("/api/v1/gpus/")
    client.get("/no-such-page/")
    Job.objects.create(kind="bulk_transition", status=JobStatus.RUNNING, total=10, done=4)
    response = client.get("/metrics", HTTP_ACCEPT="text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    after = response.content.decode()
    key = {"view": "api:gpu-list", "method": "GET", "status": "200"}
    assert metric(after, "fleet_http_requests_total", **key) - metric(before, "fleet_http_requests_total", **key) == 2
    assert metric(after, "fleet_http_requests_total", view="unresolved", method="GET", status="404") >= 1
    assert metric(after, "fleet_http_request_duration_seconds_count", view="api:gpu-list") >= 2
    assert metric(after, "fleet_jobs", status="running") == 1
    assert metric(after, "fleet_job_items_done", kind="bulk_transition") == 4
    for name in ("fleet_celery_queue_length", "fleet_health_flags_open", "fleet_rollout_targets",
                 "fleet_telemetry_inbox_rows", "fleet_telemetry_merge_lag_seconds",
                 "fleet_telemetry_samples_ingested_total"):
        assert f"# TYPE {name}" in after, name


def test_metrics_sum_over_processes(client, users, tmp_path):
    """A counter incremented in another process (as a gunicorn or Celery worker would) shows in /metrics."""
    code = ("import django, os; os.environ['DJANGO_SETTINGS_MODULE']='fleet.settings'; django.setup();"
            "from fleet.metrics import telemetry_observe; telemetry_observe(samples=7, rejected={'nan': 3})")
    client.force_login(users["viewer"])
    before = client.get("/metrics").content.decode()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, env=os.environ.copy())  # noqa: S603
    after = client.get("/metrics").content.decode()
    assert metric(after, "fleet_telemetry_samples_ingested_total") - metric(
        before, "fleet_telemetry_samples_ingested_total") == 7
    assert metric(after, "fleet_telemetry_samples_rejected_total", reason="nan") - metric(
        before, "fleet_telemetry_samples_rejected_total", reason="nan") == 3


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_metrics_count_task_outcomes_in_a_real_worker(client, users, celery_worker_process):
    import time

    from fleet.dispatch import send

    client.force_login(users["viewer"])
    name = "fleet.tasks.audit_prune_task"
    before = metric(client.get("/metrics").content.decode(), "fleet_celery_tasks_total", task=name, outcome="success")
    assert send(name)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the worker process runs it and writes its own metrics file
        after = metric(client.get("/metrics").content.decode(), "fleet_celery_tasks_total", task=name,
                       outcome="success")
        if after > before:
            break
        time.sleep(0.3)
    assert after == before + 1


def test_request_id_is_echoed_generated_and_audited(client, users):
    given = client.get("/healthz", HTTP_X_REQUEST_ID="abc-123")
    assert given["X-Request-ID"] == "abc-123"
    made = client.get("/healthz")
    assert len(made["X-Request-ID"]) == 32
    hostile = client.get("/healthz", HTTP_X_REQUEST_ID="<script>" + "x" * 100)
    assert hostile["X-Request-ID"] != "<script>" and len(hostile["X-Request-ID"]) == 32
    client.force_login(users["viewer"])
    response = client.post(reverse("account"), {"name": "t", "scope": "read", "expires_in_days": 1},
                           HTTP_X_REQUEST_ID="req-audit-1")
    assert response["X-Request-ID"] == "req-audit-1"
    assert AuditEvent.objects.get(action=AuditAction.CREATE, request_id="req-audit-1").actor == users["viewer"]


def test_error_pages_name_the_request_id(client, users):
    client.force_login(users["viewer"])
    page = client.get("/no-such-page/", HTTP_X_REQUEST_ID="nf-1")
    assert page.status_code == 404 and b"nf-1" in page.content
    request = RequestFactory().get("/gpus/")
    request.request_id = "boom-1"
    assert b"boom-1" in server_error(request).content
    api_request = RequestFactory().get("/api/v1/gpus/")
    api_request.request_id = "boom-2"
    assert json.loads(server_error(api_request).content) == {"detail": "Server error.", "request_id": "boom-2"}


def test_json_logs_carry_the_request_id(db):
    """LOG_FORMAT=json: every line one JSON object; a request's lines carry its id."""
    code = ("import django, logging; django.setup(); from django.test import Client;"
            "Client().get('/healthz', HTTP_X_REQUEST_ID='log-42');"
            "logging.getLogger('fleet').warning('outside a request')")
    env = {**os.environ, "LOG_FORMAT": "json", "DJANGO_SETTINGS_MODULE": "fleet.settings"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,  # noqa: S603
                         check=True)
    lines = [json.loads(line) for line in out.stderr.splitlines() if line.strip()]
    request_line = next(line for line in lines if line["logger"] == "fleet.request")
    assert request_line["request_id"] == "log-42" and request_line["status"] == 200
    assert request_line["view"] == "healthz" and request_line["message"] == "GET /healthz 200"
    assert any(line["message"] == "outside a request" and line["request_id"] == "" for line in lines)
    plain = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,  # noqa: S603
                           env={**os.environ, "DJANGO_SETTINGS_MODULE": "fleet.settings"})
    assert plain.stderr.strip() == "outside a request"  # plain text by default, no per-request lines


@pytest.mark.parametrize("path", ["/api/schema/", "/api/docs/"])
def test_schema_and_docs_need_a_signed_in_user(client, users, path, settings):
    anonymous = client.get(path)
    assert anonymous.status_code in (302, 401, 403)
    if anonymous.status_code == 302:
        assert anonymous["Location"].startswith("/login/")
    client.force_login(users["viewer"])
    assert client.get(path).status_code == 200


def test_schema_with_a_token(client, users):
    _, key = token_create(user=users["viewer"], name="s", scope="read", actor=users["viewer"])
    assert client.get("/api/schema/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 200
