"""Beat: the scheduler's view of every node copied into ``SchedulerNode`` rows (one ``sinfo``/``squeue`` read
per refresh, whatever the cluster's size), matched to servers by ``node_name``; then ``holds_sweep``."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from fleet.clock import db_now
from inventory.models import SchedulerNode, Server
from inventory.scheduler import configured
from inventory.scheduler.holds import holds_sweep
from inventory.scheduler.reservations import fleet_reserved_nodes

BATCH = 1000


def scheduler_refresh() -> dict[str, int]:
    """Refresh every node's row; rows of nodes the scheduler no longer lists are deleted. Without a scheduler:
    nothing (and no rows)."""
    sched = configured()
    if sched is None:
        return {"nodes": 0}
    sched.invalidate()
    live = sched.node_state()
    servers: dict[str, int] = {}
    for pk, hostname, override in Server.objects.values_list("id", "hostname", "scheduler_node").order_by("id"):
        servers.setdefault((override or hostname.split(".")[0]).strip(), pk)
    now = db_now()
    prefix = settings.FLEET_SCHEDULER_REASON_PREFIX
    ours = fleet_reserved_nodes()  # in Fleet's own maintenance reservations: reserved, but not by someone else
    rows = [SchedulerNode(name=n.name, server_id=servers.get(n.name), state=n.display, reason=n.reason[:500],
                          reason_user=n.reason_user[:100], reason_at=n.reason_at,
                          drained_by=n.drained_by(prefix, fleet_reserved=n.name in ours),
                          partitions=("," + ",".join(n.partitions) + ",") if n.partitions else "",
                          job_ids=list(n.jobs[:50]), job_count=len(n.jobs), refreshed_at=now)
            for n in live.values()]
    with transaction.atomic():
        SchedulerNode.objects.exclude(name__in=list(live)).delete()
        # A server mapped onto another node (its override changed): free its old row first (one-to-one).
        stale = [name for name, server_id in SchedulerNode.objects.filter(server__isnull=False)
                 .values_list("name", "server_id") if servers.get(name) != server_id]
        if stale:
            SchedulerNode.objects.filter(name__in=stale).update(server=None)
        for start in range(0, len(rows), BATCH):
            SchedulerNode.objects.bulk_create(
                rows[start:start + BATCH], update_conflicts=True, unique_fields=["name"],
                update_fields=["server", "state", "reason", "reason_user", "reason_at", "drained_by", "partitions",
                               "job_ids", "job_count", "refreshed_at"])
    swept = holds_sweep()
    return {"nodes": len(rows), **swept}
