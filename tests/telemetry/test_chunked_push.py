"""Chunked pushes (``Transfer-Encoding: chunked``, no Content-Length) over real HTTP.

Django reads a body without a Content-Length as empty: before the fix the push answered 200 with
``samples: 0`` and dropped the data. Under gunicorn (``make run``, the Procfile) the body is read, with the
size limit; behind a server that cannot say where a chunked body ends (Django's own development server,
the test client) the push is refused with 411. Never a 200 for data that was not stored.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection
from rest_framework.authtoken.models import Token

from telemetry import partitions, services
from telemetry.models import GpuLatest
from tests import factories

PUSH = "/api/v1/telemetry/prometheus"
LIMIT = 4096
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    for port in range(21100, 21200):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 21100-21199")


@pytest.fixture
def gunicorn_url() -> Iterator[str]:
    """Fleet under gunicorn's sync worker (as the Procfile runs it), on the test database."""
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": url, "FLEET_TELEMETRY_MAX_BYTES": str(LIMIT),
           "DJANGO_SETTINGS_MODULE": "fleet.settings"}
    process = subprocess.Popen(  # noqa: S603 - fixed arguments
        [str(Path(sys.executable).parent / "gunicorn"), "fleet.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", "1", "--worker-class", "sync", "--timeout", "60"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if process.poll() is not None:
                    raise RuntimeError(process.stderr.read().decode()[-2000:]) from None
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def _push_chunked(address: str, token: str, pieces: list[bytes]) -> tuple[int, dict, dict]:
    host, port = address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", PUSH, body=iter(pieces), encode_chunked=True,
                 headers={"Authorization": f"Token {token}", "Content-Type": "text/plain"})
    response = conn.getresponse()
    body = json.loads(response.read() or b"{}")
    headers = dict(response.getheaders())
    conn.close()
    return response.status, body, headers


def _body(gpus) -> list[bytes]:
    return [f'DCGM_FI_DEV_GPU_TEMP{{UUID="{g.uuid}",Hostname="node-7"}} {60 + i}\n'.encode()
            for i, g in enumerate(gpus)]


def _inbox() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM telemetry_inbox")
        return cursor.fetchone()[0]


@pytest.fixture
def pusher(users):
    services.identity_cache_clear()
    partitions.partitions_forget()
    server = factories.server(hostname="node-7")
    gpus = [factories.gpu(server) for _ in range(3)]
    return gpus, Token.objects.create(user=users["operator"]).key


@pytest.mark.django_db(transaction=True)
def test_gunicorn_reads_a_chunked_push_and_stores_it(gunicorn_url, pusher):
    gpus, token = pusher
    pieces = _body(gpus)

    status, body, _ = _push_chunked(gunicorn_url, token, pieces)

    assert status == 200, body
    assert body["samples"] == 3 and body["visible"] == "after_merge"
    assert _inbox() == 3  # really stored, by the other process
    services.telemetry_merge()
    assert sorted(GpuLatest.objects.filter(gpu__in=gpus).values_list("gpu_temp_c", flat=True)) == [60, 61, 62]


@pytest.mark.django_db(transaction=True)
def test_gunicorn_refuses_a_chunked_push_over_the_limit(gunicorn_url, pusher):
    gpus, token = pusher
    pieces = _body(gpus) * (LIMIT // 60)  # well over LIMIT bytes, in small chunks
    assert sum(map(len, pieces)) > LIMIT

    status, body, _ = _push_chunked(gunicorn_url, token, pieces)

    assert status == 413 and body["reason"] == "body_too_large"
    assert _inbox() == 0


@pytest.mark.django_db(transaction=True)
def test_a_server_that_cannot_end_a_chunked_body_answers_411(live_server, pusher):
    gpus, token = pusher
    address = live_server.url.removeprefix("http://")

    status, body, _ = _push_chunked(address, token, _body(gpus))

    assert status == 411 and body["reason"] == "length_required"
    assert _inbox() == 0


@pytest.mark.django_db
def test_the_test_client_chunked_push_is_411_not_an_empty_200(api):
    response = api("operator").post(PUSH, b"", content_type="text/plain", HTTP_TRANSFER_ENCODING="chunked")
    assert response.status_code == 411
    assert response.json()["reason"] == "length_required"
