"""API plumbing shared by every app: one JSON error shape."""

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, plus Django ValidationError (raised by services) as a 400 with field messages."""
    if isinstance(exc, DjangoValidationError):
        if hasattr(exc, "error_dict"):
            detail: Any = exc.message_dict
        else:
            detail = {"non_field_errors": exc.messages}
        exc = exceptions.ValidationError(detail=detail)
    return drf_exception_handler(exc, context)
