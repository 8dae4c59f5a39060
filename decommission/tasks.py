"""Thin Celery adapters of the decommission workflow: ids in, one service call, safe to run twice."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.db.models import Q
from django.db.models.functions import Now

from decommission.executor import run_due
from decommission.inventory_run import inventory_collect
from decommission.models import Asset, AssetState, DecommissionRequest, RequestState
from fleet.audit import audit_source
from fleet.dispatch import send
from fleet.models import AuditSource

# One tick sends at most this many run messages; each leases up to DECOMMISSION_CHUNK due assets
# (SKIP LOCKED), so duplicate messages are harmless: a worker that finds nothing due returns.
MAX_RUNS_PER_TICK = 64


@shared_task(name="decommission.tasks.tick_task", ignore_result=True)
def tick_task() -> int:
    """Beat (every 10 s) and every start/resume: send enough run messages for the assets due now (one waiting
    for its host agent or a poll is not: no empty runs, each of which costs the worker a database connection)."""
    now = Now()  # the database's clock, as the leases'
    due = Asset.objects.filter(state=AssetState.SANITIZING, request__state=RequestState.SANITIZING,
                               hold_reason="").filter(
        Q(next_run_at__isnull=True) | Q(next_run_at__lte=now)).filter(
        Q(lease_until__isnull=True) | Q(lease_until__lt=now)).count()
    runs = min(MAX_RUNS_PER_TICK, -(-due // settings.DECOMMISSION_CHUNK))
    waiting = DecommissionRequest.objects.filter(state=RequestState.DRAINED, events__step="inventory",
                                                 events__result="requested", media__isnull=True).distinct()
    for request_id in waiting.values_list("pk", flat=True)[:20]:  # a lost inventory message is sent again
        send("decommission.tasks.inventory_task", request_id)
    for _ in range(runs):
        send("decommission.tasks.run_task")
    return runs


@shared_task(name="decommission.tasks.run_task", ignore_result=True, acks_late=True)
def run_task() -> int:
    with audit_source(AuditSource.WORKER):
        return run_due()


@shared_task(name="decommission.tasks.inventory_task", ignore_result=True, acks_late=True)
def inventory_task(request_id: int) -> int:
    with audit_source(AuditSource.WORKER):
        return inventory_collect(request_id=request_id)
