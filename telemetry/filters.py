"""Telemetry's FilterSets: health flags (one FilterSet for the API and the flagged-GPU page) and XID events."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from django_filters import rest_framework as drf_filters

from inventory.models import GpuModel, Site
from inventory.place_fields import PlaceFilter
from telemetry.health_selectors import health_flag_list
from telemetry.models import HealthFlag, HealthKind, HealthSeverity, XidEvent

STATUS_CHOICES = [("open", "Open"), ("cleared", "Cleared"), ("all", "Open and cleared")]


class HealthFlagFilter(django_filters.FilterSet):
    """One FilterSet for the API and the flagged-GPU page. Without ``status``, open flags only."""

    kind = django_filters.ChoiceFilter(choices=HealthKind.choices, empty_label="Any kind")
    severity = django_filters.ChoiceFilter(choices=HealthSeverity.choices, empty_label="Any severity")
    site = django_filters.ModelChoiceFilter(field_name="gpu__site", queryset=Site.objects.order_by("code"),
                                            to_field_name="code", label="Site code")
    row = PlaceFilter(kind="row", field_name="gpu__row", label="Row (site/name or id)")
    rack = PlaceFilter(kind="rack", field_name="gpu__rack", label="Rack (name or id)")
    model = django_filters.ModelChoiceFilter(field_name="gpu__model", queryset=GpuModel.objects.order_by("name"),
                                             label="GPU model id")
    gpu = django_filters.NumberFilter(field_name="gpu_id", label="GPU id")
    status = django_filters.ChoiceFilter(choices=STATUS_CHOICES, method="filter_status", label="Status",
                                         empty_label="Open (default)")

    class Meta:
        model = HealthFlag
        fields = ["kind", "severity", "site", "row", "rack", "model", "gpu", "status"]

    def filter_status(self, queryset: QuerySet[HealthFlag], name: str, value: str) -> QuerySet[HealthFlag]:
        if value == "cleared":
            return queryset.filter(cleared_at__isnull=False)
        if value == "open":
            return queryset.filter(cleared_at__isnull=True)
        return queryset

    def filter_queryset(self, queryset: QuerySet[HealthFlag]) -> QuerySet[HealthFlag]:
        queryset = super().filter_queryset(queryset)
        if not self.form.cleaned_data.get("status"):
            queryset = queryset.filter(cleared_at__isnull=True)
        return queryset


def health_filter(params: Any) -> HealthFlagFilter:
    return HealthFlagFilter(params, queryset=health_flag_list(open_only=False))


class XidEventFilter(drf_filters.FilterSet):
    gpu = drf_filters.NumberFilter(field_name="gpu_id")
    hardware = drf_filters.BooleanFilter()
    source = drf_filters.CharFilter()

    class Meta:
        model = XidEvent
        fields = ["gpu", "hardware", "source"]
