"""Serializers of the decommission API: they validate and shape; services write."""

from __future__ import annotations

from decimal import Decimal

from rest_framework import serializers

from decommission.models import (
    Asset,
    Category,
    Certificate,
    CustodyKind,
    CustodyTransfer,
    DecommissionRequest,
    Destination,
    EvidenceEvent,
    Level,
    Medium,
    Outcome,
    PolicyRule,
    Processor,
)
from inventory.models import Gpu, GpuModel, Rack, Server


class DecomUserRef(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()


class DecommissionRequestSerializer(serializers.ModelSerializer):
    requested_by = DecomUserRef(read_only=True, allow_null=True)
    approved_by = DecomUserRef(read_only=True, allow_null=True)
    operator = DecomUserRef(read_only=True, allow_null=True)
    validated_by = DecomUserRef(read_only=True, allow_null=True)
    actions = serializers.SerializerMethodField(help_text="Actions the request's state allows now")
    outcome = serializers.ChoiceField(choices=Outcome.choices, allow_blank=True, read_only=True,
                                      help_text="Set when disposed; empty before")

    class Meta:
        model = DecommissionRequest
        fields = ["id", "reason", "category", "destination", "min_level", "level", "state", "version", "held_from",
                  "hold_reason", "outcome", "downgrade_reason", "location", "receipt_reference", "requested_by",
                  "approved_by", "operator", "validated_by", "created_at", "state_changed_at", "actions"]
        read_only_fields = fields

    def get_actions(self, obj: DecommissionRequest) -> list[str]:
        from decommission.lifecycle import available

        return [a.name for a in available(obj.state, obj.held_from)]


class DecommissionRequestCreateSerializer(serializers.Serializer):
    servers = serializers.ListField(child=serializers.CharField(max_length=253), required=False, default=list,
                                    help_text="Server hostnames or serials")
    gpus = serializers.ListField(child=serializers.CharField(max_length=64), required=False, default=list,
                                 help_text="Serials of loose GPU boards (not in a listed server)")
    rack = serializers.PrimaryKeyRelatedField(queryset=Rack.objects.all(), required=False, allow_null=True,
                                              help_text="Bulk: every server in this rack")
    gpu_model = serializers.PrimaryKeyRelatedField(queryset=GpuModel.objects.all(), required=False,
                                                   allow_null=True, help_text="Bulk: every server of this generation")
    reason = serializers.CharField(max_length=300)
    category = serializers.ChoiceField(choices=Category.choices)
    destination = serializers.ChoiceField(choices=Destination.choices)
    level = serializers.ChoiceField(choices=Level.choices, required=False, allow_blank=True, default="",
                                    help_text="Empty: the policy minimum; never below it")
    location = serializers.CharField(max_length=120, required=False, allow_blank=True, default="")

    def validate(self, data: dict) -> dict:
        names = [n.strip().lower() for n in data["servers"] if n.strip()]
        servers = {s.hostname: s for s in Server.objects.filter(hostname__in=names)}
        by_serial = {s.serial.lower(): s for s in Server.objects.filter(serial__in=data["servers"]).exclude(serial="")}
        unknown = [n for n in names if n not in servers and n not in by_serial]
        if unknown:
            raise serializers.ValidationError({"servers": [f"Unknown server '{n}'." for n in unknown[:20]]})
        chosen = list({**servers, **{s.hostname: s for s in by_serial.values()}}.values())
        if data.get("rack"):
            chosen += list(Server.objects.filter(rack=data["rack"]))
        if data.get("gpu_model"):
            chosen += list(Server.objects.filter(gpus__model=data["gpu_model"]).distinct())
        gpus = list(Gpu.objects.filter(serial__in=data["gpus"]))
        missing = sorted(set(data["gpus"]) - {g.serial for g in gpus})
        if missing:
            raise serializers.ValidationError({"gpus": [f"Unknown GPU serial '{s}'." for s in missing[:20]]})
        data["server_objs"] = sorted({s.pk: s for s in chosen}.values(), key=lambda s: s.hostname)
        data["gpu_objs"] = gpus
        if not data["server_objs"] and not gpus:
            raise serializers.ValidationError({"servers": ["Name at least one server or GPU (or a rack, a model)."]})
        return data


class DecomReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=300)


class DecomOptionalReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class DecomDisposeSerializer(serializers.Serializer):
    outcome = serializers.ChoiceField(choices=Outcome.choices)


class DowngradeSerializer(serializers.Serializer):
    level = serializers.ChoiceField(choices=Level.choices)
    reason = serializers.CharField(max_length=300)


class DestructionSerializer(serializers.Serializer):
    reference = serializers.CharField(max_length=120, help_text="Certificate of destruction number")
    method = serializers.CharField(max_length=120, help_text="For example: shred to 2 mm particles")
    facility = serializers.CharField(max_length=120)


class DecommissionAssetSerializer(serializers.ModelSerializer):
    media_total = serializers.IntegerField(read_only=True)
    media_done = serializers.IntegerField(read_only=True)
    media_failed = serializers.IntegerField(read_only=True)

    class Meta:
        model = Asset
        fields = ["id", "label", "server", "gpu", "state", "media_total", "media_done", "media_failed",
                  "powered_off_at", "next_run_at", "errors", "hold_reason", "hold_evidence", "held_at"]
        read_only_fields = fields


class AssetResumeSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=["reconcile", "landed", "not_landed"],
                                       help_text="reconcile: read the device again; landed / not_landed: what you "
                                                 "verified on the device")
    note = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class MediumSerializer(serializers.ModelSerializer):
    asset = serializers.CharField(source="asset.label", read_only=True)
    certificate = serializers.SerializerMethodField()

    class Meta:
        model = Medium
        fields = ["id", "asset", "gpu", "media_type", "serial", "manufacturer", "model", "source", "level",
                  "technique", "tool", "state", "attempts", "device_failures", "detail", "done_at", "certificate"]
        read_only_fields = fields

    def get_certificate(self, obj: Medium) -> str | None:
        cert = getattr(obj, "certificate", None)
        return str(cert.pk) if cert else None


class EvidenceEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = EvidenceEvent
        fields = ["id", "request", "seq", "medium", "asset", "step", "tool", "tool_version", "command",
                  "output_sha256", "result", "detail", "at", "actor_name", "attempt", "prev_hash", "hash"]
        read_only_fields = fields


class CertificateSerializer(serializers.ModelSerializer):
    medium_serial = serializers.CharField(source="medium.serial", read_only=True, allow_null=True, default=None)
    asset = serializers.CharField(source="asset.label", read_only=True)

    class Meta:
        model = Certificate
        fields = ["id", "kind", "request", "asset", "medium", "medium_serial", "sha256", "key_id", "issued_at",
                  "document"]
        read_only_fields = fields


class CertificateVerifySerializer(serializers.Serializer):
    valid = serializers.BooleanField()
    problems = serializers.ListField(child=serializers.CharField())
    sha256 = serializers.CharField()
    key_id = serializers.CharField()


class CustodyTransferSerializer(serializers.ModelSerializer):
    processor_name = serializers.CharField(source="processor.name", read_only=True, allow_null=True, default=None)

    class Meta:
        model = CustodyTransfer
        fields = ["id", "kind", "from_party", "to_party", "from_signed_by", "to_signed_by", "seal_ids", "count",
                  "weight_kg", "carrier", "reference", "processor", "processor_name", "at"]
        read_only_fields = ["id", "processor_name"]


class CustodyTransferCreateSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=CustodyKind.choices, default=CustodyKind.HANDOFF)
    from_party = serializers.CharField(max_length=120)
    to_party = serializers.CharField(max_length=120)
    from_signed_by = serializers.CharField(max_length=120)
    to_signed_by = serializers.CharField(max_length=120)
    seal_ids = serializers.ListField(child=serializers.CharField(max_length=60), allow_empty=False)
    count = serializers.IntegerField(min_value=0)
    weight_kg = serializers.DecimalField(max_digits=9, decimal_places=2, min_value=Decimal("0"))
    carrier = serializers.CharField(max_length=120, required=False, allow_blank=True, default="")
    reference = serializers.CharField(max_length=120, required=False, allow_blank=True, default="")
    processor = serializers.PrimaryKeyRelatedField(queryset=Processor.objects.all(), required=False,
                                                   allow_null=True, default=None)
    at = serializers.DateTimeField(required=False, allow_null=True, default=None)


class ProcessorSerializer(serializers.ModelSerializer):
    class Meta:
        model = Processor
        fields = ["id", "name", "certification", "certificate_id", "expires_on"]
        read_only_fields = ["id"]


class PolicyRuleSerializer(serializers.ModelSerializer):
    class Meta:
        model = PolicyRule
        fields = ["id", "category", "destination", "min_level", "note"]
        read_only_fields = ["id", "category", "destination"]


class AgentTokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="Shown once; only its hash is stored")
    expires_at = serializers.DateTimeField()
    script_url = serializers.CharField()
    upload_url = serializers.CharField()


class AgentResultSerializer(serializers.Serializer):
    step = serializers.CharField(max_length=60)
    serial = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    tool = serializers.CharField(max_length=60, required=False, allow_blank=True, default="")
    tool_version = serializers.CharField(max_length=60, required=False, allow_blank=True, default="")
    command = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    exit_code = serializers.IntegerField()
    output = serializers.CharField(allow_blank=True, trim_whitespace=False)


class AgentUploadSerializer(serializers.Serializer):
    server = serializers.CharField(max_length=253)
    results = AgentResultSerializer(many=True)


class AgentDecisionSerializer(serializers.Serializer):
    medium = serializers.CharField()
    state = serializers.CharField()
    reason = serializers.CharField()


class PublicKeySerializer(serializers.Serializer):
    key_id = serializers.CharField()
    public_key = serializers.CharField()
    created_at = serializers.CharField()
    retired_at = serializers.CharField(allow_null=True)


class PublicKeysSerializer(serializers.Serializer):
    algorithm = serializers.CharField()
    keys = PublicKeySerializer(many=True)
