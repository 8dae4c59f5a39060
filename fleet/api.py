"""API plumbing shared by every app: one JSON error shape (and its OpenAPI description), nested
references, the audited ModelViewSet every resource builds on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import models
from django.db.models import ProtectedError, QuerySet
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import build_basic_type
from drf_spectacular.types import OpenApiTypes
from rest_framework import serializers, viewsets

from fleet import selectors
from fleet.api_errors import (
    ErrorSerializer,
    FleetAutoSchema,
    ProtectedErrorSerializer,
    ValidationErrorSerializer,
    exception_handler,
    protected_message,
    validation_detail,
    with_request_id,
)
from fleet.filters import AuditEventFilter, JobFilter
from fleet.models import AuditEvent, Job
from fleet.pagination import IdCursorPagination
from fleet.roles import ADMIN

# The error contract lives in fleet.api_errors; its names stay importable from here.
__all__ = ["ErrorSerializer", "FleetAutoSchema", "ProtectedErrorSerializer", "ValidationErrorSerializer",
           "exception_handler", "protected_message", "validation_detail", "with_request_id"]


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
