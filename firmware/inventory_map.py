"""Map Redfish FirmwareInventory members (SoftwareInventory: ``Id``, ``Name``, ``Version``) to firmware components.

A pure function: the built-in patterns work without the database; ``ComponentSpec.inventory_pattern`` rows (or
any ``{component: pattern}`` mapping) can be passed in to override them. Patterns are full matches on the
member's ``Id``, tried in order: the first match wins, so the more specific patterns (InfoROM, ERoT) come
before the broader ones. Members no pattern matches (``Backup_BMC``, ``SS``) are left out.

Ids follow the samples in ``shared/samples/redfish``: an NVIDIA HGX HMC (``HGX_FW_BMC_0``,
``HGX_FW_GPU_SXM_<n>``, ``HGX_InfoROM_GPU_SXM_<n>``, ``HGX_FW_ERoT_*``, ``HGX_FW_NVSwitch_<n>``,
``HGX_FW_CPLD_<n>``) next to a host BMC (``BMC``, ``BIOS``, ``GPU<n>``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# (component, Id pattern), in matching order. Component values are inventory.FirmwareComponent values.
DEFAULT_PATTERNS: tuple[tuple[str, str], ...] = (
    ("gpu_inforom_image", r"(HGX_)?InfoROM_GPU_SXM_\d+"),
    ("erot", r"(HGX_FW_)?ERoT_.+"),
    ("gpu_vbios", r"(HGX_FW_)?GPU_SXM_\d+|GPU\d+"),
    ("hmc", r"HGX_FW_BMC_\d+|HMC(_\d+)?"),
    ("bmc", r"BMC|HostBMC_\d+|BMC_FW"),
    ("sbios", r"BIOS|SBIOS|HostBIOS_\d+"),
    ("cpld", r"(HGX_FW_)?CPLD(_\d+)?"),
    ("nvswitch", r"(HGX_FW_)?NVSwitch_\d+"),
    ("nic", r"NIC(_?\d+)?|CX\d+(_\d+)?|ConnectX.*"),
    ("dpu", r"BlueField.*|BF\d+(_\d+)?|DPU(_?\d+)?"),
    ("psu", r"PSU(_?\d+)?|PowerSupply_?\d*"),
)

_SLOT = re.compile(r"(?:GPU_SXM_|GPU)(\d+)$")


def gpu_slot(inventory_id: str) -> int | None:
    """The GPU module id of a per-GPU inventory item: ``HGX_FW_GPU_SXM_3`` -> 3, ``GPU1`` -> 1."""
    match = _SLOT.search(inventory_id)
    return int(match.group(1)) if match else None


def _compile(specs: Mapping[str, str] | Iterable[Any] | None) -> list[tuple[str, re.Pattern[str]]]:
    pairs: list[tuple[str, str]]
    if specs is None:
        pairs = list(DEFAULT_PATTERNS)
    elif isinstance(specs, Mapping):
        pairs = list(specs.items())
    else:  # ComponentSpec rows (or anything with .component / .inventory_pattern)
        pairs = [(s.component, s.inventory_pattern) for s in specs]
    overridden = {component for component, pattern in pairs if pattern}
    # Components without a pattern of their own keep the default one, in the default order.
    pairs = [p for p in pairs if p[1]] + [p for p in DEFAULT_PATTERNS if p[0] not in overridden]
    return [(component, re.compile(pattern)) for component, pattern in pairs]


def components_from_inventory(members: list[dict], specs: Mapping[str, str] | Iterable[Any] | None = None,
                              ) -> list[tuple[str, str, str]]:
    """``[(component, inventory_id, version), ...]`` for the members that map to a component, in input order.

    ``members`` are SoftwareInventory documents (only ``Id`` and ``Version`` are read; a member without an
    ``Id`` falls back to the last segment of its ``@odata.id``). Members without a version are skipped.
    """
    compiled = _compile(specs)
    found: list[tuple[str, str, str]] = []
    for member in members:
        inventory_id = str(member.get("Id") or str(member.get("@odata.id", "")).rstrip("/").rsplit("/", 1)[-1])
        version = str(member.get("Version") or "").strip()
        if not inventory_id or not version:
            continue
        for component, pattern in compiled:
            if pattern.fullmatch(inventory_id):
                found.append((component, inventory_id, version))
                break
    return found
