"""Serializers: validate input and shape output. They never save; the viewsets hand validated data to the
services. Foreign keys are written as ids and read as small references from the selectors' joins.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from rest_framework import serializers

from fleet.api import RefField
from inventory.identity import normalize_serial, normalize_uuid
from inventory.models import (
    FirmwareObservation,
    Gpu,
    GpuModel,
    GpuMove,
    GpuStateChange,
    Hall,
    NvlinkDomain,
    PowerFeed,
    Rack,
    Row,
    SchedulerNode,
    Server,
    ServerPlatform,
    Site,
    gpu_identity,
)

# --- references (what a related object shows inside another) -------------------------------------------


class SiteRefSerializer(serializers.ModelSerializer):
    class Meta:
        model = Site
        fields = ["id", "code"]


class HallRefSerializer(serializers.ModelSerializer):
    class Meta:
        model = Hall
        fields = ["id", "name"]


class RowRefSerializer(serializers.ModelSerializer):
    class Meta:
        model = Row
        fields = ["id", "name"]


class RackRefSerializer(serializers.ModelSerializer):
    class Meta:
        model = Rack
        fields = ["id", "name"]


class ServerRefSerializer(serializers.ModelSerializer):
    class Meta:
        model = Server
        fields = ["id", "hostname"]


class GpuModelRefSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuModel
        fields = ["id", "sku", "name"]


class NamedRefSerializer(serializers.Serializer):
    """Platforms and NVLink domains: id and name."""

    id = serializers.IntegerField()
    name = serializers.CharField()

    class Meta:
        fields = ["id", "name"]


def _ref(ref: type[serializers.Serializer], model: type | None = None, **kwargs: Any) -> RefField:
    if model is None:
        kwargs.setdefault("read_only", True)
    else:
        kwargs["queryset"] = model.objects.all()  # type: ignore[attr-defined]
    return RefField(ref=ref, **kwargs)


# --- locations -----------------------------------------------------------------------------------------


class SiteSerializer(serializers.ModelSerializer):
    class Meta:
        model = Site
        fields = ["id", "code", "name", "timezone", "electricity_price_kwh", "pue"]
        # The model's default is the float 1.3, which fails its own two-decimal validation in full_clean.
        extra_kwargs = {"pue": {"default": Decimal(str(Site._meta.get_field("pue").default)).quantize(
            Decimal("0.01"))}}


class HallSerializer(serializers.ModelSerializer):
    site = _ref(SiteRefSerializer, Site)

    class Meta:
        model = Hall
        fields = ["id", "site", "name"]


class RowSerializer(serializers.ModelSerializer):
    hall = _ref(HallRefSerializer, Hall)
    site = _ref(SiteRefSerializer, help_text="The hall's site")

    class Meta:
        model = Row
        fields = ["id", "hall", "site", "name"]


class PowerFeedSerializer(serializers.ModelSerializer):
    site = _ref(SiteRefSerializer, Site)

    class Meta:
        model = PowerFeed
        fields = ["id", "site", "name", "capacity_kw"]


class RackSerializer(serializers.ModelSerializer):
    row = _ref(RowRefSerializer, Row)
    site = _ref(SiteRefSerializer, help_text="The row's site")
    power_feeds = serializers.PrimaryKeyRelatedField(queryset=PowerFeed.objects.all(), many=True, required=False,
                                                     help_text="Ids of the power feeds supplying the rack")

    class Meta:
        model = Rack
        fields = ["id", "row", "site", "name", "position", "height_u", "cooling", "power_budget_kw", "power_feeds"]


class NvlinkDomainSerializer(serializers.ModelSerializer):
    site = _ref(SiteRefSerializer, Site)

    class Meta:
        model = NvlinkDomain
        fields = ["id", "site", "name"]


# --- catalog --------------------------------------------------------------------------------------------


class GpuModelSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuModel
        fields = ["id", "sku", "name", "architecture", "memory_gib", "tdp_w", "slowdown_temp_c", "shutdown_temp_c"]


class PlatformSerializer(serializers.ModelSerializer):
    gpu_model = _ref(GpuModelRefSerializer, GpuModel, required=False, allow_null=True)

    class Meta:
        model = ServerPlatform
        fields = ["id", "name", "vendor", "gpu_model", "gpu_slots", "height_u"]


# --- servers and GPUs -----------------------------------------------------------------------------------


class SchedulerNodeSerializer(serializers.ModelSerializer):
    """What the workload scheduler says about the server's node (refreshed by beat; null: no scheduler, or the
    node is not known to it)."""

    class Meta:
        model = SchedulerNode
        fields = ["name", "state", "reason", "reason_user", "reason_at", "drained_by", "job_count", "job_ids",
                  "refreshed_at"]
        read_only_fields = fields


class ServerSerializer(serializers.ModelSerializer):
    platform = _ref(NamedRefSerializer, ServerPlatform, required=False, allow_null=True)
    rack = _ref(RackRefSerializer, Rack, required=False, allow_null=True,
                help_text="Empty: the server is unplaced and needs a rack position")
    nvlink_domain = _ref(NamedRefSerializer, NvlinkDomain, required=False, allow_null=True)
    site = _ref(SiteRefSerializer, allow_null=True, help_text="The rack's site")
    row = serializers.PrimaryKeyRelatedField(read_only=True, allow_null=True, help_text="Id of the rack's row")
    scheduler = SchedulerNodeSerializer(source="scheduler_state", read_only=True, allow_null=True, default=None)

    class Meta:
        model = Server
        fields = ["id", "hostname", "serial", "platform", "bmc_address", "rack", "rack_unit", "nvlink_domain",
                  "site", "row", "needs_placement", "scheduler_node", "scheduler"]
        extra_kwargs = {"rack_unit": {"required": False}}


class GpuSerializer(serializers.ModelSerializer):
    """A GPU's identity, asset and firmware fields. State and placement are read-only here: they change
    through ``POST /gpus/{id}/transition/`` and ``POST /gpus/{id}/move/``, which keep their history."""

    ACTION_FIELDS = {"state": "transition", "server": "move", "pci_bus_id": "move", "module_id": "move"}

    model = _ref(GpuModelRefSerializer, GpuModel)
    server = _ref(ServerRefSerializer, allow_null=True)
    site = _ref(SiteRefSerializer, allow_null=True)
    row = serializers.PrimaryKeyRelatedField(read_only=True, allow_null=True)
    rack = _ref(RackRefSerializer, allow_null=True)
    identity = serializers.CharField(read_only=True, help_text="What an operator reads as this GPU's name")

    class Meta:
        model = Gpu
        fields = ["id", "identity", "serial", "serial_raw", "uuid", "uuid_raw", "identity_masked", "model",
                  "board_part_number", "asset_tag", "warranty_end", "state", "state_changed_at", "server",
                  "module_id", "pci_bus_id", "minor_number", "site", "row", "rack", "vbios_version",
                  "inforom_image", "driver_version", "created_at", "updated_at"]
        read_only_fields = ["state", "state_changed_at", "module_id", "pci_bus_id", "created_at", "updated_at"]

    def to_representation(self, gpu: Gpu) -> dict[str, Any]:
        """The same document DRF's field-by-field path builds (a test holds the two equal), written out
        directly by :func:`gpu_document`, which the list endpoint also feeds from ``.values()``."""
        return gpu_document({column: _column_value(gpu, column) for column in GPU_COLUMNS})

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        """Refuse (rather than silently ignore) an attempt to change state or placement here; sending
        back the current values, as a client round-tripping a GET does, is fine."""
        if hasattr(data, "keys"):
            errors = {name: [f"Read-only: change it with POST /api/v1/gpus/{{id}}/{action}/."]
                      for name, action in self.ACTION_FIELDS.items()
                      if name in data and self._differs(name, data[name])}
            if errors:
                raise serializers.ValidationError(errors)
        return super().to_internal_value(data)

    def _differs(self, name: str, value: Any) -> bool:
        if self.instance is None:
            return value not in (None, "")
        current = getattr(self.instance, "server_id" if name == "server" else name)
        if isinstance(value, dict):  # a reference as read: {"id": ..., "hostname": ...}
            value = value.get("id")
        return str(value if value is not None else "") != str(current if current is not None else "")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Empty identities are NULL (unique columns); masked ones keep the raw text and flag the GPU."""
        for name, normalize in (("serial", normalize_serial), ("uuid", normalize_uuid)):
            if name not in attrs:
                continue
            raw = (attrs[name] or "").strip()
            attrs[name] = normalize(raw) if raw else None
            if raw and attrs[name] is None:
                attrs.setdefault(f"{name}_raw", raw)
                attrs["identity_masked"] = True
        if "asset_tag" in attrs:
            attrs["asset_tag"] = (attrs["asset_tag"] or "").strip() or None
        return attrs


# --- history (read-only) ---------------------------------------------------------------------------------


class GpuStateChangeSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuStateChange
        fields = ["id", "gpu", "from_state", "to_state", "actor_name", "reason", "at"]


class GpuMoveSerializer(serializers.ModelSerializer):
    from_server = _ref(ServerRefSerializer, allow_null=True)
    to_server = _ref(ServerRefSerializer, allow_null=True)

    class Meta:
        model = GpuMove
        fields = ["id", "gpu", "kind", "from_server", "from_pci_bus_id", "from_module_id", "to_server",
                  "to_pci_bus_id", "to_module_id", "actor_name", "reason", "at"]


class FirmwareObservationSerializer(serializers.ModelSerializer):
    class Meta:
        model = FirmwareObservation
        fields = ["id", "gpu", "server", "component", "version", "source", "first_seen", "last_seen"]


# --- the GPU document, from an instance or from a ``.values()`` row ---------------------------------------

# Columns of the GPU document. The list endpoint reads exactly these with ``.values()`` (no model
# instances: ~5 ms less per page of 50, bench/README.md); single GPUs read them from the instance.
GPU_COLUMNS = (
    "id", "serial", "serial_raw", "uuid", "uuid_raw", "identity_masked", "model_id", "model__sku", "model__name",
    "board_part_number", "asset_tag", "warranty_end", "state", "state_changed_at", "server_id",
    "server__hostname", "module_id", "pci_bus_id", "minor_number", "site_id", "site__code", "row_id", "rack_id",
    "rack__name", "vbios_version", "inforom_image", "driver_version", "created_at", "updated_at",
)


def _column_value(gpu: Gpu, column: str) -> Any:
    relation, _, attribute = column.partition("__")
    if not attribute:
        return getattr(gpu, relation)
    related = getattr(gpu, relation)
    return None if related is None else getattr(related, attribute)


def _when(value: Any) -> str | None:
    if value is None:
        return None
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def gpu_document(row: dict[str, Any]) -> dict[str, Any]:
    """A GPU as the API shows it, from its :data:`GPU_COLUMNS`."""
    return {
        "id": row["id"],
        "identity": gpu_identity(serial=row["serial"], uuid=row["uuid"], hostname=row["server__hostname"],
                                 pci_bus_id=row["pci_bus_id"], pk=row["id"]),
        "serial": row["serial"], "serial_raw": row["serial_raw"], "uuid": row["uuid"], "uuid_raw": row["uuid_raw"],
        "identity_masked": row["identity_masked"],
        "model": {"id": row["model_id"], "sku": row["model__sku"], "name": row["model__name"]},
        "board_part_number": row["board_part_number"], "asset_tag": row["asset_tag"],
        "warranty_end": row["warranty_end"] and row["warranty_end"].isoformat(),
        "state": row["state"], "state_changed_at": _when(row["state_changed_at"]),
        "server": row["server_id"] and {"id": row["server_id"], "hostname": row["server__hostname"]},
        "module_id": row["module_id"], "pci_bus_id": row["pci_bus_id"], "minor_number": row["minor_number"],
        "site": row["site_id"] and {"id": row["site_id"], "code": row["site__code"]},
        "row": row["row_id"],
        "rack": row["rack_id"] and {"id": row["rack_id"], "name": row["rack__name"]},
        "vbios_version": row["vbios_version"], "inforom_image": row["inforom_image"],
        "driver_version": row["driver_version"], "created_at": _when(row["created_at"]),
        "updated_at": _when(row["updated_at"]),
    }
