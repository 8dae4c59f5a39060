"""The Django admin for data fixes: every inventory model, searchable, audited through ``inventory.services``.

GPU state never changes in a form: the "Transition selected GPUs" action calls the bulk transition
service. A GPU's placement edited here becomes a recorded move (``services.gpu_move``).
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest
from django.template.response import TemplateResponse

from fleet.admin import AuditedModelAdmin, ReadOnlyModelAdmin, adopt
from fleet.models import Job
from inventory import services
from inventory.filters import gpu_search
from inventory.models import (
    FirmwareObservation,
    Gpu,
    GpuModel,
    GpuMove,
    GpuState,
    GpuStateChange,
    Hall,
    ImportRun,
    NvlinkDomain,
    PowerFeed,
    Rack,
    Row,
    SchedulerHold,
    SchedulerNode,
    Server,
    ServerPlatform,
    Site,
)


class InventoryAdmin(AuditedModelAdmin):
    create_service = services.record_create
    update_service = services.record_update
    delete_service = services.record_delete


@admin.register(Site)
class SiteAdmin(InventoryAdmin):
    list_display = ["code", "name", "timezone", "electricity_price_kwh", "pue"]
    search_fields = ["code", "name"]


@admin.register(Hall)
class HallAdmin(InventoryAdmin):
    list_display = ["name", "site"]
    list_filter = ["site"]
    list_select_related = ["site"]
    search_fields = ["name", "site__code"]


@admin.register(Row)
class RowAdmin(InventoryAdmin):
    list_display = ["name", "hall", "site"]
    list_filter = ["site"]
    list_select_related = ["hall__site", "site"]
    search_fields = ["name", "site__code"]
    readonly_fields = ["site"]


@admin.register(PowerFeed)
class PowerFeedAdmin(InventoryAdmin):
    list_display = ["name", "site", "capacity_kw"]
    list_filter = ["site"]
    list_select_related = ["site"]
    search_fields = ["name", "site__code"]


@admin.register(Rack)
class RackAdmin(InventoryAdmin):
    list_display = ["name", "site", "row", "position", "height_u", "cooling", "power_budget_kw"]
    list_filter = ["site", "cooling"]
    list_select_related = ["site", "row__site"]
    search_fields = ["name"]
    autocomplete_fields = ["row", "power_feeds"]
    readonly_fields = ["site"]


@admin.register(NvlinkDomain)
class NvlinkDomainAdmin(InventoryAdmin):
    list_display = ["name", "site"]
    list_filter = ["site"]
    list_select_related = ["site"]
    search_fields = ["name"]


@admin.register(GpuModel)
class GpuModelAdmin(InventoryAdmin):
    list_display = ["name", "sku", "architecture", "memory_gib", "tdp_w"]
    list_filter = ["architecture"]
    search_fields = ["name", "sku"]


@admin.register(ServerPlatform)
class ServerPlatformAdmin(InventoryAdmin):
    list_display = ["name", "vendor", "gpu_model", "gpu_slots", "height_u"]
    list_filter = ["vendor"]
    list_select_related = ["gpu_model"]
    search_fields = ["name", "vendor"]
    autocomplete_fields = ["gpu_model"]


@admin.register(Server)
class ServerAdmin(InventoryAdmin):
    list_display = ["hostname", "serial", "platform", "site", "rack", "rack_unit", "nvlink_domain"]
    list_filter = ["site", "platform"]
    list_select_related = ["platform", "site", "rack", "nvlink_domain"]
    search_fields = ["^hostname", "=serial", "=bmc_address"]
    autocomplete_fields = ["platform", "rack", "nvlink_domain"]
    readonly_fields = ["site", "row"]


# --- GPUs ----------------------------------------------------------------------------------------------


def _gpus(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


class TransitionForm(forms.Form):
    to_state = forms.ChoiceField(label="New state", choices=GpuState.choices)
    reason = forms.CharField(max_length=500, required=False)


@admin.register(Gpu)
class GpuAdmin(InventoryAdmin):
    list_display = ["__str__", "uuid", "model", "state", "server", "module_id", "site", "vbios_version", "asset_tag"]
    list_filter = ["state", "identity_masked", "site", "model"]
    list_select_related = ["model", "server", "site"]
    search_fields = ["serial", "uuid", "asset_tag", "server__hostname"]  # see get_search_results
    search_help_text = "Exact serial, UUID or asset tag, or the start of a hostname"
    autocomplete_fields = ["server", "model"]
    readonly_fields = ["state", "state_changed_at", "site", "row", "rack", "created_at", "updated_at"]
    actions = ["transition_selected"]

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Gpu],
                           search_term: str) -> tuple[QuerySet[Gpu], bool]:
        """The GPU list's own search (indexed lookups), not the admin's ``icontains`` over joins."""
        return gpu_search(queryset, search_term), False

    def save_model(self, request: HttpRequest, obj: Gpu, form: ModelForm, change: bool) -> None:
        """Identity, asset and firmware edits are a record update; a changed slot is a recorded move."""
        if not change:
            return super().save_model(request, obj, form, change)
        current = Gpu.objects.get(pk=obj.pk)
        target = (obj.server, obj.pci_bus_id, obj.module_id)
        moved = (obj.server_id, obj.pci_bus_id, obj.module_id) != (current.server_id, current.pci_bus_id,
                                                                   current.module_id)
        obj.server, obj.pci_bus_id, obj.module_id = current.server, current.pci_bus_id, current.module_id
        super().save_model(request, obj, form, change)
        if moved:
            gpu = services.gpu_move(gpu=obj, to_server=target[0], to_pci_bus_id=target[1], to_module_id=target[2],
                                    actor=request.user, reason="Django admin")
            adopt(obj, gpu)
        return None

    @admin.action(description="Transition selected GPUs", permissions=["change"])
    def transition_selected(self, request: HttpRequest, queryset: QuerySet[Gpu]) -> TemplateResponse | None:
        form = TransitionForm(request.POST if "apply" in request.POST else None)
        if form.is_bound and form.is_valid():
            ids = list(queryset.values_list("id", flat=True))
            to_state = form.cleaned_data["to_state"]
            try:
                result = services.gpu_bulk_transition(gpu_ids=ids, to_state=to_state, actor=request.user,
                                                      reason=form.cleaned_data["reason"])
            except ValidationError as exc:
                self.message_user(request, "Nothing changed: " + " ".join(exc.messages), messages.ERROR)
                return None
            if isinstance(result, Job):
                self.message_user(request, f"{_gpus(len(ids))} moving to {to_state} in background job #{result.pk}.",
                                  messages.SUCCESS)
            else:
                self.message_user(request, f"{_gpus(result.done)} moved to {to_state}.", messages.SUCCESS)
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Transition selected GPUs",
            "opts": self.opts,
            "form": form,
            "count": queryset.count(),
            "sample": queryset[:20],
            "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "select_across": request.POST.get("select_across") == "1",
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
        }
        return TemplateResponse(request, "admin/inventory/gpu/transition_selected.html", context)


# --- observations and history ------------------------------------------------------------------------------


@admin.register(FirmwareObservation)
class FirmwareObservationAdmin(InventoryAdmin):
    list_display = ["component", "version", "gpu", "server", "source", "first_seen", "last_seen"]
    list_filter = ["component", "source"]
    list_select_related = ["gpu", "server"]
    search_fields = ["=version"]
    raw_id_fields = ["gpu", "server"]


@admin.register(GpuStateChange)
class GpuStateChangeAdmin(ReadOnlyModelAdmin):
    list_display = ["at", "gpu", "from_state", "to_state", "actor_name", "reason"]
    list_filter = ["to_state", "from_state"]
    list_select_related = ["gpu"]
    search_fields = ["=actor_name", "=gpu__serial"]


@admin.register(GpuMove)
class GpuMoveAdmin(ReadOnlyModelAdmin):
    list_display = ["at", "gpu", "kind", "from_server", "from_pci_bus_id", "to_server", "to_pci_bus_id",
                    "actor_name"]
    list_filter = ["kind"]
    list_select_related = ["gpu", "from_server", "to_server"]
    search_fields = ["=actor_name", "=gpu__serial"]


@admin.register(ImportRun)
class ImportRunAdmin(ReadOnlyModelAdmin):
    list_display = ["id", "filename", "fmt", "server_hint", "status", "created_by", "created_at"]
    list_filter = ["status", "fmt"]
    list_select_related = ["created_by"]
    search_fields = ["filename"]
    exclude = ["content"]



@admin.register(SchedulerNode)
class SchedulerNodeAdmin(ReadOnlyModelAdmin):
    """The scheduler's view of each node (beat's refresh writes it; docs/scheduler.md)."""

    list_display = ["name", "server", "state", "drained_by", "job_count", "reason", "refreshed_at"]
    list_filter = ["state", "drained_by"]
    list_select_related = ["server"]
    search_fields = ["^name", "reason"]


@admin.register(SchedulerHold)
class SchedulerHoldAdmin(ReadOnlyModelAdmin):
    """Fleet's recorded drains and resumes: never edited by hand (a hand edit could resume a node twice)."""

    list_display = ["key", "node", "state", "reason", "note", "requested_at", "released_at"]
    list_filter = ["state", "owner"]
    search_fields = ["^node", "=key"]
