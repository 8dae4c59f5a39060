"""inventory.panels: the relations a GPU page's panels read come with the page's read of the GPU."""

from __future__ import annotations

import pytest

from inventory import panels


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setattr(panels, "_providers", {page: [] for page in panels.PAGES})
    monkeypatch.setattr(panels, "_related", {page: [] for page in panels.JOINED_PAGES})


def _provider(**_):
    return []


def test_related_paths_are_kept_once_in_order(registry):
    panels.panel_register("gpu", _provider, related=("latest",))
    panels.panel_register("gpu", _provider, related=("latest", "asset__order_line__order"))
    assert panels.panel_related("gpu") == ("latest", "asset__order_line__order")
    assert panels.panels_context("gpu", gpu=None) == {"panels": [], "panel_heads": []}  # registered once


def test_only_the_gpu_page_joins_its_panels_relations(registry):
    with pytest.raises(ValueError, match="does not join"):
        panels.panel_register("server", _provider, related=("asset",))
    panels.panel_register("server", _provider)  # without relations: as before
    with pytest.raises(ValueError, match="unknown page"):
        panels.panel_register("hall", _provider)


def test_the_installed_apps_panels_ask_for_their_rows():
    assert {"latest", "asset__order_line__order"} <= set(panels.panel_related("gpu"))
