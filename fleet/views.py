"""Base pieces for every HTML view (role checks, htmx partial rendering, query strings), and the
cross-cutting pages: the audit log and background job progress.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Iterable
from functools import wraps
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.views import redirect_to_login
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.html import format_html
from django_htmx.http import HttpResponseClientRedirect
from django_htmx.middleware import HtmxDetails

from fleet import api_errors
from fleet.filters import HTML_COMMON_PARAMS, unknown_param_errors
from fleet.models import AuditAction, AuditEvent, AuditSource, Job
from fleet.pagination import keyset_page
from fleet.roles import OPERATOR, VIEWER, has_role
from fleet.selectors import audit_list as audit_events


class HtmxHttpRequest(HttpRequest):
    """A request that went through ``django_htmx.middleware.HtmxMiddleware``."""

    htmx: HtmxDetails


View = Callable[..., HttpResponse]


def role_required(role: str) -> Callable[[View], View]:
    """Anonymous users go to the login page (htmx: a client-side redirect); users without ``role`` get 403."""

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapped(request: HtmxHttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                response = redirect_to_login(request.get_full_path())
                if getattr(request, "htmx", False):
                    return HttpResponseClientRedirect(response.url)
                return response
            if not has_role(request.user, role):
                raise PermissionDenied(f"This page needs the {role} role.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


viewer_required = role_required(VIEWER)
operator_required = role_required(OPERATOR)


QuerySpec = Collection[str] | Callable[[str], object] | None


def query_params(**spec: QuerySpec) -> Callable[[View], View]:
    """An HTML page's query string, read strictly (the API's rule): a parameter of ``spec`` is accepted with a
    value from its collection (choices) or one its callable parses (``int``; ``None`` takes any value; an empty
    value means "no filter"), the pager's (``after``, ``sort``...) always; any other parameter or value answers
    400 with a page naming it (a link to the unfiltered list), never a silently unfiltered list."""

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapped(request: HtmxHttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if errors := query_errors(request.GET, spec):
                return render(request, "fleet/bad_query.html", {"errors": sorted(errors.items()),
                              "accepted": sorted(spec), "path": request.path}, status=400)
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def query_errors(params: QueryDict, spec: dict[str, QuerySpec]) -> dict[str, str]:
    errors = {name: msgs[0] for name, msgs in unknown_param_errors(params.keys(), {*spec, *HTML_COMMON_PARAMS}).items()}
    for name, rule in spec.items():
        value = params.get(name, "")
        if not value or rule is None:
            continue
        if callable(rule):
            try:
                rule(value)
            except (TypeError, ValueError):
                errors[name] = f"{value!r} is not a valid {name}."
        elif value not in rule:
            errors[name] = f"{value!r} is not a valid {name}; choose one of {', '.join(sorted(rule))}."
    return errors


def render_page(request: HtmxHttpRequest, template: str, partial: str, context: dict[str, Any],
                status: int = 200) -> HttpResponse:
    """The whole page, or only its ``{% partialdef partial %}`` when htmx asks (not on a history restore)."""
    htmx = request.htmx and not request.htmx.history_restore_request
    response = render(request, f"{template}#{partial}" if htmx else template, context, status=status)
    patch_vary_headers(response, ("HX-Request",))
    return response


def compact_choices(fields: dict[str, forms.Field], **empty_labels: str) -> None:
    """Readable empty choices: "Any site" rather than "---------", "Any / Yes / No" for yes-no filters."""
    for name, label in empty_labels.items():
        fields[name].empty_label = label  # type: ignore[attr-defined]
    for field in fields.values():
        if isinstance(field.widget, forms.NullBooleanSelect):
            field.widget.choices = [("unknown", "Any"), ("true", "Yes"), ("false", "No")]


def query_without(params: QueryDict, *names: str) -> str:
    """The query string of ``params`` minus ``names`` (for links that keep the current filters)."""
    params = params.copy()
    for name in names:
        params.pop(name, None)
    return params.urlencode()


def query_with(params: QueryDict, **values: str | None) -> str:
    params = params.copy()
    for name, value in values.items():
        if value is None:
            params.pop(name, None)
        else:
            params[name] = value
    return params.urlencode()


# --- audit log ----------------------------------------------------------------------------------------

# Detail pages of audited objects, by ``app_label.model``; the audit log links its rows to them.
OBJECT_URL_NAMES = {
    "inventory.gpu": "gpu-detail",
    "inventory.server": "server-detail",
    "inventory.rack": "rack-detail",
    "inventory.row": "row-detail",
    "fleet.job": "job-detail",
    "firmware.rollout": "rollout-detail",
    "firmware.release": "firmware-release-detail",
    "firmware.bundle": "firmware-bundle-detail",
}


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False, label="Actor", max_length=150)
    source = forms.ChoiceField(required=False, choices=[("", "Any source"), *AuditSource.choices])
    action = forms.ChoiceField(required=False, choices=[("", "Any action"), *AuditAction.choices])
    type = forms.ModelChoiceField(required=False, label="Object type", empty_label="Any type",
                                  queryset=ContentType.objects.filter(app_label__in=("inventory", "telemetry", "fleet", "firmware"))
                                  .order_by("app_label", "model"))
    object_id = forms.CharField(required=False, max_length=64, widget=forms.HiddenInput)
    since = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}),
                            help_text="Inclusive")

    def filter(self, qs: QuerySet[AuditEvent]) -> QuerySet[AuditEvent]:
        if not self.is_valid():  # an invalid filter shows nothing rather than the whole trail
            return qs.none()
        data = self.cleaned_data
        if data.get("actor"):
            qs = qs.filter(actor_name=data["actor"])
        if data.get("source"):
            qs = qs.filter(source=data["source"])
        if data.get("action"):
            qs = qs.filter(action=data["action"])
        if data.get("type"):
            qs = qs.filter(content_type=data["type"])
            if data.get("object_id"):
                qs = qs.filter(object_id=data["object_id"])
        tz = timezone.get_current_timezone()
        if data.get("since"):
            qs = qs.filter(at__gte=dt.datetime.combine(data["since"], dt.time.min, tzinfo=tz))
        if data.get("until"):
            qs = qs.filter(at__lt=dt.datetime.combine(data["until"] + dt.timedelta(days=1), dt.time.min, tzinfo=tz))
        return qs


def audit_query_for(obj: Model) -> str:
    """Query string of the audit log filtered to one object."""
    return f"type={ContentType.objects.get_for_model(obj).pk}&object_id={obj.pk}"


def _is_user_field(name: str) -> bool:
    return name.endswith("_by") or name.endswith("_by_id") or name in ("operator", "operator_id", "actor", "user")


def _user_names(events: list[AuditEvent]) -> dict[int, str]:
    """Usernames of the user ids in the events' ``*_by`` changes (one query for the page)."""
    ids = {value for event in events for name, pair in (event.changes or {}).items() if _is_user_field(name)
           for value in (pair if isinstance(pair, list) else [pair]) if isinstance(value, int)}
    if not ids:
        return {}
    return dict(get_user_model().objects.filter(pk__in=ids).values_list("pk", get_user_model().USERNAME_FIELD))


def _named(name: str, value: Any, users: dict[int, str]) -> Any:
    if _is_user_field(name) and isinstance(value, int):
        return users.get(value, f"user #{value}")
    return value


def audit_rows(events: Iterable[AuditEvent], *, objects: bool = True) -> list[dict[str, Any]]:
    """Events ready to render: the changes as (field, before, after), user ids (``approved_by: 4``) shown as the
    user's name; with ``objects``, the object's type and a link to its page while it exists (the audit page's
    object column: an object's own page shows its trail without one, and reverses no link per row)."""
    rows = []
    events = list(events)
    users = _user_names(events)
    for event in events:
        row = {
            "event": event,
            "changes": [(name, _named(name, pair[0], users), _named(name, pair[1], users))
                        if isinstance(pair, list) and len(pair) == 2 else (name, None, _named(name, pair, users))
                        for name, pair in (event.changes or {}).items()],
        }
        if objects:
            ct = ContentType.objects.get_for_id(event.content_type_id)  # cached: no query per row
            url_name = OBJECT_URL_NAMES.get(f"{ct.app_label}.{ct.model}")
            linkable = url_name and event.object_id.isdigit() and event.action != AuditAction.DELETE
            row["type"] = ct.name
            row["url"] = reverse(url_name, args=[event.object_id]) if linkable else None
        rows.append(row)
    return rows


@viewer_required
def audit_list(request: HtmxHttpRequest) -> HttpResponse:
    form = AuditFilterForm(request.GET)
    unknown = unknown_param_errors(request.GET.keys(), {*form.fields, *HTML_COMMON_PARAMS})
    for name, messages in unknown.items():
        form.errors[name] = form.error_class(messages)
    page = keyset_page(form.filter(audit_events()), after=request.GET.get("after"), size=settings.FLEET_PAGE_SIZE,
                       sort="-id", allowed=("-id",))
    context = {
        "form": form,
        "page": page,
        "rows": audit_rows(page.items),
        "next_query": query_with(request.GET, after=page.next_after) if page.has_next else None,
        "first_query": query_without(request.GET, "after"),
    }
    return render_page(request, "fleet/audit_list.html", "audit-table", context, status=400 if unknown else 200)


@viewer_required
def approvals(request: HtmxHttpRequest) -> HttpResponse:
    """What waits for an approver (rollouts, baselines, orders, decommission requests). htmx: the panel only
    (the dashboard's), or, with ``?count``, the navigation's badge."""
    from fleet.approvals import SHOWN, approvals_count, approvals_for
    from fleet.roles import APPROVER, has_role

    if "count" in request.GET:
        n = approvals_count(request.user) if has_role(request.user, APPROVER) else 0
        return HttpResponse(f'<span class="count" title="{n} waiting for an approver">{n}</span>' if n else "")
    groups = approvals_for(request.user)
    context = {"groups": {kind: items[:SHOWN] for kind, items in groups.items()},
               "more": {kind for kind, items in groups.items() if len(items) > SHOWN},
               "total": sum(len(items) for items in groups.values()),
               "approver": has_role(request.user, APPROVER)}
    return render_page(request, "fleet/approvals.html", "approvals-panel", context)


# --- background jobs ----------------------------------------------------------------------------------

@viewer_required
def job_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Progress of a background job; the progress partial polls itself every second until the job ends."""
    job = get_object_or_404(Job.objects.select_related("created_by"), pk=pk)
    return render_page(request, "fleet/job_detail.html", "job-progress", {"job": job, "errors": job.errors[:100]})


def server_error(request: HttpRequest) -> HttpResponse:
    """The 500 page (``handler500``): JSON under ``/api/``, a bare page elsewhere (no template, no
    database: they may be what failed), both naming the request id the logs carry."""
    if request.path.startswith(api_errors.API_PREFIX):
        return api_errors.server_error(request)
    request_id = getattr(request, "request_id", "") or ""
    return HttpResponse(
        format_html("<!doctype html><title>Server error</title><h1>Server error</h1>"
                    "<p>Something went wrong on Fleet's side; it has been logged.</p>"
                    "<p>Request id <code>{}</code></p>", request_id), status=500)
