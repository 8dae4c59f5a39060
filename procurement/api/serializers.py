"""Serializers of the procurement API: they validate and shape data; services do the writes."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from rest_framework import serializers

from fleet.api import RefField
from inventory.models import Gpu, GpuModel, ServerPlatform, Site
from procurement.forecasting.engine import METHODS
from procurement.models import (
    Cause,
    Delivery,
    EvidenceKind,
    Failure,
    Forecast,
    ForecastRun,
    GpuAsset,
    OrderLine,
    PurchaseOrder,
    RmaCase,
    SparesPool,
    Vendor,
)


class SlugField(serializers.SlugRelatedField):
    """A slug reference that refuses text PostgreSQL cannot hold (NUL) as "not found" instead of failing the query."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, str) and "\x00" in data:
            self.fail("does_not_exist", slug_name=self.slug_field, value=data.replace("\x00", "\\x00"))
        return super().to_internal_value(data)


def flat_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """Nested serializer errors (``{"lines": [{"quantity": [...]}]}``) as the project's flat error shape:
    ``{"lines[0].quantity": ["..."]}``."""
    out: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            if str(key).isdigit():
                name = f"{prefix}[{key}]"
            else:
                name = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, list) and all(not isinstance(v, dict | list) for v in value):
                out[name] = [str(v) for v in value]
            else:
                out |= flat_errors(value, name)
    elif isinstance(detail, list):
        for i, value in enumerate(detail):
            if isinstance(value, dict | list):
                out |= flat_errors(value, f"{prefix}[{i}]")
            elif value:
                out.setdefault(prefix or "non_field_errors", []).append(str(value))
    else:
        out[prefix or "non_field_errors"] = [str(detail)]
    return out


class ProcurementSiteRef(serializers.ModelSerializer):
    class Meta:
        model = Site
        fields = ["id", "code"]


class ProcurementModelRef(serializers.ModelSerializer):
    class Meta:
        model = GpuModel
        fields = ["id", "name"]


class ProcurementVendorRef(serializers.ModelSerializer):
    class Meta:
        model = Vendor
        fields = ["id", "name"]


class ProcurementGpuRef(serializers.ModelSerializer):
    class Meta:
        model = Gpu
        fields = ["id", "serial", "state"]


class VendorSerializer(serializers.ModelSerializer):
    class Meta:
        model = Vendor
        fields = ["id", "name", "lead_time_days", "rma_contact"]


class OrderLineSerializer(serializers.ModelSerializer):
    gpu_model = RefField(ref=ProcurementModelRef, queryset=GpuModel.objects.all(), required=False, allow_null=True)
    platform = serializers.PrimaryKeyRelatedField(queryset=ServerPlatform.objects.all(), required=False,
                                                  allow_null=True)
    quantity = serializers.IntegerField(min_value=1, max_value=1_000_000)
    unit_price = serializers.DecimalField(max_digits=12, decimal_places=2, min_value=0)
    warranty_months = serializers.IntegerField(min_value=0, max_value=240, required=False)
    support_months = serializers.IntegerField(min_value=0, max_value=240, required=False)

    class Meta:
        model = OrderLine
        fields = ["id", "gpu_model", "platform", "quantity", "unit_price", "warranty_months", "support_months"]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if bool(attrs.get("gpu_model")) == bool(attrs.get("platform")):
            raise serializers.ValidationError({"gpu_model": ["Give a GPU model or a server platform, not both."]})
        return attrs


class PurchaseOrderSerializer(serializers.ModelSerializer):
    vendor = RefField(ref=ProcurementVendorRef, queryset=Vendor.objects.all())
    lines = OrderLineSerializer(many=True)
    currency = serializers.RegexField(r"^[A-Za-z]{3}$", required=False, help_text="ISO 4217 code")

    class Meta:
        model = PurchaseOrder
        fields = ["id", "vendor", "reference", "ordered_on", "promised_on", "currency", "status", "note", "lines",
                  "rejection_reason", "created_at"]
        read_only_fields = ["status", "rejection_reason", "created_at"]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["promised_on"] < attrs["ordered_on"]:
            raise serializers.ValidationError({"promised_on": ["The promised date is before the order date."]})
        if not attrs.get("lines"):
            raise serializers.ValidationError({"lines": ["An order needs at least one line."]})
        return attrs


class RejectSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=500, help_text="Why the order is rejected (the buyer reads it)")


class ReceiveSerializer(serializers.Serializer):
    line = serializers.PrimaryKeyRelatedField(queryset=OrderLine.objects.all(), help_text="Order line id")
    site = SlugField(slug_field="code", queryset=Site.objects.all(), help_text="Site code")
    received_on = serializers.DateField()
    serials = serializers.ListField(child=serializers.CharField(max_length=64), min_length=1, max_length=10_000)
    note = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)


class DeliverySerializer(serializers.ModelSerializer):
    order = serializers.SlugRelatedField(slug_field="reference", read_only=True)
    site = ProcurementSiteRef(read_only=True)
    gpu_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Delivery
        fields = ["id", "order", "site", "received_on", "source", "note", "gpu_count", "created_at"]


class WarrantySerializer(serializers.ModelSerializer):
    gpu = ProcurementGpuRef(read_only=True)
    model = ProcurementModelRef(read_only=True)
    site = ProcurementSiteRef(read_only=True, allow_null=True)

    class Meta:
        model = GpuAsset
        fields = ["id", "gpu", "model", "site", "batch", "order_line", "warranty_start", "warranty_end",
                  "support_end", "in_service_on"]


class FailureRecordSerializer(serializers.ModelSerializer):
    gpu = ProcurementGpuRef(read_only=True)
    model = ProcurementModelRef(read_only=True)
    site = ProcurementSiteRef(read_only=True, allow_null=True)

    class Meta:
        model = Failure
        fields = ["id", "gpu", "model", "site", "batch", "failed_on", "cause", "evidence_kind", "xid", "evidence",
                  "state_change", "recorded_at"]


class RmaCaseSerializer(serializers.ModelSerializer):
    gpu = ProcurementGpuRef(read_only=True)
    vendor = ProcurementVendorRef(read_only=True)
    replacement = ProcurementGpuRef(read_only=True, allow_null=True)
    failure = FailureRecordSerializer(read_only=True, allow_null=True)

    class Meta:
        model = RmaCase
        fields = ["id", "gpu", "vendor", "status", "vendor_case", "opened_on", "shipped_on", "carrier", "tracking",
                  "replacement", "replaced_on", "closed_on", "note", "failure"]


class RmaOpenSerializer(serializers.Serializer):
    gpu = serializers.PrimaryKeyRelatedField(queryset=Gpu.objects.all())
    vendor = serializers.PrimaryKeyRelatedField(queryset=Vendor.objects.all(), required=False, allow_null=True,
                                                default=None, help_text="Default: the board's order vendor")
    cause = serializers.ChoiceField(choices=Cause.choices)
    opened_on = serializers.DateField()
    vendor_case = serializers.CharField(max_length=60, required=False, default="", allow_blank=True)
    evidence_kind = serializers.ChoiceField(choices=EvidenceKind.choices, default=EvidenceKind.NOTE)
    xid = serializers.IntegerField(min_value=0, max_value=100_000, required=False, allow_null=True, default=None)
    evidence = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)
    note = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)


class RmaShipSerializer(serializers.Serializer):
    shipped_on = serializers.DateField()
    carrier = serializers.CharField(max_length=40)
    tracking = serializers.CharField(max_length=80)
    vendor_case = serializers.CharField(max_length=60, required=False, default="", allow_blank=True)


class RmaReplaceSerializer(serializers.Serializer):
    serial = serializers.CharField(max_length=64)
    received_on = serializers.DateField()


class RmaCloseSerializer(serializers.Serializer):
    closed_on = serializers.DateField()
    note = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)


class SparesPoolSerializer(serializers.ModelSerializer):
    sites = SlugField(slug_field="code", queryset=Site.objects.all(), many=True)
    target_fill_rate = serializers.DecimalField(max_digits=4, decimal_places=3, min_value=Decimal("0.5"),
                                                max_value=Decimal("0.999"), required=False)

    class Meta:
        model = SparesPool
        fields = ["id", "name", "sites", "target_fill_rate"]


class ForecastRunSerializer(serializers.ModelSerializer):
    class Meta:
        model = ForecastRun
        fields = ["id", "as_of", "method", "params", "actor_name", "created_at", "duration_s"]


class ForecastRunCreateSerializer(serializers.Serializer):
    as_of = serializers.DateField(required=False, allow_null=True, default=None,
                                  help_text="Compute with the history before this date only (default: today)")
    method = serializers.ChoiceField(choices=sorted(METHODS), default="adaptive")
    lead_days = serializers.IntegerField(min_value=1, max_value=1000, required=False, allow_null=True, default=None)


class ForecastSerializer(serializers.ModelSerializer):
    gpu_model = ProcurementModelRef(read_only=True)
    site = ProcurementSiteRef(read_only=True, allow_null=True)
    pool = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    as_of = serializers.DateField(source="run.as_of", read_only=True)

    class Meta:
        model = Forecast
        fields = ["id", "run", "as_of", "scope", "gpu_model", "site", "pool", "installed", "failures",
                  "exposure_years", "rate", "rate_lo", "rate_hi", "vmr", "lead_days", "lead_source", "demand_mean",
                  "demand_p05", "demand_p95", "target_fill_rate", "recommended", "fill_rate", "service_level",
                  "spares", "spares_fill_rate", "shortfall", "on_order", "reorder", "beta", "alert", "inputs"]


class BacktestQuerySerializer(serializers.Serializer):
    date_from = serializers.DateField(help_text="First origin (rounded up to the 1st of a month)")
    date_to = serializers.DateField()
    lead_days = serializers.IntegerField(min_value=1, max_value=730, default=90)
    fill_rate = serializers.FloatField(min_value=0.5, max_value=0.999, required=False, allow_null=True, default=None)
    model = serializers.PrimaryKeyRelatedField(queryset=GpuModel.objects.all(), required=False, allow_null=True,
                                               default=None)
    site = SlugField(slug_field="code", queryset=Site.objects.all(), required=False,
                                        allow_null=True, default=None)
    pool = SlugField(slug_field="name", queryset=SparesPool.objects.all(), required=False,
                                        allow_null=True, default=None)
    method = serializers.ChoiceField(choices=sorted(METHODS), default="adaptive")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["date_to"] < attrs["date_from"]:
            raise serializers.ValidationError({"date_to": ["Before date_from."]})
        if (attrs["date_to"] - attrs["date_from"]).days > 12 * 366:
            raise serializers.ValidationError({"date_to": ["At most 12 years of origins."]})
        if attrs.get("site") and attrs.get("pool"):
            raise serializers.ValidationError({"pool": ["Give a site or a pool, not both."]})
        return attrs


class RuleScoreSerializer(serializers.Serializer):
    fill_rate = serializers.FloatField()
    mean_stock = serializers.FloatField()
    stockout_windows = serializers.IntegerField()


class BacktestOriginSerializer(serializers.Serializer):
    as_of = serializers.DateField()
    model = serializers.CharField()
    site = serializers.CharField(allow_null=True)
    pool = serializers.CharField(required=False)
    recommended = serializers.IntegerField(help_text="The stock the policy held: the forecast's, sized by calibration")
    forecast = serializers.IntegerField(help_text="The forecast's own stock, before calibration")
    sizing = serializers.CharField(help_text="What calibration picked as of this origin (forecast x k, or a rule)")
    demand = serializers.IntegerField()
    installed = serializers.IntegerField()
    rate = serializers.FloatField()
    alert = serializers.BooleanField()
    rules = serializers.DictField(child=serializers.IntegerField())


class CalibrationSerializer(serializers.Serializer):
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=["forecast", "rule"])
    value = serializers.FloatField()
    scored = serializers.IntegerField(help_text="Lead-time windows over before the origin, with GPUs in service at "
                                                       "their origin, that it learned from")
    fill = serializers.FloatField(allow_null=True)
    stock = serializers.FloatField(allow_null=True)
    base_fill = serializers.FloatField(allow_null=True)
    base_stock = serializers.FloatField(allow_null=True)


class VerdictSerializer(serializers.Serializer):
    winner = serializers.CharField()
    reached = serializers.BooleanField()
    text = serializers.CharField()


class BacktestModelSerializer(serializers.Serializer):
    """The scores of a set of backtest origins (one model, or all together) and which won."""

    fill_rate = serializers.FloatField()
    mean_stock = serializers.FloatField()
    stockout_windows = serializers.IntegerField()
    target_fill_rate = serializers.FloatField()
    rules = serializers.DictField(child=RuleScoreSerializer())
    uncalibrated = RuleScoreSerializer(help_text="The forecast's own stock, before calibration")
    verdict = VerdictSerializer()


class BacktestSerializer(BacktestModelSerializer):
    origins = BacktestOriginSerializer(many=True)
    lead_days = serializers.IntegerField()
    method = serializers.CharField()
    last_scored = serializers.DateField(help_text="The last origin whose lead time lies in the recorded data")
    calibration = serializers.DictField(child=CalibrationSerializer(), help_text="Per model, as of the last origin")
    models = serializers.DictField(child=BacktestModelSerializer(), help_text="Per model: its scores and verdict "
                                   "(the top-level scores and verdict are of all models together)")
