"""Normalising the identities tools report: serials, UUIDs, PCI bus ids.

Masked values are not identities. ``normalize_serial('0000000000000')`` is ``None``, so two
boards that both report a mask can never be merged into one GPU.

Two kinds of "not an identity": *absent* (the tool had nothing to say: ``N/A``, ``[Not Supported]``,
empty) and *masked* (the tool said something, but a placeholder: ``0000000000000``, ``REDACTED``,
anonymised counting runs such as ``0123456789012`` or ``GPU-12345678-aaaa-bbbb-cccc-0123456789ab``).
Only masked values flag a GPU ``identity_masked``; see :func:`is_absent`.
"""

from __future__ import annotations

import re

_MASKED_SERIAL_WORDS = {"", "N/A", "NA", "[N/A]", "REDACTED", "UNKNOWN", "NONE", "NULL", "NOT AVAILABLE",
                        "[NOT SUPPORTED]", "NOT SUPPORTED"}
# What nvidia-smi prints when it has no value (XML and CSV forms); upper-cased.
_ABSENT_WORDS = {"", "N/A", "[N/A]", "NOT SUPPORTED", "[NOT SUPPORTED]", "NOT AVAILABLE", "UNKNOWN ERROR",
                 "[UNKNOWN ERROR]", "REQUESTED FUNCTIONALITY HAS BEEN DEPRECATED",
                 "[REQUESTED FUNCTIONALITY HAS BEEN DEPRECATED]", "INSUFFICIENT PERMISSIONS",
                 "[INSUFFICIENT PERMISSIONS]"}
_ZEROES = re.compile(r"^[0\-\s]+$")
_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
_PCI = re.compile(r"^(?:([0-9a-f]{4,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})(?:\.([0-7]))?$", re.IGNORECASE)
_HEX = "0123456789abcdef"


def is_absent(raw: str | None) -> bool:
    """True when the tool reported nothing (``N/A``, ``[Not Supported]``, empty): not a value, not a mask."""
    return raw is None or raw.strip().upper() in _ABSENT_WORDS


def _counting_run(value: str, alphabet: str, min_len: int) -> bool:
    """``0123456789012`` / ``12345678``: every character follows the previous one (wrapping)."""
    if len(value) < min_len:
        return False
    value = value.lower()
    previous = alphabet.find(value[0])
    for char in value[1:]:
        position = alphabet.find(char)
        if previous < 0 or position != (previous + 1) % len(alphabet):
            return False
        previous = position
    return True


def _placeholder_serial(value: str) -> bool:
    """Anonymised serials: one repeated character (``XXXXXXXX``) or a counting run of digits."""
    compact = value.replace("-", "")
    return (len(compact) >= 6 and len(set(compact.upper())) == 1) or _counting_run(compact, "0123456789", 8)


def normalize_serial(raw: str | None) -> str | None:
    """The serial as an identity, or ``None`` when absent or masked."""
    value = (raw or "").strip()
    if (value.upper() in _MASKED_SERIAL_WORDS or _ZEROES.match(value) or "REDACTED" in value.upper()
            or _placeholder_serial(value)):
        return None
    return value


def normalize_uuid(raw: str | None) -> str | None:
    """``GPU-xxxxxxxx-...`` lower-cased, or ``None`` when absent, malformed or masked.

    Masked: all zeroes, a zero first group (``GPU-00000000-...``), or a first or last group that is a
    counting run of hex digits (``GPU-12345678-aaaa-bbbb-cccc-0123456789ab``, an anonymised sample).
    """
    value = (raw or "").strip()
    if not value or value.upper() in _MASKED_SERIAL_WORDS:
        return None
    if not value.upper().startswith("GPU-"):
        value = "GPU-" + value
    if not _UUID.match(value):
        return None
    groups = value[4:].lower().split("-")
    if set("".join(groups)) <= {"0"} or groups[0] == "00000000":
        return None
    if _counting_run(groups[0], _HEX, 8) or _counting_run(groups[4], _HEX, 8):
        return None
    return "GPU-" + "-".join(groups)


def normalize_pci_bus_id(raw: str | None) -> str:
    """Canonical ``DDDDDDDD:BB:DD.F`` upper-case (nvidia-smi's own form), ``''`` when absent.

    Accepts the kernel's ``0000:9b:00`` (and ``PCI:0000:9b:00``), dcgm's ``00000000:9B:00.0`` and
    nvidia-smi's form. Raises ``ValueError`` for anything else.
    """
    value = (raw or "").strip()
    if not value or value.upper() in _MASKED_SERIAL_WORDS:
        return ""
    if value[:4].upper() == "PCI:":
        value = value[4:]
    match = _PCI.match(value)
    if not match:
        raise ValueError(f"not a PCI bus id: {value!r}")
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):08X}:{int(bus, 16):02X}:{int(device, 16):02X}.{int(function or '0')}"
