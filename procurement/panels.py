"""Procurement's panel on inventory's GPU page: the board's order, warranty and RMA cases, and "Open RMA case".

Registered with ``inventory.panels`` by ``ProcurementConfig.ready()``; inventory never imports this module."""

from __future__ import annotations

from inventory.models import Gpu, GpuState
from inventory.panels import Panel, panel_register
from procurement.models import GpuAsset
from procurement.services.rma import rma_cases_for_gpu, rma_open_refusal


def gpu_panels(*, gpu: Gpu) -> list[Panel]:
    try:
        asset: GpuAsset | None = gpu.asset  # joined to the page's GPU read (ASSET below)
    except GpuAsset.DoesNotExist:
        asset = None
    cases = rma_cases_for_gpu(gpu)
    return [Panel("procurement/panels/gpu.html", {
        "gpu": gpu, "asset": asset, "cases": cases,
        "can_open": gpu.state in (GpuState.RMA, GpuState.DRAINED, GpuState.SPARE, GpuState.RECEIVED,
                                  GpuState.BURN_IN) and rma_open_refusal(gpu, cases=cases) is None})]


ASSET = "asset__order_line__order"  # what the panel shows of the board's asset: its order's reference


def panels_register() -> None:
    panel_register("gpu", gpu_panels, related=(ASSET,))
