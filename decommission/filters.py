"""FilterSets shared by the HTML lists and the API; an unknown parameter is a 400, never an unfiltered list."""

from __future__ import annotations

import django_filters
from django.core.exceptions import ValidationError

from decommission.models import Certificate, DecommissionRequest, EvidenceEvent, RequestState

PAGING = {"cursor", "page_size", "after", "format"}


class StrictFilterSet(django_filters.FilterSet):
    def is_valid(self) -> bool:
        unknown = set(self.data) - set(self.base_filters) - PAGING
        if unknown:
            raise ValidationError({name: f"Unknown filter '{name}'; filters are "
                                         f"{', '.join(sorted(self.base_filters))}." for name in sorted(unknown)})
        return super().is_valid()


class RequestFilter(StrictFilterSet):
    state = django_filters.ChoiceFilter(choices=RequestState.choices)

    class Meta:
        model = DecommissionRequest
        fields = ["state", "category", "destination"]


class CertificateFilter(StrictFilterSet):
    class Meta:
        model = Certificate
        fields = ["request", "kind", "key_id"]


class EventFilter(StrictFilterSet):
    class Meta:
        model = EvidenceEvent
        fields = ["request", "medium", "asset", "step"]
