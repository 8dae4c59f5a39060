"""Telemetry's panels on inventory's GPU, server, rack and row pages: health flags and the charts.

Registered with ``inventory.panels`` by ``TelemetryConfig.ready()``; inventory never imports this module.
"""

from __future__ import annotations

from urllib.parse import urlencode

from inventory.models import Gpu, Rack, Row, Server
from inventory.panels import Panel, panel_register
from telemetry import charts
from telemetry.health_selectors import gpu_open_flags, open_flag_counts, open_flags_in

ASSETS = "telemetry/includes/chart_assets.html"


def gpu_panels(*, gpu: Gpu) -> list[Panel]:
    return [Panel("telemetry/panels/gpu.html", {
        "chart": charts.gpu_chart(gpu), "flags": gpu_open_flags(gpu_id=gpu.pk), "health_query": f"gpu={gpu.pk}",
    }, head=ASSETS)]


def server_panels(*, server: Server, gpus: list[Gpu]) -> list[Panel]:
    return [Panel("telemetry/panels/place.html", {
        "chart": charts.server_chart(server, gpus), "flag_counts": open_flag_counts(gpu_ids=[gpu.pk for gpu in gpus]),
    }, head=ASSETS)]


def rack_panels(*, rack: Rack) -> list[Panel]:
    return [Panel("telemetry/panels/place.html", {
        "chart": charts.group_chart("rack", rack.pk, f"Rack {rack.name}"), "flag_counts": open_flag_counts(rack_id=rack.pk),
        "place_flags": open_flags_in(rack_id=rack.pk), "health_query": urlencode({"rack": rack.name}),
    }, head=ASSETS)]


def row_panels(*, row: Row) -> list[Panel]:
    return [Panel("telemetry/panels/row.html", {
        "chart": charts.group_chart("row", row.pk, f"Row {row.name}"), "flag_counts": open_flag_counts(row_id=row.pk),
        "place_flags": open_flags_in(row_id=row.pk), "health_query": urlencode({"row": f"{row.site.code}/{row.name}"}),
    }, head=ASSETS)]


def panels_register() -> None:
    panel_register("gpu", gpu_panels, related=("latest",))  # the chart's current values: joined to the GPU read
    panel_register("server", server_panels)
    panel_register("rack", rack_panels)
    panel_register("row", row_panels)
