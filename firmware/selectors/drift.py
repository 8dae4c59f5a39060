"""The drift report: non-compliant servers and GPUs (from ComplianceStatus), and mixed firmware inside an
NVLink domain or a scheduler pool (from FirmwareTuple). Every read is a grouped query; nothing per device."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count, Q, QuerySet

from firmware.models import ComplianceState, ComplianceStatus, FirmwareTuple

NON_COMPLIANT = (ComplianceState.DRIFT, ComplianceState.UNKNOWN)
FINDINGS_SHOWN = 50


def drift_counts() -> list[dict]:
    """Non-compliant rows by site, platform, component and status: servers affected and GPUs affected."""
    return list(
        ComplianceStatus.objects.filter(status__in=NON_COMPLIANT)
        .values("server__site_id", "server__site__code", "server__platform_id", "server__platform__name",
                "component", "status")
        .annotate(servers=Count("server_id", distinct=True), gpus=Count("gpu_id"))
        .order_by("server__site__code", "server__platform__name", "component", "status"))


def drift_devices(*, site: str | None = None, platform: int | None = None, component: str | None = None,
                  status: str | None = None) -> QuerySet[ComplianceStatus]:
    """The non-compliant rows behind a count, for the drill-down (keyset on id)."""
    qs = ComplianceStatus.objects.filter(status__in=NON_COMPLIANT).select_related(
        "server__site", "server__platform", "gpu", "baseline__bundle")
    if site:
        qs = qs.filter(server__site__code=site)
    if platform:
        qs = qs.filter(server__platform_id=platform)
    if component:
        qs = qs.filter(component=component)
    if status in NON_COMPLIANT:
        qs = qs.filter(status=status)
    return qs.order_by("id")


def compliance_list() -> QuerySet[ComplianceStatus]:
    return ComplianceStatus.objects.select_related("server__site", "server__platform", "gpu",
                                                   "baseline__bundle").order_by("id")


@dataclass
class TupleCount:
    tuple_hash: str
    versions: dict[str, str]
    servers: int


@dataclass
class MixedFinding:
    kind: str  # "nvlink_domain" or "pool"
    id: int
    name: str
    servers: int
    mixed_servers: int  # servers whose own GPUs disagree
    tuples: list[TupleCount] = field(default_factory=list)
    differing: list[str] = field(default_factory=list)  # components whose versions differ


def parse_tuple(text: str) -> dict[str, str]:
    """``"bmc=1.0;gpu_vbios=a|b"`` -> ``{"bmc": "1.0", "gpu_vbios": "a|b"}``."""
    return dict(part.split("=", 1) for part in text.split(";") if "=" in part)


def _findings(kind: str, key: str, name: str, limit: int) -> list[MixedFinding]:
    groups = list(
        FirmwareTuple.objects.filter(**{f"{key}__isnull": False})
        .values(key, name)
        .annotate(n_tuples=Count("tuple_hash", distinct=True), servers=Count("server_id"),
                  mixed_servers=Count("server_id", filter=Q(mixed=True)))
        .filter(Q(n_tuples__gt=1) | Q(mixed_servers__gt=0))
        .order_by("-n_tuples", "-servers", key)[:limit])
    findings = {row[key]: MixedFinding(kind=kind, id=row[key], name=row[name], servers=row["servers"],
                                       mixed_servers=row["mixed_servers"]) for row in groups}
    rows = (FirmwareTuple.objects.filter(**{f"{key}__in": list(findings)})
            .values(key, "tuple_hash", "tuple_text").annotate(n=Count("server_id"))
            .order_by(key, "-n", "tuple_hash"))
    for row in rows:
        findings[row[key]].tuples.append(TupleCount(row["tuple_hash"], parse_tuple(row["tuple_text"]), row["n"]))
    for finding in findings.values():
        components = sorted({c for t in finding.tuples for c in t.versions})
        finding.differing = [c for c in components
                             if len({t.versions.get(c, "") for t in finding.tuples}) > 1
                             or any("|" in t.versions.get(c, "") for t in finding.tuples)]
    return list(findings.values())


def mixed_nvlink_domains(limit: int = FINDINGS_SHOWN) -> list[MixedFinding]:
    """NVLink domains whose servers do not share one firmware tuple, or hold a server whose GPUs disagree."""
    return _findings("nvlink_domain", "server__nvlink_domain_id", "server__nvlink_domain__name", limit)


def mixed_pools(limit: int = FINDINGS_SHOWN) -> list[MixedFinding]:
    """Scheduler pools whose servers do not share one firmware tuple."""
    return _findings("pool", "server__pools__id", "server__pools__name", limit)
