"""Every read a decommission page or endpoint needs, ready to render."""

from __future__ import annotations

from django.db.models import Count, F, Q, QuerySet

from decommission.models import (
    Asset,
    Certificate,
    CustodyTransfer,
    DecommissionRequest,
    EvidenceEvent,
    MediaState,
    Medium,
    PolicyRule,
    SigningKey,
)

DONE = (MediaState.SANITIZED, MediaState.RECORDED, MediaState.DESTROYED)


def public_keys() -> dict[str, str]:
    """Every signing key id -> raw public key (base64), retired ones included."""
    return dict(SigningKey.objects.order_by("created_at", "id").values_list("key_id", "public_key"))


def request_list(*, state: str = "") -> QuerySet[DecommissionRequest]:
    qs = DecommissionRequest.objects.select_related("requested_by", "approved_by").annotate(
        asset_count=Count("assets", distinct=True))
    if state:
        qs = qs.filter(state=state)
    return qs.order_by("-id")


def request_get(*, pk: int) -> DecommissionRequest:
    return DecommissionRequest.objects.select_related(
        "requested_by", "approved_by", "operator", "validated_by", "downgrade_approved_by").get(pk=pk)


def asset_progress(*, request: DecommissionRequest) -> QuerySet[Asset]:
    """Each asset with its media counts: total, done, failed (the request page's progress per server)."""
    return Asset.objects.filter(request=request).select_related("server", "gpu").annotate(
        media_total=Count("media"), media_done=Count("media", filter=Q(media__state__in=DONE)),
        media_failed=Count("media", filter=Q(media__state__in=(MediaState.FAILED, MediaState.ESCALATED))),
    ).order_by(F("held_at").desc(nulls_last=True), "label", "id")  # held for a person: first


def media_for(*, request: DecommissionRequest) -> QuerySet[Medium]:
    return Medium.objects.filter(request=request).select_related("asset", "gpu", "certificate").order_by(
        "asset__label", "media_type", "serial", "id")


def events_for(*, request: DecommissionRequest) -> QuerySet[EvidenceEvent]:
    return EvidenceEvent.objects.filter(request=request).select_related("medium", "asset").defer("output").order_by(
        "id")


def certificates_for(*, request: DecommissionRequest | None = None) -> QuerySet[Certificate]:
    qs = Certificate.objects.select_related("request", "asset", "medium")
    if request is not None:
        qs = qs.filter(request=request)
    return qs.order_by("request_id", "asset__label", "kind", "issued_at", "id")


def custody_for(*, request: DecommissionRequest) -> QuerySet[CustodyTransfer]:
    return CustodyTransfer.objects.filter(request=request).select_related("processor", "event").order_by("at", "id")


def policy_table() -> QuerySet[PolicyRule]:
    return PolicyRule.objects.order_by("category", "destination", "id")


def events_for_all() -> QuerySet[EvidenceEvent]:
    return EvidenceEvent.objects.defer("output").order_by("request_id", "id")
