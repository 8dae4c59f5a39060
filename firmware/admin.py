"""Django admin of the firmware app: catalog records change through the firmware services (audited); rollouts,
compliance and tuples are records the engine and the recompute write, shown read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from firmware.models import (
    Baseline,
    Bundle,
    BundleItem,
    ComplianceStatus,
    ComponentSpec,
    FirmwareTuple,
    MaintenanceWindow,
    Pool,
    Release,
    Rollout,
    RolloutTarget,
    RolloutWave,
    TargetStep,
)
from firmware.services import catalog as services
from fleet.admin import AuditedModelAdmin, ReadOnlyModelAdmin, adopt
from fleet.audit import audited_create, audited_delete, audited_update, snapshot


def _create(*, model_class: type, actor: Any, **fields: Any) -> Any:
    return audited_create(model_class=model_class, actor=actor, **fields)


class CatalogAdmin(AuditedModelAdmin):
    create_service = _create
    update_service = audited_update
    delete_service = audited_delete


@admin.register(ComponentSpec)
class ComponentSpecAdmin(CatalogAdmin):
    list_display = ["component", "per_gpu", "update_method", "activation", "inventory_pattern", "apply_order"]


@admin.register(Release)
class ReleaseAdmin(CatalogAdmin):
    """Releases are created through ``release_create`` (image rules, audit); here only notes and
    applicability change, through ``release_update``."""

    list_display = ["component", "version", "channel", "released_at", "created_at"]
    list_filter = ["component", "channel"]
    search_fields = ["version"]
    readonly_fields = ["component", "version", "sha256", "size_bytes", "image_url", "image_file", "channel",
                       "success_count", "failure_count", "revoked_reason"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Release, form: Any, change: bool) -> None:
        before = snapshot(Release.objects.get(pk=obj.pk))
        fields = {name: form.cleaned_data[name] for name in form.changed_data}
        obj.refresh_from_db()
        if fields:
            audited_update(obj=obj, actor=request.user, before=before, **fields)


class BundleItemInline(admin.TabularInline):
    model = BundleItem
    extra = 0
    can_delete = False
    readonly_fields = ["release", "component", "order"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Bundle)
class BundleAdmin(CatalogAdmin):
    list_display = ["name", "platform", "created_at", "created_by"]
    list_select_related = ["platform", "created_by"]
    readonly_fields = ["platform", "created_by"]
    inlines = [BundleItemInline]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # bundle_create checks releases and orders them


@admin.register(Baseline)
class BaselineAdmin(CatalogAdmin):
    list_display = ["id", "platform", "pool", "bundle", "valid_from", "valid_to", "approved_by"]
    list_select_related = ["platform", "pool", "bundle", "approved_by"]
    readonly_fields = ["approved_by"]

    def save_model(self, request: HttpRequest, obj: Baseline, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        adopt(obj, services.baseline_create(bundle=obj.bundle, pool=obj.pool, valid_from=obj.valid_from,
                                            valid_to=obj.valid_to, actor=request.user))


@admin.register(Pool)
class PoolAdmin(CatalogAdmin):
    list_display = ["name", "kind"]
    filter_horizontal = ["servers"]
    search_fields = ["name"]


@admin.register(MaintenanceWindow)
class MaintenanceWindowAdmin(CatalogAdmin):
    list_display = ["name", "kind", "site", "pool", "starts_at", "ends_at", "weekdays", "enabled"]
    list_filter = ["kind", "enabled"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # window_create validates one-off vs weekly


@admin.register(ComplianceStatus)
class ComplianceStatusAdmin(ReadOnlyModelAdmin):
    list_display = ["server", "component", "expected", "actual", "gpu_count", "status", "computed_at"]
    list_filter = ["status", "component"]
    list_select_related = ["server"]
    raw_id_fields = ["server", "baseline"]


@admin.register(FirmwareTuple)
class FirmwareTupleAdmin(ReadOnlyModelAdmin):
    list_display = ["server", "tuple_hash", "mixed", "computed_at"]
    list_filter = ["mixed"]


@admin.register(Rollout)
class RolloutAdmin(ReadOnlyModelAdmin):
    list_display = ["id", "name", "bundle", "state", "created_by", "approved_by", "created_at"]
    list_filter = ["state"]
    list_select_related = ["bundle", "created_by", "approved_by"]


@admin.register(RolloutWave)
class RolloutWaveAdmin(ReadOnlyModelAdmin):
    list_display = ["rollout", "index", "name", "state", "planned"]
    list_select_related = ["rollout"]


@admin.register(RolloutTarget)
class RolloutTargetAdmin(ReadOnlyModelAdmin):
    list_display = ["rollout", "server", "state", "attempts", "error_class"]
    list_filter = ["state", "error_class"]
    list_select_related = ["rollout", "server"]
    raw_id_fields = ["rollout", "wave", "server"]


@admin.register(TargetStep)
class TargetStepAdmin(ReadOnlyModelAdmin):
    list_display = ["idem_key", "kind", "outcome", "requested_at", "finished_at"]
    raw_id_fields = ["target", "release"]
