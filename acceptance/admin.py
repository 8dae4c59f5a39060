"""The Django admin: runs and checks are evidence (read-only here); burn-in policies and check thresholds are
edited through audited writes."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import transaction
from django.http import HttpRequest

from acceptance.models import AcceptanceCheck, BurnInPolicy, CheckThreshold, DiagnosticRun
from fleet.admin import ReadOnlyModelAdmin
from fleet.audit import audit_event, audited_delete, audited_update, diff, snapshot
from fleet.models import AuditAction


class AuditedAdmin(admin.ModelAdmin):
    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        with transaction.atomic():
            if change:
                audited_update(obj=obj, actor=request.user, before=snapshot(type(obj).objects.get(pk=obj.pk)))
            else:
                obj.save()
                audit_event(actor=request.user, action=AuditAction.CREATE, obj=obj,
                            changes=diff({}, snapshot(obj))).save()

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        with transaction.atomic():
            audited_delete(obj=obj, actor=request.user)


@admin.register(BurnInPolicy)
class BurnInPolicyAdmin(AuditedAdmin):
    list_display = ["__str__", "min_level", "required_runs", "min_hours", "return_min_level", "infant_days"]


@admin.register(CheckThreshold)
class CheckThresholdAdmin(AuditedAdmin):
    list_display = ["gpu_model", "name", "min_value", "max_value", "unit"]


@admin.register(DiagnosticRun)
class DiagnosticRunAdmin(ReadOnlyModelAdmin):
    list_display = ["__str__", "server", "level", "dcgm_version", "driver_version", "ran_at", "source"]
    list_filter = ["level", "source"]


@admin.register(AcceptanceCheck)
class AcceptanceCheckAdmin(ReadOnlyModelAdmin):
    list_display = ["gpu", "name", "passed", "value", "unit", "measured_at"]
