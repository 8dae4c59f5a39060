"""Keep procurement's history in step with the lifecycle, so nothing is typed twice:

- ``failures_from_lifecycle``: every move of a GPU to ``rma`` (the Health page's "Send to RMA", the GPU page, a
  bulk transition) that has no failure yet becomes one, with its cause and evidence from the GPU's health flags
  (read through telemetry's selectors) or "other" with the transition's reason.
- ``assets_backfill``: GPUs Fleet knew before procurement (imports, the seed) get an asset row with their site and
  the date they entered service, so their exposure counts in the failure rates.

Both run before the nightly forecast; both are idempotent.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.db.models import Min, Q

from fleet import bulk
from fleet.audit import Actor, audit_event, audit_write_many
from fleet.models import AuditAction
from inventory.models import Gpu, GpuState, GpuStateChange
from procurement.models import EvidenceKind, Failure, GpuAsset

FLAG_CAUSE = {"row_remap_failure": "hbm", "sram_threshold": "gpu", "rma_xid": "gpu", "thermal_outlier": "thermal",
              "error_rate": "gpu"}
XID_CAUSE = {48: "hbm", 63: "hbm", 64: "hbm", 94: "hbm", 95: "hbm", 74: "nvlink", 79: "off_bus", 119: "gpu",
             120: "gpu", 140: "hbm"}


def flag_evidence(gpu_id: int) -> dict[str, Any]:
    """Cause and evidence from the GPU's open health flags (empty when telemetry is not installed or no flag)."""
    try:
        from telemetry.health_selectors import gpu_open_flags
    except ImportError:
        return {}
    flags = gpu_open_flags(gpu_id=gpu_id)
    if not flags:
        return {}
    first = flags[0]["flag"]
    raw = first.evidence if isinstance(first.evidence, dict) else {}
    xid = raw.get("xid") if isinstance(raw.get("xid"), int) else None
    cause = XID_CAUSE.get(xid, FLAG_CAUSE.get(first.kind, "other")) if xid else FLAG_CAUSE.get(first.kind, "other")
    return {"cause": cause, "evidence_kind": EvidenceKind.HEALTH_FLAG, "xid": xid,
            "evidence": "; ".join(str(f["text"]) for f in flags)[:500]}


@transaction.atomic
def failures_from_lifecycle(*, actor: Actor, since: dt.date | None = None) -> int:
    """A failure for every transition to ``rma`` that has none (same GPU, same day). Returns how many."""
    changes = GpuStateChange.objects.filter(to_state=GpuState.RMA).exclude(from_state="")
    if since:
        changes = changes.filter(at__date__gte=since)
    recorded = set(Failure.objects.values_list("gpu_id", "failed_on"))
    linked = set(Failure.objects.exclude(state_change=None).values_list("state_change_id", flat=True))
    assets = {a.gpu_id: a for a in GpuAsset.objects.filter(gpu_id__in=changes.values("gpu_id"))}
    rows = []
    for change in changes.select_related("gpu").order_by("at", "id"):
        day = change.at.date()
        if (change.gpu_id, day) in recorded or change.pk in linked:
            continue
        recorded.add((change.gpu_id, day))
        asset = assets.get(change.gpu_id)
        found = flag_evidence(change.gpu_id) or {"cause": "other", "evidence_kind": EvidenceKind.NOTE,
                                                 "xid": None, "evidence": change.reason[:500]}
        failure = Failure(gpu_id=change.gpu_id, model_id=change.gpu.model_id,
                          site_id=change.gpu.site_id or (asset.site_id if asset else None),
                          batch=asset.batch if asset else "", failed_on=day, state_change=change, **found)
        rows.append(failure)
    Failure.objects.bulk_create(rows)
    events = [audit_event(actor=actor, action=AuditAction.CREATE, obj=f, message="failure from the lifecycle")
              for f in rows]
    audit_write_many(events)
    return len(rows)


@transaction.atomic
def assets_backfill(*, actor: Actor) -> int:
    """An asset for every GPU without one: its site, its model, in service since its first service-like state."""
    missing = Gpu.objects.filter(asset__isnull=True)
    first = dict(GpuStateChange.objects.filter(gpu__in=missing).filter(
        Q(to_state__in=[GpuState.IN_SERVICE, GpuState.BURN_IN, GpuState.SPARE, GpuState.DRAINED]))
        .values("gpu_id").annotate(at=Min("at")).values_list("gpu_id", "at"))
    gone = {GpuState.SANITIZED, GpuState.DISPOSED}
    assets = []
    for gpu in missing.only("id", "model_id", "site_id", "state", "state_changed_at", "warranty_end"):
        start = first.get(gpu.pk)
        assets.append(GpuAsset(gpu_id=gpu.pk, model_id=gpu.model_id, site_id=gpu.site_id,
                               in_service_on=start.date() if start else None, warranty_end=gpu.warranty_end,
                               removed_on=gpu.state_changed_at.date() if gpu.state in gone and gpu.state_changed_at
                               and start else None))
    bulk.insert(GpuAsset, assets)
    audit_write_many(audit_event(actor=actor, action=AuditAction.CREATE, obj=a, message="asset backfill")
                     for a in assets)
    # Boards received through an order enter service later: their exposure starts then.
    started = dict(GpuStateChange.objects.filter(gpu__asset__in_service_on__isnull=True, to_state__in=[
        GpuState.IN_SERVICE, GpuState.BURN_IN]).values("gpu_id").annotate(at=Min("at")).values_list("gpu_id", "at"))
    late = list(GpuAsset.objects.filter(gpu_id__in=list(started), in_service_on__isnull=True))
    for asset in late:
        asset.in_service_on = started[asset.gpu_id].date()
    GpuAsset.objects.bulk_update(late, ["in_service_on"], batch_size=2000)
    audit_write_many(audit_event(actor=actor, action=AuditAction.UPDATE, obj=a, message="entered service",
                                 changes={"in_service_on": [None, a.in_service_on.isoformat()]}) for a in late)
    return len(assets)


def history_sync(*, actor: Actor) -> dict[str, int]:
    return {"assets": assets_backfill(actor=actor), "failures": failures_from_lifecycle(actor=actor)}
