"""Canonical JSON (RFC 8785 style for the values Fleet writes: strings, integers, booleans, null, lists, objects)
and SHA-256 helpers shared by the evidence chain, certificates and the offline verifier. Floats are refused:
they have no single canonical text here."""

from __future__ import annotations

import hashlib
import json
from typing import Any

GENESIS = "0" * 64


def _check(value: Any) -> None:
    if isinstance(value, float):
        raise TypeError("canonical JSON here carries no floats; write decimals as strings")
    if isinstance(value, dict):
        for v in value.values():
            _check(v)
    elif isinstance(value, list | tuple):
        for v in value:
            _check(v)


def canonical(value: Any, *, check: bool = True) -> bytes:
    """Canonical bytes; ``check=False`` skips the no-float walk (verifying: a float only fails the signature)."""
    if check:
        _check(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256_hex(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def event_hash(prev_hash: str, body: dict[str, Any], *, check: bool = True) -> str:
    """``SHA-256(prev_hash || canonical(event))``: each event commits to everything before it."""
    return sha256_hex(prev_hash.encode() + canonical(body, check=check))
