"""``manage.py check_history_store``: with ``FLEET_TELEMETRY_BACKEND=prometheus``, whether the store answers and its
series carry the configured UUID label (``FLEET_PROMETHEUS_LABELS``) with the UUIDs of Fleet's GPUs
(``series_selectors.store_label_check``: ``/api/v1/series``, no samples read). Exit 0 when they do, 1 with the
reason (and the label the same hosts' series use, if one holds Fleet's UUIDs) when not: run it at deploy time."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from telemetry.promql import StoreUnavailable
from telemetry.series_selectors import store_label_check


class Command(BaseCommand):
    help = "Check that the Prometheus-compatible history store has series for Fleet's GPUs under the UUID label."

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.FLEET_TELEMETRY_BACKEND != "prometheus":
            self.stdout.write("FLEET_TELEMETRY_BACKEND is embedded: Fleet keeps its own history, no store to check.")
            return
        try:
            check = store_label_check()
        except StoreUnavailable as exc:
            raise CommandError(f"The history store: {exc}") from exc
        if not check.ok:
            raise CommandError(check.message)
        self.stdout.write(check.message)
