"""FilterSets of fleet's API lists: the audit trail and background jobs."""

from __future__ import annotations

import django_filters
from django.contrib.contenttypes.models import ContentType
from django.db.models import QuerySet
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
