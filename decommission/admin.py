"""The Django admin for data fixes. Evidence events and certificates are read-only here (the database refuses
changes to them anyway); a request's state never changes in a form (the workflow's services move it); the
policy table and processors are edited through audited writes."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from decommission.models import (
    AgentToken,
    Certificate,
    CustodyTransfer,
    DecommissionRequest,
    EvidenceEvent,
    Medium,
    PolicyRule,
    Processor,
)
from fleet.admin import ReadOnlyModelAdmin
from fleet.audit import audit_write, audited_update, diff, snapshot
from fleet.models import AuditAction


class AuditedFixAdmin(admin.ModelAdmin):
    """Edits of the listed fields only, audited with the before/after of what changed; no add, no delete."""

    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        before = snapshot(type(obj).objects.get(pk=obj.pk))
        audited_update(obj=obj, actor=request.user, before=before)


@admin.register(PolicyRule)
class PolicyRuleAdmin(AuditedFixAdmin):
    list_display = ["category", "destination", "min_level", "note"]
    fields = ["category", "destination", "min_level", "note"]
    readonly_fields = ["category", "destination"]


@admin.register(Processor)
class ProcessorAdmin(admin.ModelAdmin):
    list_display = ["name", "certification", "certificate_id", "expires_on"]
    search_fields = ["name", "certificate_id"]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        before = snapshot(type(obj).objects.get(pk=obj.pk)) if change else {}
        obj.save()
        audit_write(actor=request.user, action=AuditAction.UPDATE if change else AuditAction.CREATE, obj=obj,
                    changes=diff(before, snapshot(obj)))


@admin.register(DecommissionRequest)
class RequestAdmin(AuditedFixAdmin):
    list_display = ["__str__", "state", "category", "destination", "level", "created_at"]
    list_filter = ["state", "category", "destination"]
    fields = ["reason", "location", "state", "category", "destination", "min_level", "level", "hold_reason"]
    readonly_fields = ["state", "category", "destination", "min_level", "level", "hold_reason"]


@admin.register(Medium)
class MediumAdmin(AuditedFixAdmin):
    """Fix a medium's make or model as recorded; never its serial, state or level (evidence refers to them)."""

    list_display = ["serial", "media_type", "asset", "state", "level"]
    list_filter = ["media_type", "state"]
    search_fields = ["serial"]
    fields = ["serial", "media_type", "manufacturer", "model", "state", "level", "technique"]
    readonly_fields = ["serial", "media_type", "state", "level", "technique"]


@admin.register(EvidenceEvent)
class EvidenceEventAdmin(ReadOnlyModelAdmin):
    list_display = ["request", "seq", "step", "result", "at", "actor_name"]
    list_filter = ["result"]
    search_fields = ["step"]


@admin.register(Certificate)
class CertificateAdmin(ReadOnlyModelAdmin):
    list_display = ["id", "kind", "request", "asset", "key_id", "issued_at"]
    list_filter = ["kind"]


@admin.register(CustodyTransfer)
class CustodyTransferAdmin(ReadOnlyModelAdmin):
    list_display = ["request", "kind", "from_party", "to_party", "count", "weight_kg", "at"]


@admin.register(AgentToken)
class AgentTokenAdmin(ReadOnlyModelAdmin):
    list_display = ["asset", "expires_at", "fetched_at", "used_at"]
