"""Django admin plumbing every app uses, and the admin of fleet's own records.

Admin changes are data fixes, and like every other write they go through the app's services, so they
are audited (source "admin", the signed-in user as actor). A delete that history refuses (every foreign
key is PROTECT) is shown as a message, never a 500. History is read-only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models import ProtectedError, QuerySet
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.html import format_html

from fleet.api import protected_message
from fleet.audit import snapshot
from fleet.models import ApiToken, AuditEvent, Job, JobChunk
from fleet.roles import ADMIN, has_role
from fleet.tokens import token_revoke, token_state


def adopt(obj: models.Model, saved: models.Model) -> None:
    """Make the admin's in-memory ``obj`` the row a service saved (its pk and computed columns)."""
    for field in obj._meta.concrete_fields:
        setattr(obj, field.attname, getattr(saved, field.attname))
    obj._state.adding, obj._state.db = False, saved._state.db


class AuditedModelAdmin(admin.ModelAdmin):
    """Saves and deletes through the app's audited services.

    Subclasses set ``create_service(model_class=, actor=, **fields)``, ``update_service(obj=, actor=, before=,
    **fields)`` and ``delete_service(obj=, actor=)`` (for inventory: ``services.record_*``). Many-to-many
    fields from the form are handed to the same service call rather than saved by the form.
    """

    create_service: Callable[..., models.Model]
    update_service: Callable[..., Any]
    delete_service: Callable[..., None]
    show_full_result_count = False  # one COUNT(*) per changelist page, not two

    def _form_values(self, obj: models.Model, form: ModelForm) -> tuple[dict[str, Any], dict[str, Any]]:
        opts = obj._meta
        concrete = {f.name for f in opts.concrete_fields if f.editable and not f.primary_key}
        fields = {name: getattr(obj, name) for name in form.cleaned_data if name in concrete}
        m2m = {f.name: form.cleaned_data[f.name] for f in opts.many_to_many if f.name in form.cleaned_data}
        return fields, m2m

    def save_model(self, request: HttpRequest, obj: models.Model, form: ModelForm, change: bool) -> None:
        fields, m2m = self._form_values(obj, form)
        if change:
            # The form already wrote its values onto ``obj``: the "before" side comes from the database.
            before = snapshot(type(obj)._default_manager.get(pk=obj.pk))
            type(self).update_service(obj=obj, actor=request.user, before=before, **m2m)
        else:
            adopt(obj, type(self).create_service(model_class=type(obj), actor=request.user, **fields, **m2m))

    def save_related(self, request: HttpRequest, form: ModelForm, formsets: Any, change: bool) -> None:
        for formset in formsets:  # the form's own many-to-many went to the service in save_model
            self.save_formset(request, form, formset, change=change)

    def delete_model(self, request: HttpRequest, obj: models.Model) -> None:
        type(self).delete_service(obj=obj, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        with transaction.atomic():  # one audit event per object; all or none
            for obj in queryset:
                type(self).delete_service(obj=obj, actor=request.user)

    # A refusal that gets past the forms (a race, or a rule only the service knows) is a message.

    def changeform_view(self, request: HttpRequest, object_id: str | None = None, form_url: str = "",
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ValidationError as exc:
            self.message_user(request, " ".join(exc.messages), messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def delete_view(self, request: HttpRequest, object_id: str,
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        try:
            return super().delete_view(request, object_id, extra_context)
        except ProtectedError as exc:
            self.message_user(request, protected_message(self.get_object(request, unquote(object_id)), exc), messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        try:
            return super().changelist_view(request, extra_context)
        except ProtectedError as exc:
            self.message_user(request, protected_message(None, exc), messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())


class ReadOnlyModelAdmin(admin.ModelAdmin):
    """History and records only services write: viewable, never added, changed or deleted here."""

    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return False


def pretty_json(value: Any) -> str:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True, default=str))


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyModelAdmin):
    list_display = ["at", "actor_name", "source", "action", "content_type", "object_repr"]
    list_filter = ["source", "action", "content_type"]
    list_select_related = ["content_type"]
    search_fields = ["=actor_name", "=object_id", "object_repr"]
    readonly_fields = ["changes_json"]
    exclude = ["changes"]

    @admin.display(description="Changes (field: [before, after])")
    def changes_json(self, event: AuditEvent) -> str:
        return pretty_json(event.changes)


@admin.register(Job)
class JobAdmin(ReadOnlyModelAdmin):
    list_display = ["id", "kind", "status", "done", "failed", "total", "created_by", "created_at", "finished_at"]
    list_filter = ["kind", "status"]
    list_select_related = ["created_by"]


@admin.register(JobChunk)
class JobChunkAdmin(ReadOnlyModelAdmin):
    list_display = ["job", "index", "done"]
    list_filter = ["done"]
    list_select_related = ["job"]
    raw_id_fields = ["job"]


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyModelAdmin):
    """API tokens (made on the user's account page or by ``/api/v1/auth/token/``): admins see and revoke
    everyone's, other users only their own. Keys are never shown, only their first characters."""

    list_display = ["name", "user", "prefix", "scope", "state", "created_at", "expires_at", "last_used_at"]
    list_filter = ["scope"]
    list_select_related = ["user"]
    search_fields = ["=user__username", "name", "=prefix"]
    exclude = ["key_hash"]
    actions = ["revoke"]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset = super().get_queryset(request)
        return queryset if has_role(request.user, ADMIN) else queryset.filter(user=request.user)

    @admin.display(description="State")
    def state(self, token: ApiToken) -> str:
        return token_state(token)

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return request.user.is_authenticated

    @admin.action(description="Revoke the selected tokens", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet) -> None:
        revoked = sum(token_revoke(token=token, actor=request.user) for token in queryset)  # type: ignore[misc]
        self.message_user(request, f"{revoked} token(s) revoked.", messages.SUCCESS)
