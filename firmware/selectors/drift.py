"""The drift report: non-compliant servers and GPUs (from ComplianceStatus, whose per-GPU rows are groups with a
GPU count), and mixed firmware inside an NVLink domain or a scheduler pool (from FirmwareTuple). Every read is a
grouped query; nothing per device."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count, Exists, F, Model, OuterRef, Q, QuerySet, Subquery, Sum

from firmware.models import ComplianceState, ComplianceStatus, FirmwareTuple
from firmware.services.compliance import GPU_COLUMNS
from inventory.models import Gpu

NON_COMPLIANT = (ComplianceState.DRIFT, ComplianceState.UNKNOWN)
FINDINGS_SHOWN = 50


def drift_counts() -> list[dict]:
    """Non-compliant rows by site, platform, component and status: servers affected and GPUs affected (the
    per-GPU components' rows carry how many GPUs report that version)."""
    return list(
        ComplianceStatus.objects.filter(status__in=NON_COMPLIANT)
        .values("server__site_id", "server__site__code", "server__platform_id", "server__platform__name",
                "component", "status")
        .annotate(servers=Count("server_id", distinct=True), gpus=Sum("gpu_count"))
        .order_by("server__site__code", "server__platform__name", "component", "status"))


def _statuses(status: str | None) -> tuple[str, ...]:
    return (status,) if status in NON_COMPLIANT else NON_COMPLIANT


def _scoped[M: Model](qs: QuerySet[M], *, site: str | None, platform: int | None,
                      server: int | None) -> QuerySet[M]:
    """The drill-down's filters on the server (a ComplianceStatus row's or a GPU's)."""
    if site:
        qs = qs.filter(server__site__code=site)
    if platform:
        qs = qs.filter(server__platform_id=platform)
    if server:
        qs = qs.filter(server_id=server)
    return qs


def drift_devices(*, site: str | None = None, platform: int | None = None, component: str | None = None,
                  status: str | None = None, server: int | None = None) -> QuerySet[ComplianceStatus]:
    """The non-compliant rows behind a count, for the drill-down (keyset on id): a server component's row, or
    a per-GPU component's (server, version) group with its GPU count (:func:`drift_gpus` lists the GPUs)."""
    qs = ComplianceStatus.objects.filter(status__in=_statuses(status)).select_related(
        "server__site", "server__platform", "baseline__bundle")
    if component:
        qs = qs.filter(component=component)
    return _scoped(qs, site=site, platform=platform, server=server).order_by("id")


def drift_gpus(*, component: str, site: str | None = None, platform: int | None = None,
               status: str | None = None, server: int | None = None) -> QuerySet[Gpu]:
    """The GPUs of the non-compliant groups of a per-GPU component (keyset on the GPU id): a GPU is in a group
    when it sits in the group's server and its version column reads the group's ``actual``. Each GPU carries
    the group's ``expected``, ``actual`` and ``status``."""
    column = GPU_COLUMNS[component]
    groups = ComplianceStatus.objects.filter(server_id=OuterRef("server_id"), component=component,
                                             actual=OuterRef(column), status__in=_statuses(status))
    qs = (Gpu.objects.filter(Exists(groups))
          .annotate(expected=Subquery(groups.values("expected")[:1]), actual=F(column),
                    compliance=Subquery(groups.values("status")[:1]))
          .select_related("server__site", "server__platform"))
    return _scoped(qs, site=site, platform=platform, server=server).order_by("id")


def compliance_list() -> QuerySet[ComplianceStatus]:
    return ComplianceStatus.objects.select_related("server__site", "server__platform",
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


def mixed_nvlink_domains(*, limit: int = FINDINGS_SHOWN) -> list[MixedFinding]:
    """NVLink domains whose servers do not share one firmware tuple, or hold a server whose GPUs disagree."""
    return _findings("nvlink_domain", "server__nvlink_domain_id", "server__nvlink_domain__name", limit)


def mixed_pools(*, limit: int = FINDINGS_SHOWN) -> list[MixedFinding]:
    """Scheduler pools whose servers do not share one firmware tuple."""
    return _findings("pool", "server__pools__id", "server__pools__name", limit)


def rollout_exceptions(limit: int = FINDINGS_SHOWN) -> list[dict]:
    """Servers that rollouts completed with exceptions left behind (infra-failed or inconclusive targets): they
    may still be at the old firmware, or the engine could not tell."""
    from firmware.lifecycle import RETRYABLE_ERROR_CLASSES
    from firmware.models import RolloutState, RolloutTarget, TargetState

    return list(RolloutTarget.objects.filter(rollout__state=RolloutState.COMPLETED_WITH_EXCEPTIONS,
                                             state=TargetState.FAILED, error_class__in=RETRYABLE_ERROR_CLASSES)
                .values("rollout_id", "rollout__name", "server_id", "server__hostname", "error_class", "last_error")
                .order_by("rollout_id", "server__hostname", "id")[:limit])
