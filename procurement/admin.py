"""Django admin of the procurement app, for data fixes: every save and delete is audited like the services'
writes (the role groups' model permissions decide who may)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Model

from fleet.audit import audit_source, audit_write, audited_delete, diff, snapshot
from fleet.models import AuditAction, AuditSource
from procurement.models import (
    Delivery,
    DemandPoint,
    Failure,
    ForecastRun,
    GpuAsset,
    LeadTime,
    ModelEconomics,
    OrderLine,
    PurchaseOrder,
    RmaCase,
    ServerAsset,
    SparesPool,
    Vendor,
)


class AuditedAdmin(admin.ModelAdmin):
    def save_model(self, request: Any, obj: Model, form: Any, change: bool) -> None:
        before = snapshot(type(obj).objects.get(pk=obj.pk)) if change and obj.pk else {}
        super().save_model(request, obj, form, change)
        with audit_source(AuditSource.ADMIN):
            audit_write(actor=request.user, action=AuditAction.UPDATE if change else AuditAction.CREATE, obj=obj,
                        changes=diff(before, snapshot(obj)))

    def delete_model(self, request: Any, obj: Model) -> None:
        with audit_source(AuditSource.ADMIN):
            audited_delete(obj=obj, actor=request.user)


class LineInline(admin.TabularInline):
    model = OrderLine
    extra = 0


@admin.register(PurchaseOrder)
class PurchaseOrderAdmin(AuditedAdmin):
    list_display = ["reference", "vendor", "ordered_on", "promised_on", "status"]
    list_filter = ["status", "vendor"]
    search_fields = ["reference"]
    inlines = [LineInline]


@admin.register(RmaCase)
class RmaCaseAdmin(AuditedAdmin):
    list_display = ["id", "gpu", "vendor", "status", "vendor_case", "opened_on"]
    list_filter = ["status", "vendor"]
    raw_id_fields = ["gpu", "replacement", "failure"]


@admin.register(Failure)
class FailureAdmin(AuditedAdmin):
    list_display = ["gpu", "model", "site", "failed_on", "cause", "evidence_kind"]
    list_filter = ["cause", "evidence_kind", "model"]
    raw_id_fields = ["gpu", "state_change"]


@admin.register(GpuAsset)
class GpuAssetAdmin(AuditedAdmin):
    list_display = ["gpu", "model", "site", "batch", "in_service_on", "removed_on", "warranty_end"]
    list_filter = ["model", "site"]
    raw_id_fields = ["gpu", "order_line", "delivery"]
    search_fields = ["gpu__serial", "batch"]


@admin.register(ServerAsset)
class ServerAssetAdmin(AuditedAdmin):
    raw_id_fields = ["server", "order_line", "delivery"]


@admin.register(ForecastRun)
class ForecastRunAdmin(admin.ModelAdmin):
    list_display = ["id", "as_of", "method", "actor_name", "created_at", "duration_s"]

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False  # a stored forecast shows a past recommendation as it was


for model in (Vendor, Delivery, SparesPool, LeadTime, ModelEconomics, DemandPoint):
    admin.site.register(model, AuditedAdmin)
