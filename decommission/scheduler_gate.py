"""Decommission waits for an idle, drained node before any wipe step (docs/scheduler.md).

``assets_gate(leases)`` is the executor's first call for a chunk of leased assets (``run_due``): without a
scheduler it answers at once that every asset goes on. With one it records a hold per server asset
(inventory.scheduler.holds: committed before the drain is sent), sends the drains still to be sent (one read under
the nodes' locks, one DRAIN per node, each fenced by its asset's lease), then reads every held node's state in
ONE read, and answers per asset: ``waiting`` while a job still runs on its node or the node is not yet drained
or down (or the scheduler could not be asked), ``lost`` when its lease was taken over before its drain left (the
caller skips it: another worker owns it), neither: go on. The reading is the chunk's: a drained, idle node takes
no new job, so it still holds when the chunk reaches a later asset (a person resuming the node meanwhile is
the race every reading has). A decommissioned server never returns: its hold is never released (the node stays
drained; removing it from slurm.conf is the operator's step).
``asset_waits(request)`` is what the request page shows per server. It decides nothing on time: the hold's times
are the database's (inventory.scheduler.holds) and the executor turns the poll interval into ``next_run_at`` on
the database's clock (decommission.clock)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from django.utils import timezone

from decommission.models import Asset, DecommissionRequest
from fleet.execution import Lease, LostLease, fenced
from inventory import scheduler
from inventory.models import HoldState, SchedulerHold, SchedulerNode
from inventory.scheduler import SchedulerError, holds


@dataclass
class Gate:
    """A chunk's answer: the assets (ids) that wait for their node, those whose lease another worker took."""

    waiting: set[int] = field(default_factory=set)
    lost: set[int] = field(default_factory=set)


def asset_hold_key(asset: Asset) -> str:
    return f"decommission-asset:{asset.pk}"


def assets_gate(leases: Sequence[Lease]) -> Gate:
    """Which leased assets may not start a wipe step now (see the module docstring). At most two scheduler reads
    whatever the number of assets: one when a drain is still to be sent, one for the nodes' state."""
    gate = Gate()
    sched = scheduler.configured()
    if sched is None or not leases:
        return gate
    by_pk = {lease.pk: lease for lease in leases}
    assets = list(Asset.objects.filter(pk__in=list(by_pk), server__isnull=False).select_related("request", "server")
                  .order_by("id"))
    of_hold = {asset_hold_key(a): a.pk for a in assets}

    def owned(hold: SchedulerHold) -> bool:  # the fence, just before the node's DRAIN leaves
        try:
            fenced(by_pk[of_hold[hold.key]])
        except LostLease:
            gate.lost.add(of_hold[hold.key])
            return False
        return True

    found = holds.holds_request([(asset_hold_key(a), a.server, f"decommission {a.request} ({a.label})")
                                 for a in assets])
    try:
        found = holds.holds_drain(found, check=owned)
        held: dict[int, tuple[Asset, str]] = {}
        for asset, hold in zip(assets, found, strict=True):
            if hold.state == HoldState.REQUESTED:  # not sent yet: never wipe on it
                if asset.pk not in gate.lost:
                    gate.waiting.add(asset.pk)
            elif hold.state in (HoldState.HELD, HoldState.FOREIGN):
                held[asset.pk] = (asset, hold.node)
            # else the scheduler does not know the node: go on
        if not held:
            return gate
        sched.invalidate()
        live_nodes = sched.node_state(sorted({node for _, node in held.values()}))
    except SchedulerError:
        gate.waiting.update(a.pk for a in assets if a.pk not in gate.lost)
        return gate
    for pk, (asset, node) in held.items():
        live = live_nodes.get(node)
        if live is None or (not live.jobs and (live.drain or live.down)):
            continue
        holds.node_record(live, asset.server)
        gate.waiting.add(pk)
    return gate


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
