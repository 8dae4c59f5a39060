"""Offline certificate verification: no database, only the signed file and the public keys.

A signed file is ``{"certificate": {...}, "signature": {"algorithm": "Ed25519", "key_id": ..., "value": b64}}``.
It is valid when the key is known, the signature covers the canonical certificate, every required field of
NIST SP 800-88 r1 Appendix G / r1 §4.8 / r2 §4.6 is present and non-empty, and every evidence event it carries
recomputes to its hash and links to the one before it.
"""

from __future__ import annotations

import base64
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from decommission.canonical import canonical, event_hash

# Dotted paths that must be present and non-empty in a per-medium certificate.
REQUIRED_MEDIUM = (
    "certificate_id", "kind", "issued_at", "request", "key_id",
    "performer.name", "performer.title", "performer.organization", "performer.location", "performer.phone",
    "performer.date", "performer.signature",
    "validator.name", "validator.title", "validator.organization", "validator.location", "validator.phone",
    "validator.date", "validator.signature",
    "media.manufacturer", "media.model", "media.serial", "media.property_number", "media.media_type",
    "media.source", "media.pre_sanitization_confidentiality", "media.data_backed_up",
    "sanitization.method_type", "sanitization.method_used", "sanitization.method_details", "sanitization.tool",
    "sanitization.tool_version", "sanitization.verification_method", "sanitization.minimum_level",
    "sanitization.completed_at", "destination.type", "destination.details",
    "evidence.chain_head", "evidence.events", "attestation",
)
REQUIRED_BUNDLE = ("certificate_id", "kind", "issued_at", "request", "key_id", "asset", "media_certificates",
                   "evidence.chain_head", "performer.name", "validator.name", "destination.type")


def _get(doc: dict[str, Any], path: str) -> Any:
    value: Any = doc
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def missing_fields(cert: dict[str, Any]) -> list[str]:
    required = REQUIRED_BUNDLE if cert.get("kind") == "bundle" else REQUIRED_MEDIUM
    return [p for p in required if _get(cert, p) in (None, "", [], {})]


def events_problem(events: list[dict[str, Any]]) -> str:
    prev = None
    for event in events:
        body = {k: v for k, v in event.items() if k not in ("prev_hash", "hash")}
        if "prev_hash" not in event or "hash" not in event:
            return f"evidence event {event.get('seq')} has no hash"
        if event_hash(event["prev_hash"], body, check=False) != event["hash"]:
            return f"evidence event {event.get('seq')} does not match its hash (broken chain)"
        if prev is not None and event["seq"] == prev["seq"] + 1 and event["prev_hash"] != prev["hash"]:
            return f"evidence event {event['seq']} does not link to event {prev['seq']} (broken chain)"
        prev = event
    return ""


def verify_document(doc: Any, keys: dict[str, str]) -> list[str]:
    """Problems with a signed certificate file (empty: valid). ``keys``: key id -> raw public key, base64."""
    if not isinstance(doc, dict) or not isinstance(doc.get("certificate"), dict) \
            or not isinstance(doc.get("signature"), dict):
        return ["not a signed certificate file (expects 'certificate' and 'signature')"]
    cert, sig = doc["certificate"], doc["signature"]
    key_id = sig.get("key_id", "")
    if sig.get("algorithm") != "Ed25519":
        return [f"unsupported signature algorithm {sig.get('algorithm')!r}"]
    if key_id not in keys:
        return [f"unknown signing key {key_id!r}"]
    if cert.get("key_id") != key_id:
        return ["the certificate names another key than its signature"]
    try:
        public = Ed25519PublicKey.from_public_bytes(base64.b64decode(keys[key_id]))
        public.verify(base64.b64decode(sig.get("value", "")), canonical(cert, check=False))
    except (InvalidSignature, ValueError, TypeError):
        return ["signature does not match the certificate (a byte was changed, or the key is wrong)"]
    problems = [f"required field missing or empty: {p}" for p in missing_fields(cert)]
    events = _get(cert, "evidence.events")
    if isinstance(events, list):
        problem = events_problem(events)
        if problem:
            problems.append(problem)
    return problems
