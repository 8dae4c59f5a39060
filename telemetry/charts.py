"""What the chart partial (``templates/telemetry/includes/chart.html``) needs: scope, panels, the current values
and XID markers of a GPU. The series themselves come from the history API (``charts.js``), each range read from
the tier that covers it (``resolution=auto``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from fleet.kept import KeptRead
from inventory.models import Gpu, Server
from telemetry.dcgm import throttle_reason_names
from telemetry.models import GpuLatest, XidEvent

RANGES = (("1h", "1 h"), ("24h", "24 h"), ("7d", "7 d"), ("90d", "90 d"), ("1y", "1 y"))
XID_MARKERS = 500  # newest XIDs of the last year drawn as markers

# Read on every view of a GPU page or its heatmap side panel: the statement is kept (fleet.kept).
_xids = KeptRead(lambda gpu_id, since: XidEvent.objects.filter(gpu_id=gpu_id, at__gte=since).order_by("-at")
                 .only("at", "xid", "hardware")[:XID_MARKERS])


def history_url() -> str:
    try:
        return reverse("api:telemetry-history")
    except NoReverseMatch:
        return "/api/v1/telemetry/history/"


def _base(scope: str, scope_id: int, title: str, panels: tuple[str, ...]) -> dict[str, Any]:
    return {"scope": scope, "id": scope_id, "title": title, "panels": ",".join(panels), "ranges": RANGES,
            "default_range": "24h", "history_url": history_url(), "dom_id": f"chart-{scope}-{scope_id}"}


def gpu_chart(gpu: Gpu) -> dict[str, Any]:
    """Temperature band, power, throttling, errors for one GPU, with its latest sample (two queries; one when the
    GPU was read with ``latest`` joined, as the GPU page and the heatmap's side panel read it)."""
    chart = _base("gpu", gpu.pk, f"GPU {gpu.identity}", ("temp", "power", "throttle", "errors"))
    try:
        latest: GpuLatest | None = gpu.latest
    except GpuLatest.DoesNotExist:
        latest = None
    since = timezone.now() - dt.timedelta(days=366)
    chart.update({
        "latest": latest,
        "throttle_reasons": throttle_reason_names(latest.throttle_mask) if latest else [],
        "xids": [{"t": int(e.at.timestamp()), "xid": e.xid, "hw": e.hardware} for e in _xids(gpu.pk, since)],
    })
    return chart


def group_chart(level: str, group_id: int, title: str) -> dict[str, Any]:
    """Rack, row or site aggregate: temperature average and maximum, power sum."""
    return _base(level, group_id, title, ("temp", "power"))


def server_chart(server: Server, gpus: list[Gpu]) -> dict[str, Any]:
    """One series per GPU of the server (mean temperature, mean power)."""
    chart = _base("server", server.pk, server.hostname, ("temp", "power"))
    chart["series"] = [{"id": gpu.pk, "label": f"slot {gpu.module_id}" if gpu.module_id is not None else f"#{gpu.pk}"}
                       for gpu in gpus]
    return chart
