"""The step executor: Celery workers sanitize each server's media over Redfish on the shared crash-safe execution
model (``fleet.execution``: leases with fences, the fenced record before every send, settle-and-reconcile for an
ambiguous send, bounded retries; ``fleet.redfish``: the transport).

Per server, in this order (``PLAN``): archive and clear the HMC's and the BMC's logs, reset the BIOS, secure-erase
the drives the BMC exposes, reset the DPU to factory, wait for the host agent (NVMe the BMC cannot reach, TPM, GPU
reset), record the GPUs' InfoROM, power the system off (the volatile media's evidence), and reset the BMC to
defaults (ResetAll) last, since it cuts the management path.

A medium's step: ``pending`` -> (fenced: ``sending``, sent_at) -> POST -> ``running`` (a task) or done. A worker
that dies between the record and the answer leaves ``sending``: the next lease holder never resends on a guess;
after the settle period it reads the device (``Oem.FleetSim.LastAction`` / LastResetTime) and adopts what
landed (FOUND) or sends once more only when the device proves it did not (ABSENT)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from decommission.canonical import sha256_hex
from decommission.models import Asset, AssetState, EvidenceEvent, MediaState, MediaType, Medium, RequestState
from decommission.services.agent import agent_media, agent_media_done
from decommission.services.evidence import event_append, events_append_many
from decommission.services.steps import Outcome, media_finish_many, medium_stop, outcomes_write
from fleet import bulk
from fleet.audit import SystemActor
from fleet.execution import (
    Lease,
    LostLease,
    RetryPolicy,
    TimeBudget,
    Trace,
    Verdict,
    fenced,
    lease_due,
    lease_release,
    settle,
)
from fleet.redfish import BmcError, ErrorKind, RedfishSession, session_for

logger = logging.getLogger(__name__)
WORKER = SystemActor("decommission-worker")
RETRY = RetryPolicy(attempts=6, base_seconds=2.0, max_seconds=60.0)
# Waiting for the host agent is not polled: its upload sets the asset due again. This is only the safety net
# (an upload whose wake-up raced a worker's release is also caught: the worker looks again after releasing).
AGENT_WAIT_SECONDS = 30.0
DONE, WAIT, STOP = "done", "wait", "stop"
# (media type, Redfish action below the medium's target, request body, sent as a task?)
ACTIONS: dict[str, tuple[str, dict]] = {
    MediaType.HMC_FLASH: ("/LogServices/Log/Actions/LogService.ClearLog", {}),
    MediaType.UEFI_NVRAM: ("/Actions/Bios.ResetBios", {}),
    MediaType.NVME: ("/Actions/Drive.SecureErase", {"SanitizationType": "CryptographicErase"}),
    MediaType.DPU: ("/Actions/NetworkAdapter.ResetSettingsToDefault", {}),
    MediaType.BMC_FLASH: ("/Actions/Manager.ResetToDefaults", {"ResetType": "ResetAll"}),
}
EVIDENCE_URI = {MediaType.HMC_FLASH: "/LogServices/Log", MediaType.BMC_FLASH: ""}


@dataclass
class Ctx:
    lease: Lease
    asset: Asset
    session: RedfishSession
    budget: TimeBudget
    wait_seconds: float = 0.0
    outcomes: list[Outcome] = field(default_factory=list)
    running: list[Medium] = field(default_factory=list)  # tasks started: written with the next outcomes
    asset_fields: dict[str, object] = field(default_factory=dict)  # written with the next outcomes
    archived: set[int] = field(default_factory=set)  # media whose logs are archived
    waits_for_agent: bool = False

    def done(self, medium: Medium, state: str, **kwargs: object) -> None:
        """An outcome, written with the next fenced record or at the end of the run (one transaction)."""
        medium.state = state  # a failure stops this pass; the write decides pending (retry) or escalated
        self.outcomes.append(Outcome(medium=medium, state=state, **kwargs))  # type: ignore[arg-type]

    def flush(self) -> None:
        """Write the started tasks and the outcomes so far (inside the caller's transaction)."""
        running = [m for m in self.running if m.state == MediaState.RUNNING]  # not finished in this pass
        outcomes, self.outcomes, self.running = self.outcomes, [], []
        bulk.update(Medium, running, ["state", "task_uri"])
        outcomes_write(outcomes, actor=WORKER, request=self.asset.request)


def _archive_logs(ctx: Ctx, medium: Medium, manager: str) -> dict:
    """Read a manager's log entries before they are cleared; their SHA-256 goes into the chain (see _fenced)."""
    entries = ctx.session.get(f"{manager}/LogServices/Log/Entries")
    raw = str(entries.get("Members", []))
    return {"request": ctx.asset.request, "medium": medium, "step": "logs.archive", "tool": "redfish",
            "command": f"GET {manager}/LogServices/Log/Entries", "output": raw, "result": "archived",
            "detail": {"entries": len(entries.get("Members", [])), "sha256": sha256_hex(raw)}}


def _write(ctx: Ctx, archives: list[dict]) -> None:
    """The pass's outcomes, started tasks, log archives and asset fields so far (inside the caller's
    transaction, which holds the asset's row: the asset, then its chain, then the request when it finishes)."""
    ctx.flush()
    if archives:
        events_append_many(request=ctx.asset.request, actor=WORKER,
                           items=[{k: v for k, v in a.items() if k != "request"} for a in archives])
        ctx.archived.update(a["medium"].pk for a in archives)
    if ctx.asset_fields:
        fields, ctx.asset_fields = ctx.asset_fields, {}
        Asset.objects.filter(pk=ctx.asset.pk).update(**fields)


def _write_outcomes(ctx: Ctx) -> None:
    """The end of a pass: what is left to write, committed without waiting for the WAL flush (a crash loses
    these rows atomically; their media are still ``sending``/``running`` and are reconciled from the device)."""
    if not ctx.outcomes and not ctx.running and not ctx.asset_fields:
        return
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO off")
        # the asset, then the request
        Asset.objects.select_for_update(no_key=True).filter(pk=ctx.asset.pk).values_list("pk").get()
        _write(ctx, [])


def _fenced(ctx: Ctx, record: Callable[[], None] | None = None, archive: dict | list[dict] | None = None) -> None:
    """Prove the lease, write the outcomes so far and the log archives, and record "about to send": ONE flushed
    transaction (the asset's row is locked by the lease check; the request's row is not touched). A worker whose
    lease was taken writes nothing: the new holder reconciles those media from the device."""
    archives = archive if isinstance(archive, list) else [archive] if archive else []

    def write_and_record() -> None:
        _write(ctx, archives)
        if record is not None:
            record()

    fenced(ctx.lease, write_and_record, renew_seconds=settings.DECOMMISSION_LEASE_SECONDS)


def _reconcile(ctx: Ctx, medium: Medium) -> Callable[[], Trace]:
    def look() -> Trace:
        uri = medium.target_uri + EVIDENCE_URI.get(medium.media_type, "")
        body = ctx.session.get(uri or medium.target_uri)
        if medium.media_type == MediaType.BMC_FLASH:
            stamp = body.get("LastResetTime", "")
        else:
            last = ((body.get("Oem") or {}).get("FleetSim") or {}).get("LastAction") or {}
            stamp = last.get("Time", "")
            if last.get("Task"):
                medium.task_uri = last["Task"]
        if not stamp:
            return Trace.ABSENT if medium.media_type != MediaType.BMC_FLASH else Trace.UNKNOWN
        landed = dt.datetime.fromisoformat(stamp) >= medium.sent_at - dt.timedelta(seconds=1)
        return Trace.FOUND if landed else Trace.ABSENT
    return look


def _redfish_step(ctx: Ctx, medium: Medium) -> str:
    action, body = ACTIONS[medium.media_type]
    if medium.state == MediaState.PENDING:
        archive = None
        if medium.media_type in (MediaType.HMC_FLASH, MediaType.BMC_FLASH) and medium.pk not in ctx.archived:
            archive = _archive_logs(ctx, medium, medium.target_uri)
            if medium.media_type == MediaType.BMC_FLASH:  # the BMC's own log is cleared now; its reset comes last
                _fenced(ctx, archive=archive)
                archive = None
                ctx.session.post(f"{medium.target_uri}/LogServices/Log/Actions/LogService.ClearLog", {})
        now = timezone.now()

        def record() -> None:
            Medium.objects.filter(pk=medium.pk).update(state=MediaState.SENDING, sent_at=now)

        _fenced(ctx, record, archive)
        medium.state, medium.sent_at = MediaState.SENDING, now
        return _send(ctx, medium, action, body)
    if medium.state == MediaState.SENDING:
        verdict = settle(sent_at=medium.sent_at, settle_seconds=settings.DECOMMISSION_SETTLE_SECONDS,
                         reconcile=_reconcile(ctx, medium))
        if verdict == Verdict.WAIT:
            ctx.wait_seconds = settings.DECOMMISSION_SETTLE_SECONDS
            return WAIT
        if verdict == Verdict.ABSENT:
            Medium.objects.filter(pk=medium.pk).update(state=MediaState.PENDING, sent_at=None)
            medium.state = MediaState.PENDING
            return _redfish_step(ctx, medium)
        if verdict == Verdict.INCONCLUSIVE:
            _write_outcomes(ctx)
            medium_stop(medium=medium, actor=WORKER,
                        reason="the send was ambiguous and the BMC cannot show whether it landed: a person decides")
            return STOP
        with transaction.atomic():
            event_append(request=ctx.asset.request, medium=medium, step=f"{medium.media_type}.reconcile",
                         tool="redfish", result="adopted", actor=WORKER, detail={"task": medium.task_uri})
        if not medium.task_uri:  # a synchronous action (ClearLog, ResetBios, ResetToDefaults) that landed
            ctx.done(medium, MediaState.SANITIZED, tool="redfish", tool_version="1.17",
                     reason=f"{action.rsplit('/', 1)[1]} landed (reconciled from the BMC after a lost answer)")
            return DONE
        Medium.objects.filter(pk=medium.pk).update(state=MediaState.RUNNING, task_uri=medium.task_uri)
        medium.state = MediaState.RUNNING
    if medium.state == MediaState.RUNNING:
        return _poll(ctx, medium)
    return DONE


def _send(ctx: Ctx, medium: Medium, action: str, body: dict) -> str:
    try:
        response = ctx.session.post(f"{medium.target_uri}{action}", body)
    except BmcError as exc:
        if exc.kind == ErrorKind.AMBIGUOUS:  # stays ``sending``: reconcile after the settle period
            ctx.wait_seconds = settings.DECOMMISSION_SETTLE_SECONDS
            return WAIT
        if exc.kind == ErrorKind.INFRA:  # not processed: a transient error, retried with backoff
            Medium.objects.filter(pk=medium.pk).update(state=MediaState.PENDING, sent_at=None,
                                                       attempts=medium.attempts + 1)
            ctx.wait_seconds = RETRY.delay(medium.attempts + 1)
            with transaction.atomic():
                event_append(request=ctx.asset.request, medium=medium, step=f"{medium.media_type}.send",
                             tool="redfish", result="transient", actor=WORKER, detail={"error": str(exc)[:300]})
            return WAIT
        ctx.done(medium, MediaState.FAILED, tool="redfish", command=f"POST {medium.target_uri}{action}",
                 output=str(exc), reason=str(exc)[:300], device_failure=True)
        return STOP
    if medium.media_type == MediaType.BMC_FLASH:
        ctx.session.expect_reboot()
    if response.task_location:  # written with the pass's outcomes: if lost, ``sending`` is reconciled
        medium.state, medium.task_uri = MediaState.RUNNING, response.task_location
        ctx.running.append(medium)
        return _poll(ctx, medium)
    ctx.done(medium, MediaState.SANITIZED, tool="redfish", tool_version="1.17",
             command=f"POST {medium.target_uri}{action}", output=f"HTTP {response.status}",
             reason=f"{action.rsplit('/', 1)[1]} accepted (HTTP {response.status})")
    return DONE


def _poll(ctx: Ctx, medium: Medium) -> str:
    task = ctx.session.get(medium.task_uri)
    state = task.get("TaskState", "")
    if state in ("New", "Running", "Pending", "Starting", "Stopping", "Suspended", "Service"):
        ctx.wait_seconds = settings.DECOMMISSION_POLL_SECONDS
        return WAIT
    ok = state == "Completed" and task.get("TaskStatus", "OK") == "OK"
    ctx.done(medium, MediaState.SANITIZED if ok else MediaState.FAILED, tool="redfish", tool_version="1.17",
             command=f"GET {medium.task_uri}", output=str(task), reason=f"task {state} ({task.get('TaskStatus')})",
             device_failure=not ok)
    return DONE if ok else STOP


def _power_off_and_volatile(ctx: Ctx, media: list[Medium]) -> str:
    """GPU HBM is volatile: after the agent's reset, the system is powered off; that time is the evidence."""
    asset = ctx.asset
    if asset.powered_off_at is None:
        _fenced(ctx)
        ctx.session.post("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", {"ResetType": "ForceOff"})
        system = ctx.session.get("/redfish/v1/Systems/1")
        if system.get("PowerState") not in ("Off", None):
            ctx.wait_seconds = settings.DECOMMISSION_POLL_SECONDS
            return WAIT
        asset.powered_off_at = ctx.asset_fields["powered_off_at"] = timezone.now()  # written with the outcomes
    for medium in [m for m in media if m.media_type == MediaType.GPU_HBM and m.state == MediaState.PENDING]:
        ctx.done(medium, MediaState.SANITIZED, tool="redfish+nvidia-smi",
                 reason=f"no compute contexts, GPU reset, power removed at {asset.powered_off_at.isoformat()}",
                 detail={"powered_off_at": asset.powered_off_at.isoformat()})
    return DONE


PLAN = (MediaType.HMC_FLASH, MediaType.UEFI_NVRAM, MediaType.NVME, MediaType.DPU, "agent", MediaType.GPU_INFOROM,
        MediaType.GPU_HBM, MediaType.BMC_FLASH)


FIRST = (MediaType.HMC_FLASH, MediaType.UEFI_NVRAM, MediaType.NVME, MediaType.DPU)


def _first_batch(ctx: Ctx, by_type: dict[str, list[Medium]]) -> None:
    """The independent BMC actions of a server in one go: archive both managers' logs, record every action as
    about to be sent in ONE fenced transaction, clear the BMC's log, then send each (a crash in between leaves
    the unsent ones ``sending``: reconciled from the device, sent only if it shows they did not land)."""
    first = [m for t in FIRST for m in by_type.get(t, []) if m.state == MediaState.PENDING and m.target_uri]
    ctx.archived = archived = set(EvidenceEvent.objects.filter(asset=ctx.asset, step="logs.archive").values_list(
        "medium_id", flat=True))
    bmc = [m for m in by_type.get(MediaType.BMC_FLASH, []) if m.state == MediaState.PENDING and m.pk not in archived]
    logs = [m for m in first if m.media_type == MediaType.HMC_FLASH and m.pk not in archived] + bmc
    if not first and not bmc:
        return
    archives = [_archive_logs(ctx, m, m.target_uri) for m in logs]
    now = timezone.now()
    _fenced(ctx, lambda: Medium.objects.filter(pk__in=[m.pk for m in first]).update(
        state=MediaState.SENDING, sent_at=now), archives)
    for medium in bmc:  # the BMC's own log is cleared now; its reset to defaults comes last
        ctx.session.post(f"{medium.target_uri}/LogServices/Log/Actions/LogService.ClearLog", {})
    for medium in first:
        medium.state, medium.sent_at = MediaState.SENDING, now
        _send(ctx, medium, *ACTIONS[medium.media_type])


def asset_run(ctx: Ctx) -> str:
    """Run ``ctx.asset``'s next steps until one must wait or everything is done."""
    media = list(Medium.objects.filter(asset=ctx.asset).order_by("id"))
    by_type: dict[str, list[Medium]] = {}
    for medium in media:
        by_type.setdefault(medium.media_type, []).append(medium)
    _first_batch(ctx, by_type)
    for stage in PLAN:
        if stage == "agent":
            if agent_media(ctx.asset, media) and not agent_media_done(ctx.asset, media):
                ctx.wait_seconds, ctx.waits_for_agent = AGENT_WAIT_SECONDS, True  # its upload wakes the asset
                return WAIT
            continue
        if stage == MediaType.GPU_INFOROM:
            for medium in [m for m in by_type.get(stage, []) if m.state == MediaState.PENDING]:
                ctx.done(medium, MediaState.RECORDED, tool="inventory",
                         reason="InfoROM/VBIOS recorded (serial, versions); no workload data, not altered")
            continue
        if stage == MediaType.GPU_HBM:
            if by_type.get(stage) and _power_off_and_volatile(ctx, by_type[stage]) == WAIT:
                return WAIT
            continue
        for medium in by_type.get(stage, []):
            if medium.state in (MediaState.SANITIZED, MediaState.RECORDED, MediaState.DESTROYED,
                                MediaState.ESCALATED) or (stage == MediaType.NVME and not medium.target_uri):
                continue
            if medium.state == MediaState.FAILED:
                return STOP
            outcome = _redfish_step(ctx, medium)
            if outcome != DONE:
                return outcome
    return DONE


def run_due(*, limit: int | None = None) -> int:
    """Lease due assets of sanitizing requests and run them until the time budget is spent; returns how many ran."""
    budget = TimeBudget.for_task()
    due = Asset.objects.filter(state=AssetState.SANITIZING, request__state=RequestState.SANITIZING)
    ran = 0
    for lease in lease_due(due, limit=limit or settings.DECOMMISSION_CHUNK,
                           seconds=settings.DECOMMISSION_LEASE_SECONDS):
        asset = Asset.objects.select_related("request", "server").get(pk=lease.pk)
        if asset.server_id is None:  # a loose board: already out of power; its InfoROM is recorded
            loose_gpu_finish(asset)
            lease_release(lease, next_run_at=None)
            continue
        if budget.expired():
            lease_release(lease, next_run_at=timezone.now())
            continue
        ctx = Ctx(lease, asset, session_for(asset.server.bmc_address), budget)
        try:
            outcome = asset_run(ctx)
        except LostLease:
            continue  # another worker owns it now: it sends, not us (its outcomes so far are reconciled)
        except BmcError as exc:  # the BMC is unreachable or rebooting: come back later
            logger.info("decommission: %s: %s", asset, exc)
            outcome, ctx.wait_seconds = WAIT, RETRY.delay(1)
        _write_outcomes(ctx)  # the outcomes of this pass
        ran += 1
        if outcome == WAIT:
            lease_release(lease, next_run_at=timezone.now() + dt.timedelta(seconds=ctx.wait_seconds))
            if ctx.waits_for_agent and agent_media_done(asset):  # the upload landed while we held the lease
                Asset.objects.filter(pk=asset.pk, lease_owner="").update(next_run_at=timezone.now())
        elif outcome == STOP:  # a device failure: the medium is pending again (or escalated); back off
            lease_release(lease, next_run_at=timezone.now() + dt.timedelta(seconds=RETRY.delay(2)))
        else:
            lease_release(lease, next_run_at=None)
    return ran


def loose_gpu_finish(asset: Asset) -> None:
    media = list(Medium.objects.filter(asset=asset, state=MediaState.PENDING).order_by("id"))
    media_finish_many(media=[m for m in media if m.media_type == MediaType.GPU_INFOROM], state=MediaState.RECORDED,
                      actor=WORKER, tool="inventory", reason="InfoROM/VBIOS recorded; no workload data, not altered")
    media_finish_many(media=[m for m in media if m.media_type == MediaType.GPU_HBM], state=MediaState.SANITIZED,
                      actor=WORKER, tool="inventory", reason="volatile: the board is out of its server, unpowered")
