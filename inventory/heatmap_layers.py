"""Layers of the fleet heatmap that are not telemetry metrics, registered by the app that owns their data without
the heatmap's app (telemetry) being imported: inventory's workload-scheduler state (``inventory.scheduler.heatmap``,
registered in ``InventoryConfig.ready``), telemetry's open health flags. Like ``inventory.panels``, the registry
lives in the lowest layer that registers into it; telemetry's heatmap reads it.

A layer gives one small int per GPU for an instant (``values(at) -> (gpu ids, values)``; a layer that only knows
"now" ignores ``at``). A categorical layer names its values: ``categories[v] = (label, colour)``, shown as the
heatmap's legend and hover text (``always``: shown in the legend even when no cell has that value).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import NamedTuple

LayerValues = Callable[[dt.datetime | None], tuple[list[int], list[int | None]]]


class Category(NamedTuple):
    label: str
    color: str  # CSS hex, "#rrggbb"
    always: bool = True


class HeatmapLayer(NamedTuple):
    label: str
    unit: str
    values: LayerValues
    categories: tuple[Category, ...] = ()


HEATMAP_LAYERS: dict[str, HeatmapLayer] = {}


def heatmap_layer_register(name: str, *, label: str, unit: str, values: LayerValues,
                           categories: tuple[Category, ...] = ()) -> None:
    HEATMAP_LAYERS[name] = HeatmapLayer(label, unit, values, categories)
