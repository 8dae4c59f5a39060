"""Acceptance's panels on inventory's pages: the GPU's burn-in evidence (GPU page) and the host's diagnostic runs
with an upload form (server page). Registered by ``AcceptanceConfig.ready()``; inventory never imports this."""

from __future__ import annotations

from acceptance import selectors
from inventory.models import Gpu, Rack, Server
from inventory.panels import Panel, panel_register


def gpu_panels(*, gpu: Gpu) -> list[Panel]:
    return [Panel("acceptance/panels/gpu.html", selectors.gpu_evidence(gpu=gpu))]


def server_panels(*, server: Server, **_: object) -> list[Panel]:
    return [Panel("acceptance/panels/server.html", {"server": server, "runs": selectors.server_runs(server=server)})]


def rack_panels(*, rack: Rack, **_: object) -> list[Panel]:
    return [Panel("acceptance/panels/rack.html", {"rack": rack})]


def panels_register() -> None:
    panel_register("gpu", gpu_panels)
    panel_register("server", server_panels)
    panel_register("rack", rack_panels)
