"""One FilterSet per list, shared by the HTML pages and the API so both filter the same way."""

from __future__ import annotations

import re

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet
from django.forms.renderers import Jinja2
from django.http import QueryDict

from fleet.filters import LeanFilterSet, filter_param_names, unknown_param_errors
from fleet.views import compact_choices
from inventory import selectors
from inventory.identity import normalize_uuid
from inventory.models import Gpu, GpuModel, GpuState, Server, Site
from inventory.place_fields import PlaceFilter

# Shorter text matches whole values only: a one- or two-character prefix would select much of the fleet.
SEARCH_PREFIX_MIN = 3
_UUID_PREFIX = re.compile(r"^(?:gpu-)?[0-9a-f-]+$", re.IGNORECASE)


def gpu_search(queryset: QuerySet[Gpu], text: str) -> QuerySet[Gpu]:
    """Free text: a prefix (at least :data:`SEARCH_PREFIX_MIN` characters) of the serial, UUID (with or without
    ``GPU-``), asset tag or server hostname; shorter text, the whole value.

    Each branch is one indexed lookup (``*_prefix_idx``: varchar_pattern_ops on PostgreSQL, migration
    0009); hostnames are resolved first so the OR never joins. The API's ``serial``/``uuid``/``asset_tag``
    filters stay exact.
    """
    text = text.strip()
    if not text:
        return queryset
    prefix = len(text) >= SEARCH_PREFIX_MIN
    hosts = Server.objects.filter(hostname__startswith=text.lower()) if prefix else Server.objects.filter(
        hostname=text.lower())
    server_ids = list(hosts.values_list("id", flat=True)[:500])
    if prefix:
        condition = Q(serial__startswith=text) | Q(asset_tag__startswith=text) | Q(server_id__in=server_ids)
    else:
        condition = Q(serial=text) | Q(asset_tag=text) | Q(server_id__in=server_ids)
    if uuid := normalize_uuid(text):
        condition |= Q(uuid=uuid)
    elif prefix and _UUID_PREFIX.match(text):
        body = text[4:] if text.lower().startswith("gpu-") else text
        if len(body) >= SEARCH_PREFIX_MIN:
            condition |= Q(uuid__startswith="GPU-" + body.lower())
    return queryset.filter(condition)


class GpuFilter(LeanFilterSet):
    site = django_filters.ModelChoiceFilter(queryset=Site.objects.all(), to_field_name="code")
    row = PlaceFilter(kind="row", label="Row (site/name or id)")
    rack = PlaceFilter(kind="rack", label="Rack (name or id)")
    server = PlaceFilter(kind="server", label="Server (hostname or id)")
    model = django_filters.ModelChoiceFilter(queryset=GpuModel.objects.all(), to_field_name="sku")
    # distinct=False: a state list is an IN on one column; DISTINCT would sort every match before LIMIT.
    state = django_filters.MultipleChoiceFilter(choices=GpuState.choices, distinct=False)
    vbios = django_filters.CharFilter(field_name="vbios_version", label="VBIOS version")
    driver = django_filters.CharFilter(field_name="driver_version", label="Driver version")
    masked = django_filters.BooleanFilter(field_name="identity_masked", label="Masked identity")
    unplaced = django_filters.BooleanFilter(field_name="server", lookup_expr="isnull", label="Not in a server")
    q = django_filters.CharFilter(method="filter_q", label="Serial, UUID, hostname or asset tag")
    # Exact lookups for scripts (``?serial=X``): one GPU or none, never the first page of everything.
    serial = django_filters.CharFilter(method="filter_exact", label="Serial (exact)")
    uuid = django_filters.CharFilter(method="filter_uuid", label="UUID (exact, with or without GPU-)")
    hostname = django_filters.CharFilter(field_name="server__hostname", method="filter_exact",
                                         label="Hostname of its server (exact)")
    asset_tag = django_filters.CharFilter(method="filter_exact", label="Asset tag (exact)")

    class Meta:
        model = Gpu
        fields = ["site", "row", "rack", "server", "model", "state", "vbios", "driver", "masked", "unplaced", "q",
                  "serial", "uuid", "hostname", "asset_tag"]

    def filter_q(self, queryset: QuerySet[Gpu], name: str, value: str) -> QuerySet[Gpu]:
        return gpu_search(queryset, value)

    def filter_exact(self, queryset: QuerySet[Gpu], name: str, value: str) -> QuerySet[Gpu]:
        value = value.strip()
        return queryset.filter(**{name: value.lower() if name == "server__hostname" else value})

    def filter_uuid(self, queryset: QuerySet[Gpu], name: str, value: str) -> QuerySet[Gpu]:
        uuid = normalize_uuid(value.strip())
        return queryset.filter(uuid=uuid) if uuid else queryset.none()


class ServerFilter(django_filters.FilterSet):
    site = django_filters.ModelChoiceFilter(queryset=Site.objects.all(), to_field_name="code")
    row = PlaceFilter(kind="row", label="Row (site/name or id)")
    rack = PlaceFilter(kind="rack", label="Rack (name or id)")
    unplaced = django_filters.BooleanFilter(field_name="rack", lookup_expr="isnull", label="Needs a rack position")
    q = django_filters.CharFilter(field_name="hostname", lookup_expr="startswith", label="Hostname")
    hostname = django_filters.CharFilter(method="filter_hostname", label="Hostname (exact)")
    serial = django_filters.CharFilter(field_name="serial", label="Serial (exact)")

    class Meta:
        model = Server
        fields = ["site", "row", "rack", "platform", "nvlink_domain", "unplaced", "q", "hostname", "serial"]

    def filter_hostname(self, queryset: QuerySet[Server], name: str, value: str) -> QuerySet[Server]:
        return queryset.filter(hostname=value.strip().lower())


def filter_has_criteria(filterset: django_filters.FilterSet) -> bool:
    """A valid filter that sets at least one criterion."""
    return filterset.is_valid() and any(v not in (None, "", [], ()) for v in filterset.form.cleaned_data.values())


def gpu_ids_matching(params: QueryDict) -> list[int]:
    """Ids of every GPU the GPU list's filters select, for bulk actions.

    An invalid filter, or one that sets no criterion, is refused: a bulk change must never widen to
    the whole fleet because a filter was empty or misspelt.
    """
    filterset = GpuFilter(params, queryset=Gpu.objects.all())
    if unknown := unknown_param_errors(params.keys(), filter_param_names(filterset)):
        raise ValidationError(unknown)
    if not filterset.is_valid():
        raise ValidationError(filterset.errors)
    if not filter_has_criteria(filterset):
        raise ValidationError("A filter needs at least one criterion: a bulk change of the whole fleet is not offered.",
                              code="empty_filter")
    return list(filterset.qs.order_by("id").values_list("id", flat=True))


# --- the GPU list page's filter form -------------------------------------------------------------------------

_TYPED_FILTERS = {"vbios": "96.00.…",
                  "driver": "550.54.15", "q": "serial, UUID, hostname, asset tag"}


# Django's own widget templates, rendered by Jinja2: the filter form's 11 widgets (a checkbox per
# state) cost ~5 ms per page through the Django template engine, ~1 ms this way (bench/README.md).
_FAST_WIDGETS = Jinja2()


def gpu_filter(params: QueryDict, queryset: QuerySet[Gpu] | None = None) -> GpuFilter:
    """The API's GpuFilter, with widgets for a dense HTML form, over ``queryset`` (default: the GPU list)."""
    filterset = GpuFilter(params, queryset=selectors.gpu_list() if queryset is None else queryset)
    fields = filterset.form.fields
    for name, placeholder in _TYPED_FILTERS.items():
        fields[name].widget = forms.TextInput(attrs={"placeholder": placeholder})
    fields["q"].widget.input_type = "search"
    fields["q"].label = "Search"
    fields["state"].widget = forms.CheckboxSelectMultiple(choices=fields["state"].choices)
    compact_choices(fields, site="Any site", model="Any model")
    filterset.form.renderer = _FAST_WIDGETS
    return filterset
