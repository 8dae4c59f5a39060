"""Operator web UI of the inventory (HTML + htmx). One module per area, re-exported here."""

from inventory.views.gpus import gpu_bulk_transition, gpu_detail, gpu_export, gpu_list, gpu_transition
from inventory.views.imports import import_preview, import_upload
from inventory.views.places import (
    dashboard,
    place_suggest,
    rack_detail,
    row_detail,
    server_detail,
    server_list,
    server_place,
    server_place_bulk,
    site_detail,
    site_list,
)

__all__ = [
    "dashboard",
    "gpu_bulk_transition",
    "gpu_detail",
    "gpu_export",
    "gpu_list",
    "gpu_transition",
    "import_preview",
    "import_upload",
    "place_suggest",
    "rack_detail",
    "row_detail",
    "server_detail",
    "server_list",
    "server_place",
    "server_place_bulk",
    "site_detail",
    "site_list",
]
