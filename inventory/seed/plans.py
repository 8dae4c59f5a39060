"""The demo fleet's plan: what the builder fills in (a server's plan, the result), the columns it writes, and the
small helpers it draws with."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import models

from inventory.seed.catalog import (
    SITES,
    Sku,
)


@dataclass
class SeedResult:
    gpus: int = 0
    servers: int = 0
    sites: int = 0
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows written
    audit_events: int = 0
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # phase -> seconds
    backend: str = ""

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())


def weighted(rng: random.Random, choices: Sequence[tuple[str, float]]) -> str:
    return rng.choices([c for c, _ in choices], weights=[w for _, w in choices])[0]


def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Split ``total`` by ``weights`` (largest remainder): the parts always add up to ``total``."""
    norm = sum(weights) or 1
    exact = [total * w / norm for w in weights]
    parts = [int(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (parts[i] - exact[i], i))
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    return parts


def jsonable(value: Any) -> Any:
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


@dataclass
class ServerPlan:
    site: int  # index into SITES
    sku: Sku
    row_no: int
    node: int  # position in the row, 1-based (the ``n03`` of ``sjc1-r07-n03``)
    rack: int  # index, then id
    row: int  # index, then id
    site_id: int
    deployed: dt.datetime  # in service since (burn-in servers: due to enter service)
    id: int = 0
    burn_in: bool = False
    masked: bool = False
    driver: str = ""
    vbios: str = ""
    driver_upgraded: dt.datetime | None = None  # from the oldest driver to the current one
    last_seen: dt.datetime | None = None  # last inventory scrape

    @property
    def hostname(self) -> str:
        return f"{SITES[self.site][0]}-r{self.row_no:02d}-n{self.node:02d}"


GPU_COLUMNS = ("id", "serial", "serial_raw", "uuid", "uuid_raw", "identity_masked", "model_id", "board_part_number",
               "asset_tag", "warranty_end", "state", "state_changed_at", "server_id", "module_id", "pci_bus_id",
               "minor_number", "site_id", "row_id", "rack_id", "vbios_version", "inforom_image", "driver_version",
               "created_at", "updated_at")
STATE_COLUMNS = ("gpu_id", "from_state", "to_state", "actor_name", "reason", "at")
MOVE_COLUMNS = ("gpu_id", "kind", "from_server_id", "from_pci_bus_id", "from_module_id", "to_server_id",
                "to_pci_bus_id", "to_module_id", "actor_name", "reason", "at")
FIRMWARE_COLUMNS = ("gpu_id", "server_id", "component", "version", "source", "first_seen", "last_seen")
AUDIT_COLUMNS = ("at", "actor_id", "actor_name", "source", "action", "content_type_id", "object_id", "object_repr",
                 "changes", "message")
UNPLACED = (None, None, "", None, None, None, None)  # server, module, bus, minor, site, row, rack
MASKED_SERIAL, MASKED_UUID = "0000000000000", "GPU-00000000-0000-0000-0000-000000000000"


@dataclass
class Audited:
    model: type[models.Model]
    columns: Sequence[str]
    rows: list[tuple]
    repr_of: Callable[[tuple], str]
    skip_empty: bool = False
