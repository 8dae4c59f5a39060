"""Append-only records: evidence events (hash-chained per asset and per request), certificates, signing keys' public halves,
custody hand-offs, downstream processors and host-agent tokens. PostgreSQL refuses UPDATE and DELETE on the
evidence and certificate tables (a trigger, migration 0002); a correction is a new event."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from decommission.models.requests import Asset, DecommissionRequest, Medium


class EvidenceEvent(models.Model):
    request = models.ForeignKey(DecommissionRequest, on_delete=models.PROTECT, related_name="events")
    seq = models.PositiveIntegerField()
    medium = models.ForeignKey(Medium, null=True, blank=True, on_delete=models.PROTECT, related_name="events")
    asset = models.ForeignKey(Asset, null=True, blank=True, on_delete=models.PROTECT, related_name="events")
    step = models.CharField(max_length=60)
    tool = models.CharField(max_length=120, blank=True)
    tool_version = models.CharField(max_length=60, blank=True)
    command = models.CharField(max_length=500, blank=True)
    output = models.TextField(blank=True, help_text="Raw output as received")
    output_sha256 = models.CharField(max_length=64, blank=True)
    result = models.CharField(max_length=40)
    detail = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField()
    actor_name = models.CharField(max_length=150)
    attempt = models.PositiveSmallIntegerField(default=0)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        ordering = ["request", "id"]
        constraints = [
            # ``seq`` counts within the event's chain: the request's own (no asset), or its asset's.
            models.UniqueConstraint(fields=["request", "seq"], name="decom_event_request_seq_unique",
                                    condition=Q(asset__isnull=True)),
            models.UniqueConstraint(fields=["asset", "seq"], name="decom_event_asset_seq_unique",
                                    condition=Q(asset__isnull=False)),
        ]

    def __str__(self) -> str:
        chain = f"/{self.asset_id}" if self.asset_id else ""
        return f"DR-{self.request_id}{chain}#{self.seq} {self.step} {self.result}"


class SigningKey(models.Model):
    """The public half of a certificate signing key. Private halves live in files (settings), never here; a
    retired key no longer signs but still verifies the certificates it signed."""

    key_id = models.CharField(max_length=40, unique=True)
    public_key = models.CharField(max_length=100, help_text="Raw Ed25519 public key, base64")
    created_at = models.DateTimeField(auto_now_add=True)
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.key_id


class CertificateKind(models.TextChoices):
    MEDIUM = "medium", "Medium"
    BUNDLE = "bundle", "Server bundle"


class Certificate(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=8, choices=CertificateKind.choices)
    request = models.ForeignKey(DecommissionRequest, on_delete=models.PROTECT, related_name="certificates")
    asset = models.ForeignKey(Asset, on_delete=models.PROTECT, related_name="certificates")
    medium = models.OneToOneField(Medium, null=True, blank=True, on_delete=models.PROTECT, related_name="certificate")
    document = models.JSONField(help_text="The signed file: {certificate, signature}")
    sha256 = models.CharField(max_length=64, help_text="SHA-256 of the canonical certificate body")
    key_id = models.CharField(max_length=40)
    issued_at = models.DateTimeField()

    class Meta:
        ordering = ["request", "asset", "kind", "issued_at", "id"]

    def __str__(self) -> str:
        return f"certificate {self.id}"


class Processor(models.Model):
    """A downstream processor (recycler, refurbisher, destruction vendor) and its certification."""

    name = models.CharField(max_length=120, unique=True)
    certification = models.CharField(max_length=60, help_text="R2v3, e-Stewards, NAID AAA ...")
    certificate_id = models.CharField(max_length=80)
    expires_on = models.DateField()

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name


class CustodyKind(models.TextChoices):
    HANDOFF = "handoff", "Hand-off"
    RECEIPT = "receipt", "Downstream receipt"


class CustodyTransfer(models.Model):
    request = models.ForeignKey(DecommissionRequest, on_delete=models.PROTECT, related_name="custody")
    kind = models.CharField(max_length=8, choices=CustodyKind.choices, default=CustodyKind.HANDOFF)
    from_party = models.CharField(max_length=120)
    to_party = models.CharField(max_length=120)
    from_signed_by = models.CharField(max_length=120)
    to_signed_by = models.CharField(max_length=120)
    seal_ids = models.JSONField(default=list)
    count = models.PositiveIntegerField()
    weight_kg = models.DecimalField(max_digits=9, decimal_places=2)
    carrier = models.CharField(max_length=120, blank=True)
    reference = models.CharField(max_length=120, blank=True, help_text="Bill of lading, receipt or CoD number")
    processor = models.ForeignKey(Processor, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    at = models.DateTimeField()
    event = models.OneToOneField(EvidenceEvent, on_delete=models.PROTECT, related_name="custody")

    class Meta:
        ordering = ["request", "at", "id"]

    def __str__(self) -> str:
        return f"{self.from_party} -> {self.to_party}"


class AgentToken(models.Model):
    """A one-time token for the host agent: bound to a request's asset (a server), expiring, used once."""

    asset = models.ForeignKey(Asset, on_delete=models.PROTECT, related_name="agent_tokens")
    token_sha256 = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField()
    fetched_at = models.DateTimeField(null=True, blank=True)
    used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"agent token for {self.asset}"
