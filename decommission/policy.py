"""The sanitization policy: the minimum level for a request's (confidentiality, destination), read from the
editable table; an operator may raise it, never lower it (a downgrade needs an approved exception)."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from decommission.models import (
    DESTINATION_FACTS,
    LEVEL_RANK,
    Category,
    Destination,
    Level,
    MediaType,
    PolicyRule,
)


def nist_flow(category: str, destination: str) -> str:
    """NIST SP 800-88 r1 Fig. 4-1 (r2 §4.3): the level the decision flow gives. The seed of the table."""
    leaves, reuse = DESTINATION_FACTS[destination]
    if category == Category.LOW:
        return Level.PURGE if leaves else Level.CLEAR
    if not reuse:
        return Level.DESTROY
    if category == Category.MODERATE:
        return Level.PURGE if leaves else Level.CLEAR
    return Level.DESTROY if leaves else Level.PURGE


def minimum_level(*, category: str, destination: str) -> str:
    if category not in Category.values:
        raise ValidationError({"category": f"'{category}' is not a category; use {', '.join(Category.values)}."})
    if destination not in Destination.values:
        raise ValidationError({"destination": f"'{destination}' is not a destination; "
                                              f"use {', '.join(Destination.values)}."})
    rule = PolicyRule.objects.filter(category=category, destination=destination).first()
    return rule.min_level if rule else nist_flow(category, destination)


def at_least(level: str, minimum: str) -> bool:
    return LEVEL_RANK[level] >= LEVEL_RANK[minimum]


# What each medium gets, and how: (level the step reaches, technique, where it runs). User-data media (NVMe, DPU
# storage, TPM-sealed keys) get the request's level; management-plane stores (BMC/HMC flash, UEFI NVRAM) hold
# configuration and logs, not tenant data, and get Clear (factory state, NIST's definition of Clear where rewriting
# is not supported); volatile media are cleared by removing power; InfoROM/VBIOS hold no workload data and are
# recorded, never altered. A Destroy request runs the steps, then needs a destruction record per medium.
METHODS: dict[str, tuple[str, str, str]] = {
    MediaType.NVME: (Level.PURGE, "Sanitize: crypto erase (else block erase)", "agent"),
    MediaType.DPU: (Level.PURGE, "DPU factory reset and eMMC erase over Redfish", "redfish"),
    MediaType.TPM: (Level.PURGE, "tpm2_clear (sealed keys destroyed: cryptographic erase)", "agent"),
    MediaType.BMC_FLASH: (Level.CLEAR, "LogService.ClearLog after archive; Manager.ResetToDefaults(ResetAll)",
                          "redfish"),
    MediaType.HMC_FLASH: (Level.CLEAR, "LogService.ClearLog after archive", "redfish"),
    MediaType.UEFI_NVRAM: (Level.CLEAR, "Bios.ResetBios", "redfish"),
    MediaType.GPU_HBM: (Level.CLEAR, "Volatile: no compute contexts, GPU reset, power removed", "agent"),
    MediaType.GPU_INFOROM: (Level.CLEAR, "Recorded, not altered (no workload data)", "record"),
}
USER_DATA = frozenset({MediaType.NVME, MediaType.DPU, MediaType.TPM})


def required_level(media_type: str, request_level: str) -> str:
    """The level this medium must reach in a request at ``request_level`` (Destroy applies to every medium)."""
    if request_level == Level.DESTROY:
        return Level.DESTROY
    return request_level if media_type in USER_DATA else Level.CLEAR


def step_reaches(media_type: str, level: str) -> bool:
    """Whether this medium's step reaches ``level`` without physical destruction."""
    return level != Level.DESTROY and at_least(METHODS[media_type][0], level)
