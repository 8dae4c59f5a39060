"""FilterSets of the acceptance lists (an unknown parameter is a 400: fleet.filters.StrictFilterBackend)."""

from __future__ import annotations

import django_filters

from acceptance.models import AcceptanceCheck, DiagnosticRun


class RunFilter(django_filters.FilterSet):
    server = django_filters.CharFilter(field_name="server__hostname", label="Hostname")
    gpu = django_filters.NumberFilter(field_name="gpus__gpu_id", label="GPU id", distinct=True)
    level = django_filters.NumberFilter()

    class Meta:
        model = DiagnosticRun
        fields = ["server", "gpu", "level"]


class CheckFilter(django_filters.FilterSet):
    gpu = django_filters.NumberFilter(field_name="gpu_id", label="GPU id")
    name = django_filters.CharFilter()

    class Meta:
        model = AcceptanceCheck
        fields = ["gpu", "name", "passed"]
