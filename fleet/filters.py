"""FilterSets of fleet's API lists (the audit trail and background jobs), and the strict filter backend every
API list uses: an unknown query parameter is a 400."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable
from typing import Any

import django_filters
from django import forms
from django.contrib.contenttypes.models import ContentType
from django.db.models import QuerySet
from django.http import QueryDict
from django_filters.filters import FilterMethod
from django_filters.rest_framework import DjangoFilterBackend
from django_filters.utils import translate_validation
from rest_framework.exceptions import ValidationError

from fleet.models import AuditAction, AuditEvent, AuditSource, Job, JobStatus


class AuditEventFilter(django_filters.FilterSet):
    action = django_filters.ChoiceFilter(choices=AuditAction.choices)
    source = django_filters.ChoiceFilter(choices=AuditSource.choices)
    content_type = django_filters.CharFilter(method="filter_content_type",
                                             label="Kind of object, as app_label.model (inventory.gpu)")
    at = django_filters.IsoDateTimeFromToRangeFilter(label="From (at_after) / to (at_before), ISO 8601")

    class Meta:
        model = AuditEvent
        fields = ["action", "source", "actor_name", "content_type", "object_id", "at"]

    def filter_content_type(self, queryset: QuerySet[AuditEvent], name: str, value: str) -> QuerySet[AuditEvent]:
        app_label, _, model = value.lower().partition(".")
        try:
            content_type = ContentType.objects.get_by_natural_key(app_label, model)
        except ContentType.DoesNotExist:
            raise ValidationError({"content_type": [f"'{value}' is not a kind of object (app_label.model, "
                                                    "for example inventory.gpu)."]}) from None
        return queryset.filter(content_type=content_type)


class JobFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=JobStatus.choices)

    class Meta:
        model = Job
        fields = ["kind", "status"]


# --- a FilterSet that is cheap to build ------------------------------------------------------------------


class LeanFilterSet(django_filters.FilterSet):
    """A FilterSet built for every request of a hot list: django-filter deep-copies every filter (with its
    queryset) and builds a new form class with a new field per filter for each instance, ~1.5 ms of CPU for
    the GPU list's 15 filters. Here the filters are copied shallowly (a ``method`` filter rebound to its copy)
    and the form class is built once per class from the class's own filters; each form still deep-copies its
    fields, as every Django form does. For FilterSets whose filters' querysets do not depend on the request."""

    def __init__(self, data: Any = None, queryset: QuerySet | None = None, *, request: Any = None,
                 prefix: str | None = None) -> None:
        if queryset is None:
            queryset = self._meta.model._default_manager.all()
        self.is_bound = data is not None
        self.data = data or QueryDict()
        self.queryset = queryset
        self.request = request
        self.form_prefix = prefix
        self.filters = {}
        for name, base in self.base_filters.items():
            bound = object.__new__(type(base))
            bound.__dict__.update(base.__dict__)
            if isinstance(base.__dict__.get("filter"), FilterMethod):
                bound.filter = FilterMethod(bound)
            bound.model, bound.parent = queryset.model, self
            self.filters[name] = bound

    @classmethod
    def kept_form_class(cls) -> type[forms.Form]:
        form_class = cls.__dict__.get("_kept_form_class")
        if form_class is None:
            fields = {name: base.field for name, base in cls.base_filters.items()}
            form_class = type(f"{cls.__name__}Form", (cls._meta.form,), fields)
            cls._kept_form_class = form_class
        return form_class

    def get_form_class(self) -> type[forms.Form]:
        return self.kept_form_class()


# --- strict query parameters: an unknown one is a 400, never a silently unfiltered answer -----------------

# Query parameters every API list or object takes besides its filters (pagination, the response format).
API_COMMON_PARAMS = frozenset({"cursor", "page_size", "format"})
# The HTML lists' own: keyset pages, sort order, and the cache-buster htmx may add.
HTML_COMMON_PARAMS = frozenset({"after", "sort", "page", "format", "_"})
# PostgreSQL takes UTC offsets up to +-15:59; Python up to +-23:59.
MAX_UTC_OFFSET = dt.timedelta(hours=15, minutes=59)


def filter_param_names(filterset: django_filters.FilterSet) -> set[str]:
    """The query parameters ``filterset`` reads: its filters' names, with a range filter's suffixes
    (``at_after`` / ``at_before``)."""
    names: set[str] = set()
    for name, field in filterset.form.fields.items():
        suffixes = getattr(field.widget, "suffixes", None)
        names.update((f"{name}_{suffix}" if suffix else name) for suffix in suffixes) if suffixes else names.add(name)
    return names


def unknown_param_errors(params: Iterable[str], known: Collection[str]) -> dict[str, list[str]]:
    """``{param: [message]}`` for every parameter not in ``known`` (empty when all are known)."""
    listing = ", ".join(sorted(known)) or "none"
    return {name: [f"Unknown query parameter. Known here: {listing}."] for name in sorted(set(params) - set(known))}


def reject_unknown_params(params: Iterable[str], known: Collection[str]) -> None:
    """Raise a 400 (DRF ValidationError) naming every unknown query parameter."""
    if errors := unknown_param_errors(params, known):
        raise ValidationError(errors)


def offset_errors(cleaned: dict[str, Any]) -> dict[str, list[str]]:
    """Datetimes whose UTC offset PostgreSQL refuses (beyond +-15:59): a 400, not a database error."""
    errors: dict[str, list[str]] = {}
    for name, value in cleaned.items():
        values = [value.start, value.stop] if isinstance(value, slice) else [value]
        for item in values:
            offset = item.utcoffset() if isinstance(item, dt.datetime) else None
            if offset is not None and abs(offset) > MAX_UTC_OFFSET:
                errors[name] = ["The UTC offset must be between -15:59 and +15:59."]
    return errors


# Methods whose django-filter behaviour makes a FilterSet given none of its parameters return its queryset as
# it is: a FilterSet overriding one of them (a default filter in filter_queryset, a form of its own), or
# __init__ / get_form_class other than django-filter's and LeanFilterSet's, is built every time.
_PLAIN_METHODS = ("form", "filter_queryset", "qs", "is_valid", "errors")
_param_names: dict[type, tuple[frozenset[str], bool]] = {}
_auto_classes: dict[tuple[type, type, str], type] = {}


def filterset_params(filterset_class: type[django_filters.FilterSet]) -> tuple[frozenset[str], bool]:
    """(the query parameters ``filterset_class`` reads, whether it is plain: no filter is required and it
    overrides none of :data:`_PLAIN_METHODS`, so given none of those parameters it filters nothing), once per
    class."""
    known = _param_names.get(filterset_class)
    if known is None:
        own = (django_filters.FilterSet, LeanFilterSet)
        plain = (not any(f.extra.get("required") for f in filterset_class.base_filters.values())
                 and all(getattr(filterset_class, name) is getattr(django_filters.FilterSet, name)
                         for name in _PLAIN_METHODS)
                 and all(getattr(filterset_class, name) in [getattr(c, name) for c in own]
                         for name in ("__init__", "get_form_class")))
        names = frozenset(filter_param_names(filterset_class()))
        known = _param_names[filterset_class] = (names, plain)
    return known


class StrictFilterBackend(DjangoFilterBackend):
    """django-filter's backend, strict: a query parameter that is neither a filter of the view's FilterSet
    nor a pagination or format parameter is a 400 naming it (``GET /gpus/?serial=X`` without a ``serial``
    filter would otherwise answer the unfiltered first page). A view may name extra parameters it reads
    itself in ``extra_query_params``. Every API list and object goes through it (the default backend).

    A request that sets none of the FilterSet's parameters (a plain list, its cursor pages) gets the queryset
    as the FilterSet would give it, without building one (~2 ms of CPU per request: the FilterSet copies its
    filters and builds a form class and a form)."""

    def get_filterset_class(self, view: Any, queryset: QuerySet | None = None) -> Any:
        """django-filter's, with the FilterSet of a view's ``filterset_fields`` made once per view class
        (django-filter builds a new class on every request)."""
        fields = getattr(view, "filterset_fields", None)
        if getattr(view, "filterset_class", None) or not fields or queryset is None:
            return super().get_filterset_class(view, queryset)
        key = (type(view), queryset.model, repr(fields))
        filterset_class = _auto_classes.get(key)
        if filterset_class is None:
            filterset_class = _auto_classes[key] = super().get_filterset_class(view, queryset)
        return filterset_class

    def known_params(self, view: Any, filter_names: Collection[str]) -> set[str]:
        known = set(API_COMMON_PARAMS) | set(getattr(view, "extra_query_params", ())) | set(filter_names)
        paginator = getattr(view, "paginator", None)
        for attr in ("cursor_query_param", "page_size_query_param", "page_query_param", "limit_query_param",
                     "offset_query_param"):
            if name := getattr(paginator, attr, None):
                known.add(name)
        return known

    def filter_queryset(self, request: Any, queryset: QuerySet, view: Any) -> QuerySet:
        filterset_class = self.get_filterset_class(view, queryset)
        params = request.query_params
        if filterset_class is None:
            reject_unknown_params(params.keys(), self.known_params(view, ()))
            return queryset
        filter_names, plain = filterset_params(filterset_class)
        reject_unknown_params(params.keys(), self.known_params(view, filter_names))
        if plain and filter_names.isdisjoint(params.keys()):
            return queryset
        filterset = filterset_class(**self.get_filterset_kwargs(request, queryset, view))
        if not filterset.is_valid() and self.raise_exception:
            raise translate_validation(filterset.errors)
        if errors := offset_errors(filterset.form.cleaned_data):
            raise ValidationError(errors)
        return filterset.qs


def strict_html_filter(filterset: django_filters.FilterSet, params: Iterable[str], extra: Iterable[str] = ()) -> bool:
    """The HTML lists' side of the rule: every unknown query parameter becomes an error of the filter form
    (shown above the list, which then shows nothing). True when every parameter is known."""
    errors = unknown_param_errors(params, filter_param_names(filterset) | HTML_COMMON_PARAMS | set(extra))
    form_errors = filterset.form.errors  # validates the form first
    for name, messages in errors.items():
        form_errors[name] = filterset.form.error_class(messages)
    return not errors
