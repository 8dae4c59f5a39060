"""Django admin for telemetry: ingest sources (audited through the services); XID events and health flags
read-only (services and the health computation write them). Django finds it as the telemetry app's admin."""

from __future__ import annotations

from django.contrib import admin

from fleet.admin import AuditedModelAdmin, ReadOnlyModelAdmin
from telemetry import services
from telemetry.models import HealthFlag, IngestSource, XidEvent


@admin.register(IngestSource)
class IngestSourceAdmin(AuditedModelAdmin):
    list_display = ["name", "kind", "url", "enabled", "last_ok_at", "last_error", "last_samples", "last_unknown"]
    list_filter = ["kind", "enabled"]
    search_fields = ["name", "url"]
    readonly_fields = ["last_attempt_at", "last_ok_at", "last_error", "last_duration_ms", "last_samples",
                       "last_unknown", "last_rejected", "samples_total", "unknown_total", "rejected_total",
                       "unknown_examples"]
    create_service = staticmethod(lambda *, model_class, actor, **fields: services.ingest_source_create(
        actor=actor, **fields))
    update_service = staticmethod(lambda *, obj, actor, before=None, **fields: services.ingest_source_update(
        source=obj, actor=actor, before=before, **fields))
    delete_service = staticmethod(lambda *, obj, actor: services.ingest_source_delete(source=obj, actor=actor))


@admin.register(XidEvent)
class XidEventAdmin(ReadOnlyModelAdmin):
    list_display = ["at", "gpu", "xid", "hardware", "source", "process", "message"]
    list_filter = ["hardware", "source"]
    list_select_related = ["gpu"]
    search_fields = ["=gpu__serial", "=gpu__uuid", "=xid"]


@admin.register(HealthFlag)
class HealthFlagAdmin(ReadOnlyModelAdmin):
    list_display = ["gpu", "kind", "severity", "raised_at", "last_seen_at", "cleared_at"]
    list_filter = ["kind", "severity"]
    list_select_related = ["gpu"]
    search_fields = ["=gpu__serial", "=gpu__uuid"]
