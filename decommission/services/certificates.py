"""Certificates: one per medium plus a server-level bundle, canonical JSON signed with Ed25519.

Private keys are files in ``DECOMMISSION_SIGNING_KEY_DIR`` (``<key_id>.ed25519``, raw 32 bytes, mode 0600), never
rows; their public halves are :class:`SigningKey` rows, kept after rotation so old certificates still verify.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import secrets
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from decommission.canonical import canonical, sha256_hex
from decommission.models import SigningKey
from decommission.selectors import public_keys
from decommission.verify import verify_document
from fleet.audit import Actor, audit_write
from fleet.models import AuditAction

_loaded: dict[str, Ed25519PrivateKey] = {}


def _key_dir() -> Path:
    return Path(settings.DECOMMISSION_SIGNING_KEY_DIR)


def _raw_public(private: Ed25519PrivateKey) -> str:
    raw = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


@transaction.atomic
def signing_key_rotate(*, actor: Actor | None) -> SigningKey:
    """A new signing key; the current one is retired (it still verifies what it signed)."""
    private = Ed25519PrivateKey.generate()
    key_id = f"fleet-decom-{timezone.now():%Y%m%d}-{secrets.token_hex(4)}"
    directory = _key_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{key_id}.ed25519"
    raw = private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(raw)
    SigningKey.objects.filter(retired_at__isnull=True).update(retired_at=timezone.now())
    key = SigningKey.objects.create(key_id=key_id, public_key=_raw_public(private))
    audit_write(actor=actor, action=AuditAction.CREATE, obj=key, message="certificate signing key created")
    _loaded[key_id] = private
    return key


def _private(key_id: str) -> Ed25519PrivateKey | None:
    if key_id not in _loaded:
        path = _key_dir() / f"{key_id}.ed25519"
        if not path.exists():
            return None
        _loaded[key_id] = Ed25519PrivateKey.from_private_bytes(path.read_bytes())
    return _loaded[key_id]


def signing_key_current(*, actor: Actor | None = None) -> tuple[SigningKey, Ed25519PrivateKey]:
    """The active key and its private half; a first key is made when there is none (or its file is gone)."""
    key = SigningKey.objects.filter(retired_at__isnull=True).first()
    private = _private(key.key_id) if key else None
    if key is None or private is None:
        key = signing_key_rotate(actor=actor)
        private = _private(key.key_id)
    assert private is not None
    return key, private


def public_keys_document() -> dict[str, Any]:
    return {"algorithm": "Ed25519", "keys": [
        {"key_id": k.key_id, "public_key": k.public_key, "created_at": k.created_at.isoformat(),
         "retired_at": k.retired_at.isoformat() if k.retired_at else None}
        for k in SigningKey.objects.order_by("created_at", "id")]}


def sign(body: dict[str, Any], *, key: SigningKey, private: Ed25519PrivateKey) -> dict[str, Any]:
    """The signed file for ``body`` (``body['key_id']`` is set to the key's id before signing)."""
    return sign_hashed(body, key=key, private=private)[0]


def sign_hashed(body: dict[str, Any], *, key: SigningKey, private: Ed25519PrivateKey,
                check: bool = True) -> tuple[dict[str, Any], str]:
    """:func:`sign` and the body's SHA-256 (:func:`body_sha256`) from one canonical encoding; ``check=False``
    skips the no-float walk for a body whose values are known to be strings and integers."""
    body = {**body, "key_id": key.key_id}
    data = canonical(body, check=check)
    signature = private.sign(data)
    return {"certificate": body, "signature": {"algorithm": "Ed25519", "key_id": key.key_id,
                                               "value": base64.b64encode(signature).decode()}}, sha256_hex(data)


def body_sha256(document: dict[str, Any]) -> str:
    return sha256_hex(canonical(document["certificate"]))


def certificate_check(document: dict[str, Any], keys: dict[str, str] | None = None) -> list[str]:
    """Problems with a signed file against Fleet's keys (or ``keys``); empty when valid."""
    return verify_document(document, public_keys() if keys is None else keys)


def certificate_require_valid(document: dict[str, Any]) -> None:
    problems = certificate_check(document)
    if problems:
        raise ValidationError(f"certificate {document.get('certificate', {}).get('certificate_id')}: "
                              + "; ".join(problems))


def iso(value: dt.datetime | None) -> str:
    return value.astimezone(dt.UTC).isoformat() if value else ""


def certificate_verify(*, document: dict[str, Any], stored_sha256: str, chain_ok: bool) -> list[str]:
    """The verify button: the file's own checks, plus that it is the stored one and its request's chain holds."""
    problems = certificate_check(document)
    if body_sha256(document) != stored_sha256:
        problems.append("the certificate differs from the one issued (hash mismatch)")
    if not chain_ok:
        problems.append("the request's evidence chain is broken")
    return problems
