"""API plumbing shared by every app: one JSON error shape (and its OpenAPI description), nested
references, the audited ModelViewSet every resource builds on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from django.db.models import ProtectedError, QuerySet
from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import build_basic_type
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, serializers, status, viewsets
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from fleet import selectors
from fleet.filters import AuditEventFilter, JobFilter
from fleet.models import AuditEvent, Job
from fleet.pagination import IdCursorPagination
from fleet.roles import ADMIN

# --- errors --------------------------------------------------------------------------------------------


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


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, plus Django ValidationError (raised by services) as a 400 with field messages and
    ProtectedError (a delete refused because history refers to the object) as a 409."""
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(detail=validation_detail(exc))
    elif isinstance(exc, ProtectedError):
        set_rollback()
        obj = getattr(exc, "fleet_object", None)
        return Response({"detail": protected_message(obj, exc), "protected_by": protected_by(exc)},
                        status=status.HTTP_409_CONFLICT)
    return drf_exception_handler(exc, context)


class ErrorSerializer(serializers.Serializer):
    """401, 403, 404, 405: one message."""

    detail = serializers.CharField()


class ValidationErrorSerializer(serializers.Serializer):
    """400: messages per request field; ``non_field_errors`` for the request as a whole."""

    non_field_errors = serializers.ListField(child=serializers.CharField(), required=False)


class ProtectedErrorSerializer(serializers.Serializer):
    """409: the delete was refused because other records (history) refer to the object."""

    detail = serializers.CharField()
    protected_by = serializers.DictField(child=serializers.IntegerField(),
                                         help_text="Count of referring records by kind")


class _ValidationErrorSchema(OpenApiSerializerExtension):
    target_class = ValidationErrorSerializer

    def map_serializer(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        schema = auto_schema._map_serializer(self.target_class, direction, bypass_extensions=True)
        schema["additionalProperties"] = {"type": "array", "items": {"type": "string"}}
        return schema


class FleetAutoSchema(AutoSchema):
    """Documents, on every operation, the error responses :func:`exception_handler` produces."""

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        errors: dict[str, OpenApiResponse] = {
            "401": OpenApiResponse(ErrorSerializer, description="Not authenticated"),
            "403": OpenApiResponse(ErrorSerializer, description="Your role does not allow this"),
        }
        if self.method in {"POST", "PUT", "PATCH"} or self._is_list_view():
            errors["400"] = OpenApiResponse(ValidationErrorSerializer, description="Invalid input")
        if "{" in self.path:
            errors["404"] = OpenApiResponse(ErrorSerializer, description="Not found")
        if self.method == "DELETE":
            errors["409"] = OpenApiResponse(ProtectedErrorSerializer, description="Refused: history refers to it")
        for code, response in errors.items():
            if code not in responses:
                responses[code] = self._get_response_for_code(response, code, direction=direction)
        return responses


# --- nested references ---------------------------------------------------------------------------------


class RefField(serializers.PrimaryKeyRelatedField):
    """A foreign key written as an id and read as a small object (``{"id": 3, "code": "fra1"}``).

    ``ref`` is a serializer naming the attributes shown; they are read from the related object the
    selector already joined, so a list costs no query per row.
    """

    def __init__(self, *, ref: type[serializers.Serializer], **kwargs: Any) -> None:
        self.ref = ref
        self.ref_attrs = tuple(ref.Meta.fields)
        super().__init__(**kwargs)

    def use_pk_only_optimization(self) -> bool:
        return False

    def to_representation(self, value: models.Model) -> dict[str, Any]:
        return {name: getattr(value, name) for name in self.ref_attrs}


class _RefFieldSchema(OpenApiSerializerFieldExtension):
    target_class = RefField
    match_subclasses = True

    def map_serializer_field(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        if direction == "request":
            return build_basic_type(OpenApiTypes.INT)  # type: ignore[return-value]
        return auto_schema.resolve_serializer(self.target.ref, direction).ref


# --- viewsets -------------------------------------------------------------------------------------------


class NewestFirstCursorPagination(IdCursorPagination):
    """History lists (audit events, state changes, moves, jobs): newest first."""

    ordering = "-id"


class AuditedModelViewSet(viewsets.ModelViewSet):
    """A resource whose writes go through the app's audited services, never ``serializer.save()``.

    Subclasses set the services (``create_service(model_class=, actor=, **fields)``,
    ``update_service(obj=, actor=, **fields)``, ``delete_service(obj=, actor=)``). Reads need viewer,
    writes operator, deletes admin (the same matrix the Django admin enforces through model permissions).
    """

    schema = FleetAutoSchema()
    required_roles = {"destroy": ADMIN}
    create_service: Callable[..., models.Model]
    update_service: Callable[..., Any]
    delete_service: Callable[..., None]

    def perform_create(self, serializer: serializers.ModelSerializer) -> None:
        serializer.instance = type(self).create_service(model_class=serializer.Meta.model, actor=self.request.user,
                                                        **serializer.validated_data)

    def perform_update(self, serializer: serializers.ModelSerializer) -> None:
        type(self).update_service(obj=serializer.instance, actor=self.request.user, **serializer.validated_data)

    def perform_destroy(self, instance: models.Model) -> None:
        try:
            type(self).delete_service(obj=instance, actor=self.request.user)
        except ProtectedError as exc:
            exc.fleet_object = instance  # type: ignore[attr-defined]  # named in the 409 message
            raise


class ReadOnlyViewSet(viewsets.ReadOnlyModelViewSet):
    """History and records only services write: list and retrieve, for viewers."""

    schema = FleetAutoSchema()


# --- the audit trail and background jobs --------------------------------------------------------------


class AuditEventSerializer(serializers.ModelSerializer):
    content_type = serializers.SerializerMethodField(help_text="Kind of object, as app_label.model")

    class Meta:
        model = AuditEvent
        fields = ["id", "at", "actor", "actor_name", "source", "action", "content_type", "object_id",
                  "object_repr", "changes", "message"]
        extra_kwargs = {"changes": {"help_text": "{field: [before, after]} for every changed field"}}

    def get_content_type(self, event: AuditEvent) -> str:
        return f"{event.content_type.app_label}.{event.content_type.model}"


class JobSerializer(serializers.ModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="api:job-detail")
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    percent = serializers.IntegerField(read_only=True, help_text="done / total, 0-100")
    finished = serializers.BooleanField(read_only=True)

    class Meta:
        model = Job
        fields = ["id", "url", "kind", "status", "total", "done", "failed", "percent", "finished", "errors",
                  "created_by", "created_at", "started_at", "finished_at"]
        extra_kwargs = {"errors": {"help_text": "Per-item failures (first 1000)"}}


class AuditEventViewSet(ReadOnlyViewSet):
    """Who changed what, from where, and when: newest first."""

    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilter
    pagination_class = NewestFirstCursorPagination

    def get_queryset(self) -> QuerySet:
        return selectors.audit_list()


class JobViewSet(ReadOnlyViewSet):
    """Background jobs (bulk transitions) and their progress: poll ``GET /jobs/{id}/`` until ``finished``."""

    serializer_class = JobSerializer
    filterset_class = JobFilter
    pagination_class = NewestFirstCursorPagination

    def get_queryset(self) -> QuerySet:
        return selectors.job_list()
