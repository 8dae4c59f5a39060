"""Certificate files: the exact bytes the CLI export, the API and the page download all serve, and the public
keys file the offline verifier reads."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from decommission.models import Certificate


def certificate_json(cert: Certificate) -> bytes:
    """The signed file: ``{"certificate": ..., "signature": ...}``, indented for people (the signature covers the
    canonical form of ``certificate``, so whitespace and key order do not matter)."""
    return json.dumps(cert.document, indent=2, sort_keys=True, ensure_ascii=False).encode() + b"\n"


def certificate_filename(cert: Certificate) -> str:
    what = cert.medium.serial if cert.medium_id else f"{cert.asset.label}-bundle"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in what)
    return f"DR-{cert.request_id}_{safe}_{cert.id}.json"


def keys_from_file(path: Path) -> dict[str, str]:
    """Key id -> raw public key from ``certificate_public_key``'s JSON (``{"keys": [...]}``)."""
    doc = json.loads(path.read_text())
    keys = {k["key_id"]: k["public_key"] for k in doc.get("keys", [])} if isinstance(doc, dict) else {}
    if not keys:
        raise ValueError("no keys in this file (expects certificate_public_key's JSON output)")
    for key_id, value in keys.items():
        if len(base64.b64decode(value)) != 32:
            raise ValueError(f"key {key_id} is not a 32-byte Ed25519 public key")
    return keys
