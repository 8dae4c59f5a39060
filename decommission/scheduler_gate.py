"""Decommission waits for an idle, drained node before any wipe step (docs/scheduler.md).

``asset_wait(ctx)`` is the executor's first call for a server (``asset_run``): without a scheduler it returns
False at once. With one it records a hold for the asset (inventory.scheduler.holds: committed before the drain is
sent), sends the drain fenced by the asset's lease, and returns True (wait, ``ctx.wait_seconds`` set) while a job
still runs on the node or the node is not yet drained or down. A decommissioned server never returns: its hold is
never released (the node stays drained; removing it from slurm.conf is the operator's step).
``asset_waits(request)`` is what the request page shows per server. It decides nothing on time: the hold's times
are the database's (inventory.scheduler.holds) and the executor turns ``wait_seconds`` into ``next_run_at`` on the
database's clock (decommission.clock)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils import timezone

from decommission.models import Asset, DecommissionRequest
from fleet.execution import fenced
from inventory import scheduler
from inventory.models import HoldState, SchedulerHold, SchedulerNode
from inventory.scheduler import SchedulerError, holds


def asset_hold_key(asset: Asset) -> str:
    return f"decommission-asset:{asset.pk}"


def asset_wait(ctx: Any) -> bool:
    """True while the asset's node is not drained and idle (``ctx.wait_seconds`` set); False: go on."""
    asset = ctx.asset
    if scheduler.configured() is None or asset.server_id is None:
        return False
    try:
        hold = holds.hold_request(key=asset_hold_key(asset), server=asset.server,
                                  reason=f"decommission {asset.request} ({asset.label})")
        if hold.state == HoldState.REQUESTED:
            hold = holds.hold_drain(hold, check=lambda: fenced(ctx.lease))
        if hold.state == HoldState.REQUESTED:  # not sent yet (hold_drain raises then; never wipe on it)
            ctx.wait_seconds = settings.FLEET_SCHEDULER_POLL_SECONDS
            return True
        if hold.state not in (HoldState.HELD, HoldState.FOREIGN):
            return False  # the scheduler does not know the node
        live = holds.node_live(hold.node)
    except SchedulerError:
        ctx.wait_seconds = settings.FLEET_SCHEDULER_POLL_SECONDS
        return True
    if live is None or (not live.jobs and (live.drain or live.down)):
        return False
    holds.node_record(live, asset.server)
    ctx.wait_seconds = settings.FLEET_SCHEDULER_POLL_SECONDS
    return True


@dataclass
class AssetWait:
    asset: Asset
    node: str
    state: str
    text: str


def asset_waits(request: DecommissionRequest) -> list[AssetWait]:
    """Per server asset with a hold: its node and what the wipe waits for (the node's last recorded state)."""
    assets = {a.pk: a for a in request.assets.filter(server__isnull=False).order_by("id")}
    found = {h.owner_id: h for h in SchedulerHold.objects.filter(owner="decommission-asset",
                                                                 owner_id__in=list(assets)).order_by("id")}
    nodes = {n.name: n for n in SchedulerNode.objects.filter(name__in=[h.node for h in found.values()])}
    waits = []
    for pk, hold in sorted(found.items()):
        node = nodes.get(hold.node)
        if node is not None and node.job_count:
            ids = ", ".join(str(j) for j in node.job_ids[:10])
            text = (f"waiting: {node.job_count} job{'s' if node.job_count != 1 else ''} left on {hold.node} "
                    f"(ids {ids}), draining since {timezone.localtime(hold.drained_at or hold.requested_at):%H:%M}; "
                    "no wipe step "
                    "before the node is idle")
        elif hold.state == HoldState.REQUESTED:
            text = f"drain of {hold.node} requested"
        else:
            text = f"{hold.node} drained and idle" + (f" ({hold.note})" if hold.note else "")
        waits.append(AssetWait(asset=assets[pk], node=hold.node, state=node.state if node else "", text=text))
    return waits
