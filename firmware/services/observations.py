"""Observed firmware from a BMC's Redfish FirmwareInventory, written through ``inventory.services`` (firmware
never writes inventory's tables itself)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db import transaction

from firmware.inventory_map import components_from_inventory, gpu_slot
from firmware.models import ComponentSpec, Release, version_key
from firmware.services.catalog import PER_GPU
from fleet.audit import Actor
from inventory import services as inventory_services
from inventory.models import Gpu, Server

SOURCE = "redfish"


@dataclass
class InventoryRecordResult:
    recorded: list[tuple[str, str, str]] = field(default_factory=list)  # (component, device, version)
    unmatched_gpu_items: list[str] = field(default_factory=list)  # per-GPU items with no GPU in that slot
    disagreeing: dict[str, list[str]] = field(default_factory=dict)  # server component -> versions seen


@transaction.atomic
def inventory_specs() -> list[ComponentSpec] | None:
    """The component specs with a Redfish id pattern (None: the built-in patterns of ``inventory_map``)."""
    return list(ComponentSpec.objects.exclude(inventory_pattern="")) or None


def firmware_inventory_record(*, server: Server, members: list[dict], seen_at: dt.datetime,
                              actor: Actor | None, specs: list[ComponentSpec] | None = None) -> InventoryRecordResult:
    """Record what one server's BMC reports in its FirmwareInventory (SoftwareInventory documents).

    Server components are observed on the server; when several items of one component disagree (the ERoTs
    of the BMC and of each GPU) the lowest version is recorded, so compliance never looks better than the
    weakest item. Per-GPU items (``HGX_FW_GPU_SXM_<n>``, ``HGX_InfoROM_GPU_SXM_<n>``, ``GPU<n>``) go to the
    server's GPU whose module id is ``n``; the VBIOS and InfoROM columns of the GPU follow. ``specs``: from
    ``inventory_specs()`` (read once by callers that record many servers).
    """
    found = components_from_inventory(members, specs if specs is not None else inventory_specs())
    gpus = {g.module_id: g for g in Gpu.objects.filter(server=server, module_id__isnull=False)}
    result = InventoryRecordResult()
    by_component: dict[str, list[str]] = {}
    for component, inventory_id, version in found:
        if component in PER_GPU:
            gpu = gpus.get(gpu_slot(inventory_id))
            if gpu is None:
                result.unmatched_gpu_items.append(inventory_id)
                continue
            inventory_services.firmware_observe(gpu=gpu, component=component, version=version, source=SOURCE,
                                                seen_at=seen_at, actor=actor)
            result.recorded.append((component, gpu.identity, version))
        else:
            by_component.setdefault(component, []).append(version)
    for component, versions in sorted(by_component.items()):
        distinct = sorted(set(versions), key=version_key)
        if len({version_key(v) for v in distinct}) > 1:
            result.disagreeing[component] = distinct
        inventory_services.firmware_observe(server=server, component=component, version=distinct[0],
                                            source=SOURCE, seen_at=seen_at, actor=actor)
        result.recorded.append((component, server.hostname, distinct[0]))
    return result


def release_matches(release: Release, version: str) -> bool:
    """``version`` (as a BMC reports it) is ``release``'s version: compared by version key, so case and
    zero padding do not matter."""
    return version_key(version) == release.version_key


@dataclass
class InventoryScanResult:
    scanned: int = 0
    recorded: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # hostname -> error (BMC unreachable, 5xx, timeout)


def firmware_inventory_scan(*, servers: list[Server], actor: Actor | None) -> InventoryScanResult:
    """Read each server's Redfish FirmwareInventory from its BMC and record what it reports.

    One server's failure (no BMC address, unreachable, an error answer) is recorded in the result and never
    stops the others; each server's observations are written in their own transaction, after the reads, so no
    transaction is held open across network calls.
    """
    from django.utils import timezone

    from firmware.redfish import BmcError, bmc_client

    result = InventoryScanResult()
    specs = inventory_specs()
    for server in servers:
        if not server.bmc_address:
            result.failed[server.hostname] = "no BMC address"
            continue
        try:
            client = bmc_client(server.bmc_address)
            members = client.inventory(client.inventory_ids())
        except BmcError as exc:
            result.failed[server.hostname] = str(exc)
            continue
        recorded = firmware_inventory_record(server=server, members=members, seen_at=timezone.now(), actor=actor,
                                             specs=specs)
        result.scanned += 1
        result.recorded += len(recorded.recorded)
    return result


def inventory_scan_chunks(size: int) -> list[list[int]]:
    """The ids of every server with a BMC address, ``size`` per chunk (one scan message each)."""
    ids = list(Server.objects.exclude(bmc_address="").order_by("id").values_list("id", flat=True))
    return [ids[start:start + size] for start in range(0, len(ids), size)]
