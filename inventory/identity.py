"""Normalising the identities tools report: serials, UUIDs, PCI bus ids.

Masked values are not identities. ``normalize_serial('0000000000000')`` is ``None``, so two
boards that both report a mask can never be merged into one GPU.
"""

from __future__ import annotations

import re

_MASKED_SERIAL_WORDS = {"", "N/A", "NA", "[N/A]", "REDACTED", "UNKNOWN", "NONE", "NULL", "NOT AVAILABLE",
                        "[NOT SUPPORTED]", "NOT SUPPORTED"}
_ZEROES = re.compile(r"^[0\-\s]+$")
_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
_PCI = re.compile(r"^(?:([0-9a-f]{4,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})(?:\.([0-7]))?$", re.IGNORECASE)


def normalize_serial(raw: str | None) -> str | None:
    """The serial as an identity, or ``None`` when absent or masked."""
    value = (raw or "").strip()
    if value.upper() in _MASKED_SERIAL_WORDS or _ZEROES.match(value) or "REDACTED" in value.upper():
        return None
    return value


def normalize_uuid(raw: str | None) -> str | None:
    """``GPU-xxxxxxxx-...`` lower-cased, or ``None`` when absent, malformed or all zeroes."""
    value = (raw or "").strip()
    if not value or value.upper() in _MASKED_SERIAL_WORDS:
        return None
    if not value.upper().startswith("GPU-"):
        value = "GPU-" + value
    if not _UUID.match(value):
        return None
    body = value[4:].replace("-", "")
    if set(body) <= {"0"}:
        return None
    return "GPU-" + value[4:].lower()


def normalize_pci_bus_id(raw: str | None) -> str:
    """Canonical ``DDDDDDDD:BB:DD.F`` upper-case (nvidia-smi's own form), ``''`` when absent.

    Accepts the kernel's ``0000:9b:00``, dcgm's ``00000000:9B:00.0`` and nvidia-smi's form.
    """
    value = (raw or "").strip()
    if not value or value.upper() in _MASKED_SERIAL_WORDS:
        return ""
    match = _PCI.match(value)
    if not match:
        raise ValueError(f"not a PCI bus id: {value!r}")
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):08X}:{int(bus, 16):02X}:{int(device, 16):02X}.{int(function or '0')}"
