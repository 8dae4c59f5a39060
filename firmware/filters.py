"""Firmware's FilterSets of the catalog API: releases and compliance rows."""

from __future__ import annotations

from django_filters import rest_framework as drf_filters

from firmware.models import ComplianceState, ComplianceStatus, Release
from inventory.models import FirmwareComponent


class ReleaseFilter(drf_filters.FilterSet):
    component = drf_filters.ChoiceFilter(choices=FirmwareComponent.choices)
    channel = drf_filters.CharFilter()
    platform = drf_filters.NumberFilter(field_name="platforms")
    version = drf_filters.CharFilter(field_name="version", lookup_expr="iexact")

    class Meta:
        model = Release
        fields = ["component", "channel", "platform", "version"]


class ComplianceFilter(drf_filters.FilterSet):
    site = drf_filters.CharFilter(field_name="server__site__code")
    platform = drf_filters.NumberFilter(field_name="server__platform_id")
    component = drf_filters.ChoiceFilter(choices=FirmwareComponent.choices)
    status = drf_filters.ChoiceFilter(choices=ComplianceState.choices)
    server = drf_filters.NumberFilter(field_name="server_id")

    class Meta:
        model = ComplianceStatus
        fields = ["site", "platform", "component", "status", "server"]
