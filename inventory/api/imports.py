"""``POST /api/v1/imports/``: import GPUs from an nvidia-smi or Fleet CSV file, whole or not at all."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.conf import settings
from django.template.defaultfilters import filesizeformat
from drf_spectacular.utils import OpenApiResponse, PolymorphicProxySerializer, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from fleet.api import FleetAutoSchema, ValidationErrorSerializer, with_request_id
from inventory.importers import FORMATS
from inventory.imports import IMPORT_NEW_STATES, gpus_import


class ImportSerializer(serializers.Serializer):
    file = serializers.FileField()
    format = serializers.ChoiceField(choices=["auto", *FORMATS], default="auto")
    server = serializers.CharField(max_length=253, required=False, allow_blank=True, default="",
                                   help_text="Hostname the GPUs are in, for files that do not name it")
    new_state = serializers.ChoiceField(choices=[str(s) for s in IMPORT_NEW_STATES], default="received",
                                        help_text="State new GPUs start in (received: burn-in comes first)")
    dry_run = serializers.BooleanField(required=False, default=False,
                                       help_text="Validate and report what would change; change nothing")

    def validate_file(self, upload: Any) -> Any:
        if upload.size > settings.FLEET_IMPORT_MAX_BYTES:
            raise serializers.ValidationError(f"The file is {filesizeformat(upload.size)}; the limit is "
                                              f"{filesizeformat(settings.FLEET_IMPORT_MAX_BYTES)}.")
        return upload


class ImportErrorSerializer(serializers.Serializer):
    file = serializers.CharField()
    line = serializers.IntegerField(allow_null=True, help_text="Line (XML) or row (CSV); null: the whole file")
    field = serializers.CharField(allow_blank=True)
    message = serializers.CharField()


class ImportResultSerializer(serializers.Serializer):
    created = serializers.IntegerField()
    updated = serializers.IntegerField()
    moved = serializers.IntegerField()
    unchanged = serializers.IntegerField()
    servers_created = serializers.ListField(child=serializers.CharField())
    models_created = serializers.ListField(child=serializers.CharField())
    errors = ImportErrorSerializer(many=True)
    notices = ImportErrorSerializer(many=True, help_text="Harmless things read past, e.g. CSV columns a newer "
                                    "nvidia-smi added that Fleet does not use")
    rows = serializers.ListField(child=serializers.DictField(), help_text="What the import does to each GPU")
    applied = serializers.BooleanField(help_text="False for a dry run or a file with errors")
    format = serializers.CharField(help_text="The file's format (detected when the request said auto)")


def _error(error: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(error) and not isinstance(error, type):
        return dataclasses.asdict(error)
    if isinstance(error, dict):
        return error
    return {name: getattr(error, name, "") for name in ("file", "line", "field", "message")}


class ImportViewSet(viewsets.ViewSet):
    """Imports are operator work (the default role for a POST)."""

    schema = FleetAutoSchema()
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(
        summary="Import GPUs from a file",
        request={"multipart/form-data": ImportSerializer},
        responses={
            200: OpenApiResponse(ImportResultSerializer, description="Imported (or, with dry_run, checked)"),
            400: OpenApiResponse(PolymorphicProxySerializer(
                component_name="ImportBadRequest", resource_type_field_name=None,
                serializers=[ImportResultSerializer, ValidationErrorSerializer]),
                description="The file has errors (nothing was imported), or the request is invalid"),
        },
    )
    def create(self, request: Request) -> Response:
        payload = ImportSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        upload = data["file"]
        result = gpus_import(content=upload.read(), filename=upload.name, fmt=data["format"],
                             server_hint=data["server"].strip(), actor=request.user, dry_run=data["dry_run"],
                             new_state=data["new_state"])
        body = {
            **{name: getattr(result, name) for name in ("created", "updated", "moved", "unchanged", "applied")},
            "servers_created": list(result.servers_created),
            "models_created": list(result.models_created),
            "errors": [_error(e) for e in result.errors],
            "notices": [_error(n) for n in result.notices],
            "rows": list(result.rows),
            "format": getattr(result, "fmt", "") or data["format"],
        }
        if body["errors"]:
            return Response(with_request_id(body, request), status=status.HTTP_400_BAD_REQUEST)
        return Response(body)
