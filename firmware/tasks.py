"""Celery tasks of the firmware app: thin adapters over the services (the engine: docs/firmware.md)."""

from typing import Any

from celery import shared_task
from django.db import OperationalError

from fleet.audit import audit_source
from fleet.models import AuditSource


@shared_task(acks_late=True, ignore_result=True)
def rollout_tick_task() -> dict:
    """Beat, every FLEET_ROLLOUT_TICK_SECONDS: gates, admission, dispatch of due targets. Overlapping ticks
    skip (an advisory lock); a lost tick is replaced by the next."""
    from firmware.services.engine import rollout_tick

    with audit_source(AuditSource.WORKER):
        result = rollout_tick()
    return {"ran": result.ran, "admitted": result.admitted, "dispatched": result.dispatched}


@shared_task(acks_late=True, ignore_result=True, autoretry_for=(OperationalError,), retry_backoff=1, max_retries=5)
def rollout_steps_task(steps: list[list[int]]) -> int:
    """One step for each [target id, version] (FLEET_ROLLOUT_CHUNK per message; a stale or repeated pair does
    nothing). Returns how many targets moved."""
    from firmware.services.engine import target_steps

    with audit_source(AuditSource.WORKER):
        return target_steps(steps).done


@shared_task
def compliance_recompute_task() -> dict[str, Any]:
    """Rewrite the compliance tables (beat: every 10 minutes). Safe to run twice: each run rewrites the whole
    table under an advisory lock."""
    from firmware.services.compliance import compliance_recompute

    with audit_source(AuditSource.WORKER):
        return compliance_recompute()


# Servers per message of the inventory scan: each costs ~40 Redfish GETs (FirmwareInventory members), so 50 per
# message keeps a message well under the task time limit even with slow BMCs (5 s timeout each).
SCAN_CHUNK = 50


@shared_task(ignore_result=True)
def firmware_inventory_scan_task(server_ids: list[int] | None = None) -> dict[str, Any]:
    """Without ids (beat, every 6 hours): send one message per SCAN_CHUNK servers with a BMC address. With ids:
    read those servers' Redfish FirmwareInventory and record it. Running it twice records the same versions
    again (``last_seen`` moves)."""
    from firmware.services.observations import firmware_inventory_scan, inventory_scan_chunks
    from inventory.models import Server

    if server_ids is None:
        chunks = inventory_scan_chunks(SCAN_CHUNK)
        for chunk in chunks:
            firmware_inventory_scan_task.delay(chunk)
        return {"servers": sum(map(len, chunks)), "messages": len(chunks)}
    with audit_source(AuditSource.WORKER):
        result = firmware_inventory_scan(servers=list(Server.objects.filter(id__in=server_ids).order_by("id")),
                                         actor=None)
    return {"scanned": result.scanned, "recorded": result.recorded, "failed": len(result.failed)}
