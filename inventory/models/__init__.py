"""Inventory: where every GPU is, what it is, what state it is in, and what happened to it.

Locations: Site > Hall > Row > Rack > Server > GPU (slot = module id / PCI bus id).
Failure domains the rollout planner groups by: site, row, rack, power feed, NVLink domain.
GPUs carry denormalised site/row/rack ids (kept by the placement service) so every list filter
is one indexed column, as NetBox does with ``_site``/``_rack``.

Modules: :mod:`.places` (sites to racks, power feeds, NVLink domains), :mod:`.servers` (GPU models, platforms,
servers, GPUs and their history), :mod:`.imports` (uploaded import files). Import from ``inventory.models``.
"""

from inventory.models.imports import ImportRun
from inventory.models.places import Cooling, Hall, NvlinkDomain, PowerFeed, Rack, Row, Site
from inventory.models.scheduler import (
    HoldState,
    ReservationState,
    SchedulerHold,
    SchedulerNode,
    SchedulerReservation,
)
from inventory.models.servers import (
    FirmwareComponent,
    FirmwareObservation,
    Gpu,
    GpuModel,
    GpuMove,
    GpuState,
    GpuStateChange,
    MoveKind,
    Server,
    ServerPlatform,
    gpu_identity,
)

__all__ = [
    "Cooling", "FirmwareComponent", "FirmwareObservation", "Gpu", "GpuModel", "GpuMove", "GpuState", "GpuStateChange",
    "Hall", "HoldState", "ImportRun", "MoveKind", "NvlinkDomain", "PowerFeed", "Rack", "Row", "ReservationState", "SchedulerHold", "SchedulerNode", "SchedulerReservation", "Server", "ServerPlatform", "Site",
    "gpu_identity",
]
