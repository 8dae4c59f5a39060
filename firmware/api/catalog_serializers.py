"""Serializers of the firmware catalog, compliance and drift: validate and shape; the viewsets call services."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from firmware.models import (
    Baseline,
    Bundle,
    BundleItem,
    Channel,
    ComplianceStatus,
    ComponentSpec,
    MaintenanceWindow,
    Pool,
    Release,
)
from inventory.models import GpuModel, Server, ServerPlatform


class ComponentSpecSerializer(serializers.ModelSerializer):
    class Meta:
        model = ComponentSpec
        fields = ["id", "component", "per_gpu", "update_method", "activation", "inventory_pattern", "apply_order"]


class ReleaseSerializer(serializers.ModelSerializer):
    platforms = serializers.PrimaryKeyRelatedField(queryset=ServerPlatform.objects.all(), many=True, required=False)
    gpu_models = serializers.PrimaryKeyRelatedField(queryset=GpuModel.objects.all(), many=True, required=False)
    channel = serializers.ChoiceField(choices=[Channel.TESTING, Channel.STABLE], required=False,
                                      help_text="On create only; afterwards POST .../channel/")
    sha256 = serializers.CharField(max_length=64, required=False, allow_blank=True,
                                   help_text="Required with image_url; with image_file Fleet computes it and a "
                                             "declared value that differs is a 400")

    class Meta:
        model = Release
        fields = ["id", "component", "version", "version_key", "platforms", "gpu_models", "sha256", "size_bytes",
                  "image_url", "image_file", "notes", "channel", "min_from_version", "released_at", "created_at",
                  "success_count", "failure_count", "revoked_reason"]
        read_only_fields = ["version_key", "created_at", "success_count", "failure_count", "revoked_reason"]
        validators: list = []  # uniqueness and the image rule are the service's

    def to_representation(self, instance: Release) -> dict:
        data = super().to_representation(instance)
        data["channel"] = instance.channel
        return data


class ChannelSerializer(serializers.Serializer):
    channel = serializers.ChoiceField(choices=Channel.choices)
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class BundleItemSerializer(serializers.ModelSerializer):
    version = serializers.CharField(source="release.version", read_only=True)

    class Meta:
        model = BundleItem
        fields = ["order", "component", "release", "version"]


class BundleSerializer(serializers.ModelSerializer):
    releases = serializers.PrimaryKeyRelatedField(queryset=Release.objects.all(), many=True, write_only=True)
    items = BundleItemSerializer(many=True, read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = Bundle
        fields = ["id", "name", "platform", "releases", "items", "notes", "created_at", "created_by"]
        read_only_fields = ["created_at"]
        validators: list = []


class BaselineSerializer(serializers.ModelSerializer):
    approved_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True,
                                               help_text="Null while proposed")
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True,
                                              help_text="Who proposed it (cannot approve it); null: the system")

    class Meta:
        model = Baseline
        fields = ["id", "bundle", "platform", "pool", "valid_from", "valid_to", "approved_by", "created_by",
                  "created_at"]
        read_only_fields = ["platform", "approved_by", "created_by", "created_at"]
        extra_kwargs = {"valid_from": {"required": False}}
        validators: list = []


class BaselineEndSerializer(serializers.Serializer):
    ends_at = serializers.DateTimeField(required=False, allow_null=True, default=None)


class PoolSerializer(serializers.ModelSerializer):
    servers = serializers.PrimaryKeyRelatedField(queryset=Server.objects.all(), many=True, required=False)
    server_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Pool
        fields = ["id", "name", "kind", "servers", "server_count"]
        validators: list = []


@extend_schema_field({"type": "string", "pattern": r"^([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d+)?)?$",
                      "nullable": True, "example": "02:00:00",
                      "description": "Local time of day in the window's timezone (no UTC offset)"})
class LocalTimeField(serializers.TimeField):
    """A time of day without an offset: OpenAPI's ``format: time`` (RFC 3339) demands one."""


class MaintenanceWindowSerializer(serializers.ModelSerializer):
    start_time = LocalTimeField(required=False, allow_null=True,
                                help_text="Weekly windows: when the window opens (HH:MM[:SS])")

    class Meta:
        model = MaintenanceWindow
        fields = ["id", "name", "kind", "site", "pool", "starts_at", "ends_at", "weekdays", "start_time",
                  "duration_minutes", "timezone", "enabled"]
        validators: list = []


class ComplianceStatusSerializer(serializers.ModelSerializer):
    hostname = serializers.CharField(source="server.hostname", read_only=True)
    site = serializers.CharField(source="server.site.code", read_only=True, default=None)
    platform = serializers.CharField(source="server.platform.name", read_only=True, default=None)

    class Meta:
        model = ComplianceStatus
        fields = ["id", "server", "hostname", "site", "platform", "component", "baseline", "expected",
                  "actual", "status", "gpu_count", "computed_at"]


class DriftCountSerializer(serializers.Serializer):
    site = serializers.CharField(source="server__site__code", allow_null=True)
    platform_id = serializers.IntegerField(source="server__platform_id", allow_null=True)
    platform = serializers.CharField(source="server__platform__name", allow_null=True)
    component = serializers.CharField()
    status = serializers.CharField()
    servers = serializers.IntegerField()
    gpus = serializers.IntegerField()


class TupleCountSerializer(serializers.Serializer):
    tuple_hash = serializers.CharField()
    versions = serializers.DictField(child=serializers.CharField())
    servers = serializers.IntegerField()


class MixedFindingSerializer(serializers.Serializer):
    kind = serializers.CharField()
    id = serializers.IntegerField()
    name = serializers.CharField()
    servers = serializers.IntegerField()
    mixed_servers = serializers.IntegerField()
    differing = serializers.ListField(child=serializers.CharField())
    tuples = TupleCountSerializer(many=True)


class RolloutExceptionSerializer(serializers.Serializer):
    rollout_id = serializers.IntegerField()
    rollout__name = serializers.CharField()
    server_id = serializers.IntegerField()
    server__hostname = serializers.CharField()
    error_class = serializers.CharField()
    last_error = serializers.CharField()


class DriftReportSerializer(serializers.Serializer):
    computed_at = serializers.DateTimeField(allow_null=True)
    counts = DriftCountSerializer(many=True)
    mixed_nvlink_domains = MixedFindingSerializer(many=True)
    mixed_pools = MixedFindingSerializer(many=True)
    rollout_exceptions = RolloutExceptionSerializer(many=True, help_text="Servers left behind by rollouts "
                                                    "completed with exceptions (infra-failed or inconclusive)")


class RecomputeSerializer(serializers.Serializer):
    computed_at = serializers.CharField()
    compliant = serializers.IntegerField()
    drift = serializers.IntegerField()
    unknown = serializers.IntegerField()
    servers_with_tuple = serializers.IntegerField()
    seconds = serializers.FloatField()
