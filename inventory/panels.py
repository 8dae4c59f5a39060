"""Panels that apps above inventory add to its GPU, server, rack and row pages, without inventory importing them.

An app registers a provider in its ``AppConfig.ready()``::

    panel_register("gpu", gpu_panels)   # gpu_panels(*, gpu) -> list[Panel]

and the page's view puts ``panels_context("gpu", gpu=gpu)`` into its context. The page template includes each
panel's ``head`` once in ``<head>`` and each panel's ``template`` (with ``panel`` in the context) where the
panels go. Pages and their keyword arguments: ``gpu`` (gpu), ``server`` (server, gpus), ``rack`` (rack),
``row`` (row).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PAGES = ("gpu", "server", "rack", "row")


@dataclass(frozen=True)
class Panel:
    template: str  # rendered with ``panel`` in the context
    context: dict[str, Any] = field(default_factory=dict)
    head: str = ""  # a template of assets for <head> ("" for none); each distinct one is included once


PanelProvider = Callable[..., list[Panel]]

_providers: dict[str, list[PanelProvider]] = {page: [] for page in PAGES}


def panel_register(page: str, provider: PanelProvider) -> None:
    """Show ``provider``'s panels on ``page`` (idempotent: registering the same provider twice shows it once)."""
    if page not in _providers:
        raise ValueError(f"unknown page {page!r}; pages are {', '.join(PAGES)}")
    if provider not in _providers[page]:
        _providers[page].append(provider)


def panels_context(page: str, **objects: Any) -> dict[str, Any]:
    """``panels`` (in registration order) and ``panel_heads`` (distinct, in order) for ``page``'s template."""
    panels = [panel for provider in _providers[page] for panel in provider(**objects)]
    heads = list(dict.fromkeys(panel.head for panel in panels if panel.head))
    return {"panels": panels, "panel_heads": heads}
