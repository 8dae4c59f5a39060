"""Inventory from the BMCs, run by a worker: read every server's media over Redfish (no wipe yet), then record
them all at once (``request_record_inventory``: all or nothing). A BMC that cannot be read leaves the request
``drained`` with the error in its evidence; the operator retries."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from decommission.collect import collect_media
from decommission.models import Asset, DecommissionRequest, Medium, RequestState
from decommission.services.evidence import event_append
from decommission.services.media import request_record_inventory
from fleet.audit import SystemActor
from fleet.redfish import BmcError, session_for

WORKER = SystemActor("decommission-worker")
THREADS = 16  # BMC reads are I/O; 16 in flight kept a 1,000-server inventory under a few seconds on the simulator


def inventory_collect(*, request_id: int) -> int:
    request = DecommissionRequest.objects.get(pk=request_id)
    if request.state != RequestState.DRAINED:
        return 0
    assets = list(Asset.objects.filter(request=request, server__isnull=False).select_related("server"))

    def read(asset: Asset) -> tuple[Asset, list | str]:
        try:
            return asset, collect_media(session_for(asset.server.bmc_address), label=asset.label)
        except BmcError as exc:
            return asset, str(exc)

    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(read, assets))
    errors = [(a, r) for a, r in results if isinstance(r, str)]
    if errors:
        with transaction.atomic():
            for asset, error in errors[:50]:
                event_append(request=request, asset=asset, step="inventory", result="unreachable", actor=WORKER,
                             detail={"error": error[:300]})
        return 0
    try:
        request_record_inventory(request=request, found={a.pk: r for a, r in results}, actor=WORKER)
    except IntegrityError:  # SQLite has no row locks: another worker's inventory committed first (all or nothing)
        if Medium.objects.filter(request=request).exists():
            return 0
        raise
    except ValidationError as exc:
        with transaction.atomic():
            event_append(request=request, step="inventory", result="refused", actor=WORKER,
                         detail={"error": "; ".join(exc.messages)[:500]})
        return 0
    return len(results)
