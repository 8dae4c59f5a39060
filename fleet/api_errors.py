"""One error contract for everything under ``/api/``: the bodies, the handler that produces them, and the
OpenAPI description of both (``docs/api.md``).

Two shapes, both JSON, whatever the endpoint renders on success:

- **Field errors** (every 400): ``{"<field>": ["message", ...], "non_field_errors": [...]}``: DRF's
  validation errors, a Django ``ValidationError`` from a service, an unknown query parameter, an unparseable
  body (``non_field_errors``), a bad cursor (``cursor``).
- **Detail errors** (every other 4xx): ``{"detail": "message", "code": "not_found"}``; a refused delete
  adds ``protected_by`` (409).

Both carry ``request_id`` when the request has one (set by the request-id middleware), so a user's report
can be matched with the logs. :class:`FleetAutoSchema` (the default schema class) documents the error
statuses every operation can answer; :func:`not_found`, :func:`bad_request` and :func:`server_error` keep
Django's own 404, 400 and 500 pages (a URL no route matches, ``/api/v1/gpus/abc/``; too many form fields)
JSON under ``/api/``, and :class:`UriLengthMiddleware` answers an over-long URL with a JSON 414.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.conf import settings
from django.core.exceptions import NON_FIELD_ERRORS, RequestDataTooBig, SuspiciousOperation, TooManyFieldsSent
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from django.db.models import ProtectedError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, renderers, serializers, status
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from fleet.negotiation import JSON_RENDERER

API_PREFIX = "/api/"


def validation_detail(exc: DjangoValidationError) -> dict[str, list[str]]:
    """A Django ValidationError (dict or list form) as DRF's ``{field: [messages]}``."""
    if hasattr(exc, "error_dict"):
        return {api_settings.NON_FIELD_ERRORS_KEY if name == NON_FIELD_ERRORS else name: messages
                for name, messages in exc.message_dict.items()}
    return {api_settings.NON_FIELD_ERRORS_KEY: exc.messages}


def protected_by(exc: ProtectedError) -> dict[str, int]:
    """What keeps an object from being deleted: ``{"gpu state changes": 3, "halls": 1}``."""
    counts = Counter(str(obj._meta.verbose_name_plural) for obj in exc.protected_objects)
    return dict(sorted(counts.items()))


def protected_message(obj: models.Model | None, exc: ProtectedError) -> str:
    what = f"{obj._meta.verbose_name} '{obj}'" if obj is not None else "This object"
    refs = ", ".join(f"{count} {name}" for name, count in protected_by(exc).items())
    return (f"{what[0].upper()}{what[1:]} cannot be deleted: {refs} refer to it. "
            "Records with history are kept; remove or move what refers to it first.")


def request_id(request: Any) -> str | None:
    """The id the request-id middleware gave the request (None without it)."""
    value = getattr(request, "request_id", None) or getattr(getattr(request, "_request", None), "request_id", None)
    return str(value) if value else None


def with_request_id(body: dict[str, Any], request: Any) -> dict[str, Any]:
    if (rid := request_id(request)) is not None:
        body["request_id"] = rid
    return body


def _code(exc: exceptions.APIException) -> str:
    codes = exc.get_codes()
    return codes if isinstance(codes, str) else exc.default_code


def refusal_message(exc: SuspiciousOperation) -> str:
    """What Django refused in a request (its own limits), in words a client can act on."""
    if isinstance(exc, TooManyFieldsSent):
        return (f"The request carries more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} fields "
                "(DATA_UPLOAD_MAX_NUMBER_FIELDS); send fewer, or JSON.")
    if isinstance(exc, RequestDataTooBig):
        return (f"The request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes "
                "(DATA_UPLOAD_MAX_MEMORY_SIZE).")
    return "The request was refused as malformed."


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, reshaped into the two error bodies.

    A Django ValidationError (raised by services) is a 400 with field messages; a ParseError (a body that is
    not JSON, form or multipart as it claims) a 400 with ``non_field_errors``; a ProtectedError (a delete
    refused because history refers to the object) a 409. Errors are rendered as JSON even where the view
    renders text (``/firmware/labels/``): a client reads one format for every error.
    """
    request = context.get("request")
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(*exc.args[:1])
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(*exc.args[:1])
    if isinstance(exc, SuspiciousOperation):  # Django's own refusals (too many fields, too big a body): a 400
        exc = exceptions.ValidationError(detail={api_settings.NON_FIELD_ERRORS_KEY: [refusal_message(exc)]})
    elif isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(detail=validation_detail(exc))
    elif isinstance(exc, exceptions.ParseError):
        exc = exceptions.ValidationError(detail={api_settings.NON_FIELD_ERRORS_KEY: [str(exc.detail)]})
    if isinstance(exc, ProtectedError):
        set_rollback()
        obj = getattr(exc, "fleet_object", None)
        response = Response({"detail": protected_message(obj, exc), "code": "protected",
                             "protected_by": protected_by(exc)}, status=status.HTTP_409_CONFLICT)
    else:
        response = drf_exception_handler(exc, context)
        if response is None:
            return None
        if isinstance(exc, exceptions.ValidationError):
            detail = response.data
            if not isinstance(detail, dict):  # ValidationError("message") or a list: the request as a whole
                detail = {api_settings.NON_FIELD_ERRORS_KEY: detail if isinstance(detail, list) else [detail]}
            response.data = dict(detail)
        elif isinstance(exc, exceptions.APIException):
            response.data = {"detail": str(exc.detail), "code": _code(exc)}
    response.data = with_request_id(dict(response.data), request)
    if request is not None:
        renderer = getattr(request, "accepted_renderer", None)
        if not isinstance(renderer, renderers.JSONRenderer | renderers.BrowsableAPIRenderer):
            request.accepted_renderer, request.accepted_media_type = JSON_RENDERER, "application/json"
    return response


# --- Django's own 404 and 500 under /api/ ----------------------------------------------------------------


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """``handler404``: JSON under ``/api/`` (a URL no route matches, a non-numeric id), else Django's page."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse(with_request_id({"detail": "Not found.", "code": "not_found"}, request), status=404)
    return defaults.page_not_found(request, exception)  # type: ignore[arg-type]


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """``handler400``: Django's own refusals outside a DRF view (a ``SuspiciousOperation`` such as too many
    fields or too big a body, read by a middleware) are a JSON 400 in the field-errors shape under ``/api/``."""
    if request.path.startswith(API_PREFIX):
        message = refusal_message(exception) if isinstance(exception, SuspiciousOperation) else \
            "The request was refused as malformed."
        return JsonResponse(with_request_id({api_settings.NON_FIELD_ERRORS_KEY: [message]}, request), status=400)
    return defaults.bad_request(request, exception)  # type: ignore[arg-type]


class UriLengthMiddleware:
    """A URL longer than ``FLEET_MAX_URL_LENGTH`` (path and query string) is refused with a 414 before any
    view runs: JSON in the detail shape under ``/api/``, plain text elsewhere. Gunicorn's own request-line
    limit is lifted (``fleet/gunicorn_conf.py``: its 414 is an HTML page Fleet cannot shape), so this is the
    limit a client meets."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        length = len(request.path) + len(request.META.get("QUERY_STRING", ""))
        limit = settings.FLEET_MAX_URL_LENGTH
        if length > limit:
            message = f"The URL is {length} characters long; at most {limit} are accepted."
            if request.path.startswith(API_PREFIX):
                body = with_request_id({"detail": message, "code": "uri_too_long"}, request)
                return JsonResponse(body, status=414)
            return HttpResponse(message, status=414, content_type="text/plain; charset=utf-8")
        return self.get_response(request)


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: JSON under ``/api/``, else Django's page."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse(with_request_id({"detail": "Server error.", "code": "error"}, request), status=500)
    return defaults.server_error(request)


# --- the schema of the error bodies -----------------------------------------------------------------------


class ErrorSerializer(serializers.Serializer):
    """Every 4xx but 400: one message and a machine-readable code."""

    detail = serializers.CharField()
    code = serializers.CharField(help_text="not_authenticated, permission_denied, not_found, method_not_allowed, "
                                 "unsupported_media_type, throttled, ...")
    request_id = serializers.CharField(required=False, help_text="The request's id, as in the server's logs")


class ValidationErrorSerializer(serializers.Serializer):
    """400: messages per request field (a body field or a query parameter); ``non_field_errors`` for the
    request as a whole (for example a body that does not parse)."""

    non_field_errors = serializers.ListField(child=serializers.CharField(), required=False)
    request_id = serializers.CharField(required=False, help_text="The request's id, as in the server's logs")


class ProtectedErrorSerializer(serializers.Serializer):
    """409: the delete was refused because other records (history) refer to the object."""

    detail = serializers.CharField()
    code = serializers.CharField()
    protected_by = serializers.DictField(child=serializers.IntegerField(),
                                         help_text="Count of referring records by kind")
    request_id = serializers.CharField(required=False, help_text="The request's id, as in the server's logs")


class _ValidationErrorSchema(OpenApiSerializerExtension):
    target_class = ValidationErrorSerializer

    def map_serializer(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        schema = auto_schema._map_serializer(self.target_class, direction, bypass_extensions=True)
        # Messages per field; a nested object's errors nest the same way ({"gpus": {"rack": ["..."]}}).
        schema["additionalProperties"] = {"anyOf": [{"type": "array", "items": {"type": "string"}},
                                                    {"type": "object", "additionalProperties": True}]}
        return schema


_JSON = ["application/json"]


class FleetAutoSchema(AutoSchema):
    """Documents, on every operation, the error responses :func:`exception_handler` produces (always JSON)."""

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        errors: dict[str, OpenApiResponse] = {
            "400": OpenApiResponse(ValidationErrorSerializer, description="Invalid input: an unknown or invalid "
                                   "query parameter, or an invalid body; nothing was changed"),
            "401": OpenApiResponse(ErrorSerializer, description="Not authenticated"),
            "403": OpenApiResponse(ErrorSerializer, description="Your role does not allow this"),
            "405": OpenApiResponse(ErrorSerializer, description="Method not allowed"),
            "406": OpenApiResponse(ErrorSerializer, description="No acceptable response format (Accept, ?format=)"),
        }
        if "{" in self.path:
            errors["404"] = OpenApiResponse(ErrorSerializer, description="Not found")
        if self.method in {"POST", "PUT", "PATCH"}:
            errors["415"] = OpenApiResponse(ErrorSerializer, description="Unsupported body media type")
        if self.method == "DELETE":
            errors["409"] = OpenApiResponse(ProtectedErrorSerializer, description="Refused: history refers to it")
        errors["414"] = OpenApiResponse(ErrorSerializer, description="URI too long (FLEET_MAX_URL_LENGTH)")
        errors["429"] = OpenApiResponse(ErrorSerializer, description="Too many requests: retry after Retry-After "
                                        "seconds")
        for code, response in errors.items():
            if code not in responses:
                responses[code] = self._get_response_for_code(response, code, _JSON, direction=direction)
        return responses
