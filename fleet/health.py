"""``/healthz`` (the process answers), ``/readyz`` (database and broker reachable, migrations applied) and
``/metrics`` (Prometheus; see ``fleet.metrics``).

Both probes are cheap enough for every few seconds: ``/healthz`` touches nothing; ``/readyz`` runs
``SELECT 1``, pings the broker with a 1 s timeout and checks the migration plan once per process until it
is found complete (later checks reuse that answer: migrations are not unapplied under a running server).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from fleet.metrics import metrics_response, scrape_token_ok
from fleet.roles import RolePermission

_migrations_done = False


@never_cache
def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok\n", content_type="text/plain")


def _database() -> str:
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute("SELECT 1")
    return "ok"


def _migrations() -> str:
    global _migrations_done
    if not _migrations_done:
        connection = connections[DEFAULT_DB_ALIAS]
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if plan:
            return f"{len(plan)} unapplied"
        _migrations_done = True
    return "ok"


def _broker() -> str:
    url = settings.CELERY_BROKER_URL
    if url.startswith("redis"):
        import redis

        client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        try:
            client.ping()
        finally:
            client.close()
        return "ok"
    folder = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("data_folder_in", "")
    return "ok" if folder and Path(folder).is_dir() else f"broker folder {folder!r} missing"


@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    checks: dict[str, Any] = {}
    for name, check in (("database", _database), ("migrations", _migrations), ("broker", _broker)):
        try:
            checks[name] = check()
        except Exception as exc:  # noqa: BLE001 - any failure is "not ready", reported by name
            checks[name] = f"{type(exc).__name__}: {exc}"[:300]
        if name == "database" and checks[name] != "ok":
            checks["migrations"] = "unknown"
            break
    ready = all(value == "ok" for value in checks.values())
    return JsonResponse({"ready": ready, **checks}, status=200 if ready else 503)


class MetricsPermission(BasePermission):
    """The scrape token (``FLEET_METRICS_TOKEN``, as ``Authorization: Bearer``), else what the API asks."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return scrape_token_ok(request._request) or RolePermission().has_permission(request, view)


class _AnyAccept(BaseContentNegotiation):
    """Prometheus asks for ``text/plain;version=0.0.4`` or OpenMetrics: the answer is the text format
    whatever it asks (and never a 406)."""

    def select_parser(self, request: Request, parsers: list) -> None:
        return None

    def select_renderer(self, request: Request, renderers: list, format_suffix: str | None = None) -> tuple:
        return renderers[0], renderers[0].media_type


class MetricsView(APIView):
    permission_classes = [MetricsPermission]
    content_negotiation_class = _AnyAccept
    schema = None  # not part of the API

    def get(self, request: Request) -> HttpResponse:
        return metrics_response()
