"""Decommission: requests, media, evidence, certificates, custody (docs/decommission.md)."""

from decommission.models.evidence import (
    AgentToken,
    Certificate,
    CertificateKind,
    CustodyKind,
    CustodyTransfer,
    EvidenceEvent,
    Processor,
    SigningKey,
)
from decommission.models.requests import (
    DESTINATION_FACTS,
    LEVEL_RANK,
    Asset,
    AssetState,
    Category,
    ChainLayout,
    DecommissionRequest,
    Destination,
    Level,
    MediaState,
    MediaType,
    Medium,
    Outcome,
    PolicyRule,
    RequestState,
)

__all__ = ["DESTINATION_FACTS", "LEVEL_RANK", "AgentToken", "Asset", "AssetState", "Category", "Certificate",
           "CertificateKind", "ChainLayout", "CustodyKind", "CustodyTransfer", "DecommissionRequest", "Destination", "EvidenceEvent",
           "Level", "MediaState", "MediaType", "Medium", "Outcome", "PolicyRule", "Processor", "RequestState",
           "SigningKey"]
