"""Certified: one signed certificate per medium (every field of NIST SP 800-88 r1 App. G, r1 §4.8 and r2 §4.6)
and a server-level bundle listing them; then the GPUs become ``sanitized`` in inventory."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from decommission import lifecycle
from decommission.guards import workflow_moves
from decommission.models import (
    Asset,
    AssetState,
    Certificate,
    CertificateKind,
    DecommissionRequest,
    EvidenceEvent,
    Level,
    MediaState,
    MediaType,
    Medium,
)
from decommission.policy import METHODS, required_level, step_reaches
from decommission.services.certificates import iso, sign_hashed, signing_key_current
from decommission.services.evidence import ChainCheck, chain_verify, event_body
from decommission.services.workflow import (
    DONE_MEDIA,
    gpus_to,
    locked,
    media_outstanding,
    request_gpus,
    request_move,
)
from fleet.audit import Actor
from fleet.bulk import insert_values
from inventory.models import GpuState

ATTESTATION = ("I attest that the information provided on this statement is accurate to the best of my "
               "knowledge.")
VERIFICATION = {
    "nvme": "Full: device completion status (sanitize log SSTAT success, PRGD where reported)",
    "tpm": "Full: tpm2_clear exit status and owner hierarchy reset",
    "gpu_hbm": "Full: no compute contexts, GPU reset status, power-off time recorded",
    "gpu_inforom": "Record only: identities and versions read before and after",
}
MEDIA_LABELS = dict(MediaType.choices)
DESTINATION_DETAILS = {
    "internal_reuse": "Internal Reuse", "resale": "External Reuse", "vendor_return": "Manufacturer",
    "recycling": "Recycling Facility",
}


def _person(user: Any, role: str, at: Any, request: DecommissionRequest) -> dict[str, str]:
    name = (user.get_full_name() or user.get_username()) if user else "Fleet worker"
    return {
        "name": name, "title": role, "organization": settings.DECOMMISSION_ORGANIZATION,
        "location": request.location or settings.DECOMMISSION_LOCATION, "phone": settings.DECOMMISSION_CONTACT,
        "date": iso(at), "signature": f"authenticated Fleet user '{user.get_username() if user else 'worker'}' "
                                      f"(audit trail of {request})",
    }


def _method_type(medium: Medium) -> str:
    return {Level.CLEAR: "Clear", Level.PURGE: "Purge", Level.DESTROY: "Destruct"}[medium.level or Level.CLEAR]


def evidence_block(asset: Asset, check: ChainCheck) -> dict[str, Any]:
    """Where a certificate's evidence lives: its asset's chain head (per-asset layout) and the request chain's
    head, which anchors it; a request of the older layout has one chain, its head."""
    if asset.pk not in check.heads:
        return {"chain_head": check.head}
    return {"chain": f"asset {asset.pk} ({asset.label})", "chain_head": check.heads[asset.pk][1],
            "chain_seq": check.heads[asset.pk][0], "request_chain_head": check.head}


def medium_body(*, medium: Medium, request: DecommissionRequest, events: list[dict[str, Any]],
                evidence: dict[str, Any], performer: dict[str, str], validator: dict[str, str],
                issued_at: Any) -> dict[str, Any]:
    asset = medium.asset
    _reach, technique, _where = METHODS[medium.media_type]
    return {
        "certificate_id": str(uuid.uuid4()), "kind": "medium", "issued_at": iso(issued_at),
        "standard": "NIST SP 800-88 Rev. 1 Appendix G; Rev. 2 §4.6", "request": str(request),
        "performer": performer, "validator": validator,
        "media": {
            "manufacturer": medium.manufacturer or "unknown", "model": medium.model or "unknown",
            "serial": medium.serial, "property_number": f"{asset.label}/{medium.media_type}/{medium.serial}",
            "media_type": MEDIA_LABELS[medium.media_type], "source": asset.label,
            "pre_sanitization_confidentiality": request.category, "data_backed_up": "No", "backup_location": "",
        },
        "sanitization": {
            "method_type": _method_type(medium), "method_used": medium.technique or technique,
            "method_details": medium.detail or technique, "tool": medium.tool or "Fleet",
            "tool_version": next((e["tool_version"] for e in reversed(events) if e["tool_version"]), "n/a"),
            "verification_method": VERIFICATION.get(medium.media_type, "Full: BMC task completion status"),
            "post_sanitization_confidentiality": "none (sanitized)", "minimum_level": request.min_level,
            "required_level": required_level(medium.media_type, request.level), "request_level": request.level,
            "downgrade_exception": request.downgrade_reason, "completed_at": iso(medium.done_at),
            "notes": "GPU InfoROM/VBIOS hold no workload data: recorded, not altered." if
                     medium.media_type == "gpu_inforom" else "",
        },
        "destination": {"type": DESTINATION_DETAILS[request.destination], "details": request.destination},
        "evidence": {**evidence, "events": events},
        "attestation": ATTESTATION,
    }


def _check_levels(request: DecommissionRequest, media: list[Medium]) -> None:
    short = []
    for medium in media:
        need = required_level(medium.media_type, request.level)
        if medium.state == MediaState.DESTROYED or medium.state == MediaState.RECORDED:
            continue
        if need == Level.DESTROY or not step_reaches(medium.media_type, need):
            short.append(f"{medium} needs {need}")
    if short:
        raise ValidationError("Below the required level (record destruction first): " + "; ".join(short[:5]))


@transaction.atomic
def request_certify(*, request: DecommissionRequest, actor: Actor | None) -> DecommissionRequest:
    """Issue every certificate, then move the request to ``certified`` and its GPUs to ``sanitized``."""
    request = locked(request)
    lifecycle.check("certify", request.state)  # checked first: nothing is signed for a request that may not move
    if media_outstanding(request):
        raise ValidationError("Every medium must be done before certificates are issued.")
    check = chain_verify(request=request)
    if not check.ok:
        raise ValidationError(f"The evidence chain is broken: {check.reason}.")
    media = list(Medium.objects.filter(request=request, state__in=DONE_MEDIA).select_related("asset")
                 .order_by("asset_id", "id"))
    _check_levels(request, media)
    key, private = signing_key_current(actor=actor)
    now = timezone.now()
    performer = _person(request.operator, "Sanitization operator", request.state_changed_at, request)
    validator = _person(request.validated_by, "Validator (approver)", request.state_changed_at, request)
    events: dict[int, list[dict[str, Any]]] = {}
    for event in EvidenceEvent.objects.filter(request=request, medium__isnull=False).defer("output").order_by(
            "asset_id", "seq"):  # the raw output is in the hash through output_sha256; validation checked it
        events.setdefault(event.medium_id, []).append({**event_body(event), "prev_hash": event.prev_hash,
                                                       "hash": event.hash})
    # Signed without the no-float walk (a third of certification's time): every value below is a string or an
    # integer read from a CharField/IntegerField or built here, and each carried event passed the walk when it
    # was chained (event_hash).
    rows: list[tuple[Any, ...]] = []
    by_asset: dict[Asset, list[tuple[str, str, Medium]]] = {}
    blocks = {}
    for medium in media:
        asset = medium.asset
        if asset.pk not in blocks:
            blocks[asset.pk] = evidence_block(asset, check)
        doc, sha = sign_hashed(medium_body(medium=medium, request=request, events=events.get(medium.pk, []),
                                           evidence=blocks[asset.pk], performer=performer, validator=validator,
                                           issued_at=now),
                               key=key, private=private, check=False)
        cert_id = doc["certificate"]["certificate_id"]
        rows.append((cert_id, CertificateKind.MEDIUM, request.pk, asset.pk, medium.pk, doc, sha, key.key_id, now))
        by_asset.setdefault(asset, []).append((cert_id, sha, medium))
    for asset, certs in by_asset.items():
        bundle = {"certificate_id": str(uuid.uuid4()), "kind": "bundle", "issued_at": iso(now),
                  "request": str(request), "asset": asset.label, "performer": performer, "validator": validator,
                  "destination": {"type": DESTINATION_DETAILS[request.destination]},
                  "media_certificates": [{"certificate_id": cert_id, "sha256": sha, "serial": medium.serial,
                                          "media_type": medium.media_type} for cert_id, sha, medium in certs],
                  "evidence": blocks[asset.pk]}
        doc, sha = sign_hashed(bundle, key=key, private=private, check=False)
        rows.append((doc["certificate"]["certificate_id"], CertificateKind.BUNDLE, request.pk, asset.pk, None, doc,
                     sha, key.key_id, now))
    insert_values(Certificate, ["id", "kind", "request_id", "asset_id", "medium_id", "document", "sha256", "key_id",
                                "issued_at"], rows)
    Asset.objects.filter(request=request).update(state=AssetState.CERTIFIED)
    signed = frozenset(m.gpu_id for m in media if m.gpu_id) - {m.gpu_id for m in Medium.objects.filter(
        request=request, gpu__isnull=False).exclude(pk__in=[m.pk for m in media])}
    with workflow_moves(just_signed=signed):
        gpus_to(request_gpus(request), GpuState.SANITIZED, actor, f"{request}: certified")
    return request_move(request=request, action_name="certify", actor=actor,
                        detail={"certificates": len(rows), "key_id": key.key_id})
