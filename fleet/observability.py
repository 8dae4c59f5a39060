"""Request ids, request metrics and structured logs.

:class:`RequestMiddleware` runs first: it gives every request an id (the client's ``X-Request-ID`` when it
is a sane token, else a new one), sets ``request.request_id``, stamps the audit events and log records
written while it runs, echoes ``X-Request-ID`` on the response, and counts the request and its latency per
view for ``/metrics``. The log formats are ``fleet.logs``'.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from fleet.metrics import EXCEPTIONS, request_observe
from fleet.request_context import request_id_context

REQUEST_ID_HEADER = "X-Request-ID"
_VALID_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
log = logging.getLogger("fleet.request")


def request_id_from(request: HttpRequest) -> str:
    given = request.META.get("HTTP_X_REQUEST_ID", "")
    return given if _VALID_ID.fullmatch(given) else uuid.uuid4().hex


def _view_name(request: HttpRequest) -> str:
    match = getattr(request, "resolver_match", None)
    return (match.view_name or "unnamed") if match is not None else "unresolved"


class RequestMiddleware:
    """Request id (in, out, on audit events and logs) and per-view request metrics."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        request_id = request.request_id = request_id_from(request)  # type: ignore[attr-defined]
        with request_id_context(request_id):
            response = self.get_response(request)
            seconds = time.perf_counter() - started
            view = _view_name(request)
            request_observe(view=view, method=request.method or "", status=response.status_code, seconds=seconds)
            if log.isEnabledFor(logging.INFO):
                log.info("%s %s %s", request.method, request.get_full_path()[:500], response.status_code,
                         extra={"view": view, "status": response.status_code, "duration_ms": round(seconds * 1000, 1),
                                "method": request.method, "path": request.path[:500]})
        response[REQUEST_ID_HEADER] = request_id
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> None:
        EXCEPTIONS.labels(view=_view_name(request)).inc()
