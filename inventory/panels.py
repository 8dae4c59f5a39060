"""Panels that apps above inventory add to its GPU, server, rack and row pages, without inventory importing them.

An app registers a provider in its ``AppConfig.ready()``::

    panel_register("gpu", gpu_panels)   # gpu_panels(*, gpu) -> list[Panel]

and the page's view puts ``panels_context("gpu", gpu=gpu)`` into its context. The page template includes each
panel's ``head`` once in ``<head>`` and each panel's ``template`` (with ``panel`` in the context) where the
panels go. Pages and their keyword arguments: ``gpu`` (gpu), ``server`` (server, gpus), ``rack`` (rack),
``row`` (row).

A provider that shows a row reached from the GPU by a one-to-one or foreign-key path names it, and the GPU page
joins it into its own read of the GPU (``select_related``) instead of the panel reading it with a query of its
own (telemetry's latest sample and procurement's asset cost 0.57 and 0.88 ms of CPU as queries of their own, the
GPU read 0.4 ms more with both joined; measured with other work on the machine; bench/README.md, the GPU page)::

    panel_register("gpu", gpu_panels, related=("latest",))   # the panel reads gpu.latest

The provider still works on a GPU read without the join (the relation is then read when it is first used).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

PAGES = ("gpu", "server", "rack", "row")
JOINED_PAGES = ("gpu",)  # pages whose view reads its object with panel_related()


@dataclass(frozen=True)
class Panel:
    template: str  # rendered with ``panel`` in the context
    context: dict[str, Any] = field(default_factory=dict)
    head: str = ""  # a template of assets for <head> ("" for none); each distinct one is included once


PanelProvider = Callable[..., list[Panel]]

_providers: dict[str, list[PanelProvider]] = {page: [] for page in PAGES}
_related: dict[str, list[str]] = {page: [] for page in JOINED_PAGES}


def panel_register(page: str, provider: PanelProvider, *, related: Sequence[str] = ()) -> None:
    """Show ``provider``'s panels on ``page`` (idempotent: registering the same provider twice shows it once).
    ``related``: ``select_related`` paths from the page's object that the provider reads (GPU page only)."""
    if page not in _providers:
        raise ValueError(f"unknown page {page!r}; pages are {', '.join(PAGES)}")
    if related and page not in _related:
        raise ValueError(f"the {page} page does not join its panels' relations; only {', '.join(JOINED_PAGES)}")
    if provider not in _providers[page]:
        _providers[page].append(provider)
    for path in related:
        if path not in _related[page]:
            _related[page].append(path)


def panel_related(page: str) -> tuple[str, ...]:
    """The relations ``page``'s panels read from its object, for the page's view to join into its read."""
    return tuple(_related[page])


def panels_context(page: str, **objects: Any) -> dict[str, Any]:
    """``panels`` (in registration order) and ``panel_heads`` (distinct, in order) for ``page``'s template."""
    panels = [panel for provider in _providers[page] for panel in provider(**objects)]
    heads = list(dict.fromkeys(panel.head for panel in panels if panel.head))
    return {"panels": panels, "panel_heads": heads}
