"""FilterSets of the procurement lists, shared by the HTML pages and the API. An unknown query parameter is a
400, not a silently unfiltered answer."""

from __future__ import annotations

from typing import Any

import django_filters
from rest_framework.exceptions import ValidationError

from inventory.models import GpuModel, Site
from procurement.models import (
    Cause,
    Delivery,
    Failure,
    Forecast,
    GpuAsset,
    OrderStatus,
    PurchaseOrder,
    RmaCase,
    RmaStatus,
    ScopeKind,
    SparesPool,
    Vendor,
)

PAGING = {"cursor", "page_size", "format", "after"}


class StrictFilterSet(django_filters.FilterSet):
    def __init__(self, data: Any = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(data, *args, **kwargs)
        if data is not None:
            unknown = sorted(set(data.keys()) - set(self.filters) - PAGING)
            if unknown:
                raise ValidationError({name: [f"Unknown filter; filters are {', '.join(sorted(self.filters))}."]
                                       for name in unknown})


def _site() -> django_filters.ModelChoiceFilter:
    return django_filters.ModelChoiceFilter(queryset=Site.objects.all(), to_field_name="code", label="Site code")


def _model() -> django_filters.ModelChoiceFilter:
    return django_filters.ModelChoiceFilter(queryset=GpuModel.objects.all(), label="GPU model id")


class OrderFilter(StrictFilterSet):
    vendor = django_filters.ModelChoiceFilter(queryset=Vendor.objects.all())
    status = django_filters.ChoiceFilter(choices=OrderStatus.choices)

    class Meta:
        model = PurchaseOrder
        fields = ["vendor", "status", "reference"]


class DeliveryFilter(StrictFilterSet):
    site = _site()

    class Meta:
        model = Delivery
        fields = ["order", "site"]


class RmaFilter(StrictFilterSet):
    vendor = django_filters.ModelChoiceFilter(queryset=Vendor.objects.all())
    status = django_filters.ChoiceFilter(choices=RmaStatus.choices)
    open = django_filters.BooleanFilter(method="filter_open", label="Not closed")

    class Meta:
        model = RmaCase
        fields = ["vendor", "status", "gpu", "open"]

    def filter_open(self, queryset, name, value):  # type: ignore[no-untyped-def]
        return queryset.exclude(status=RmaStatus.CLOSED) if value else queryset.filter(status=RmaStatus.CLOSED)


class FailureFilter(StrictFilterSet):
    site = _site()
    model = _model()
    cause = django_filters.ChoiceFilter(choices=Cause.choices)
    failed_on = django_filters.DateFromToRangeFilter(label="From (failed_on_after) / to (failed_on_before)")

    class Meta:
        model = Failure
        fields = ["site", "model", "cause", "gpu", "batch", "failed_on"]


class WarrantyFilter(StrictFilterSet):
    """What leaves warranty (or reaches end of support) in a period, by site and model."""

    site = _site()
    model = _model()
    warranty_end = django_filters.DateFromToRangeFilter(
        label="Warranty ends from (warranty_end_after) / to (warranty_end_before)")
    support_end = django_filters.DateFromToRangeFilter(
        label="Support ends from (support_end_after) / to (support_end_before)")

    class Meta:
        model = GpuAsset
        fields = ["site", "model", "warranty_end", "support_end"]


class ForecastFilter(StrictFilterSet):
    scope = django_filters.ChoiceFilter(choices=ScopeKind.choices)
    gpu_model = _model()
    site = _site()
    pool = django_filters.ModelChoiceFilter(queryset=SparesPool.objects.all())
    alert = django_filters.BooleanFilter(method="filter_alert", label="Only scopes with an alert")

    class Meta:
        model = Forecast
        fields = ["run", "scope", "gpu_model", "site", "pool", "alert"]

    def filter_alert(self, queryset, name, value):  # type: ignore[no-untyped-def]
        return queryset.exclude(alert="") if value else queryset.filter(alert="")
