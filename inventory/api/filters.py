"""FilterSets for the API's smaller lists. GPUs and servers use the shared ones in ``inventory.filters``
(the same filters as the HTML pages)."""

from __future__ import annotations

import django_filters

from inventory.models import (
    FirmwareComponent,
    FirmwareObservation,
    Gpu,
    GpuMove,
    GpuState,
    GpuStateChange,
    Hall,
    MoveKind,
    NvlinkDomain,
    PowerFeed,
    Rack,
    Row,
    Server,
    Site,
)


def _site() -> django_filters.ModelChoiceFilter:
    return django_filters.ModelChoiceFilter(queryset=Site.objects.all(), to_field_name="code", label="Site code")


class HallFilter(django_filters.FilterSet):
    site = _site()

    class Meta:
        model = Hall
        fields = ["site", "name"]


class RowFilter(django_filters.FilterSet):
    site = _site()

    class Meta:
        model = Row
        fields = ["site", "hall", "name"]


class RackFilter(django_filters.FilterSet):
    site = _site()

    class Meta:
        model = Rack
        fields = ["site", "row", "name", "cooling"]


class PowerFeedFilter(django_filters.FilterSet):
    site = _site()

    class Meta:
        model = PowerFeed
        fields = ["site", "name"]


class NvlinkDomainFilter(django_filters.FilterSet):
    site = _site()

    class Meta:
        model = NvlinkDomain
        fields = ["site", "name"]


class GpuStateChangeFilter(django_filters.FilterSet):
    gpu = django_filters.ModelChoiceFilter(queryset=Gpu.objects.all())
    from_state = django_filters.ChoiceFilter(choices=GpuState.choices)
    to_state = django_filters.ChoiceFilter(choices=GpuState.choices)
    at = django_filters.IsoDateTimeFromToRangeFilter(label="From (at_after) / to (at_before), ISO 8601")

    class Meta:
        model = GpuStateChange
        fields = ["gpu", "from_state", "to_state", "actor_name", "at"]


class GpuMoveFilter(django_filters.FilterSet):
    gpu = django_filters.ModelChoiceFilter(queryset=Gpu.objects.all())
    kind = django_filters.ChoiceFilter(choices=MoveKind.choices)
    from_server = django_filters.ModelChoiceFilter(queryset=Server.objects.all(), to_field_name="hostname")
    to_server = django_filters.ModelChoiceFilter(queryset=Server.objects.all(), to_field_name="hostname")
    at = django_filters.IsoDateTimeFromToRangeFilter(label="From (at_after) / to (at_before), ISO 8601")

    class Meta:
        model = GpuMove
        fields = ["gpu", "kind", "from_server", "to_server", "actor_name", "at"]


class FirmwareObservationFilter(django_filters.FilterSet):
    gpu = django_filters.ModelChoiceFilter(queryset=Gpu.objects.all())
    server = django_filters.ModelChoiceFilter(queryset=Server.objects.all(), to_field_name="hostname")
    component = django_filters.ChoiceFilter(choices=FirmwareComponent.choices)

    class Meta:
        model = FirmwareObservation
        fields = ["gpu", "server", "component", "version", "source"]
