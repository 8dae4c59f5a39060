from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from fleet.audit import audit_source
from fleet.models import AuditSource


class AuditContextMiddleware:
    """Tag audit events written during a request with where the request came in."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path_info
        if path.startswith("/api/"):
            source = AuditSource.API
        elif path.startswith("/admin/"):
            source = AuditSource.ADMIN
        else:
            source = AuditSource.UI
        with audit_source(source):
            return self.get_response(request)
