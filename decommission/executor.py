"""The step executor: Celery workers sanitize each server's media over Redfish on the shared crash-safe execution
model (``fleet.execution``: leases with fences, the fenced record before every send, settle-and-reconcile for an
ambiguous send; ``fleet.redfish``: the transport), with the evidence real BMCs give (``decommission.reconcile``:
standard Redfish only) and every decision on the database's clock (``decommission.clock``).

Per server, in this order (``PLAN``): archive and clear the HMC's log, reset the BIOS, secure-erase the drives
the BMC exposes, reset the DPU to factory, wait for the host agent (NVMe the BMC cannot reach, TPM, GPU reset),
record the GPUs' InfoROM, power the system off (the volatile media's evidence), then the BMC: archive and clear
its log, and reset it to defaults (ResetAll) last, since it cuts the management path (its credentials too: a 401
afterwards is the expected end of the step).

Every mutating request is recorded before it leaves: a medium's step ``pending`` -> (fenced: ``sending``, the
device's reading before the send in ``baseline``) -> its ``sent_at`` stamped by the database just before the
POST -> ``running`` (a task) or done; the ForceOff likewise on the asset (``power_off_sent_at``). A send whose
answer was lost stays ``sending``: after the settle period the device is read and compared with the baseline:
FOUND (adopted), ABSENT (the device proves it did not land: sent again, at most ``DECOMMISSION_MAX_SENDS`` in
all), UNKNOWN (a longer settle, one more reading, then the asset is held for a person with the evidence). It is
never sent again on the absence of evidence.

Bounded: a pass that ends in a BMC error counts on the asset (``errors``); past ``DECOMMISSION_MAX_ERRORS`` the
asset is held with the error. A BMC rebooting after ResetAll (refused, 503, 404) inside the boot grace recorded
in the database is waited for and not counted; only a task that ends in failure on the device counts as a
device failure (a task aborted by a reboot is sent again)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from decommission import reconcile
from decommission.canonical import sha256_hex
from decommission.clock import db_in, db_now
from decommission.models import Asset, AssetState, EvidenceEvent, MediaState, MediaType, Medium, RequestState
from decommission.scheduler_gate import assets_gate
from decommission.services.agent import agent_media, agent_media_done
from decommission.services.evidence import event_append, events_append_many
from decommission.services.steps import Outcome, media_finish_many, outcomes_write
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
DONE, WAIT, STOP, HOLD = "done", "wait", "stop", "hold"
RUNNING_TASK = ("New", "Running", "Pending", "Starting", "Stopping", "Suspended", "Service", "Interrupted")
# (media type -> Redfish action below the medium's target, request body)
ACTIONS: dict[str, tuple[str, dict]] = {
    MediaType.HMC_FLASH: ("/LogServices/Log/Actions/LogService.ClearLog", {}),
    MediaType.UEFI_NVRAM: ("/Actions/Bios.ResetBios", {}),
    MediaType.NVME: ("/Actions/Drive.SecureErase", {"SanitizationType": "CryptographicErase"}),
    MediaType.DPU: ("/Actions/NetworkAdapter.ResetSettingsToDefault", {}),
    MediaType.BMC_FLASH: ("/Actions/Manager.ResetToDefaults", {"ResetType": "ResetAll"}),
}
CLEAR_LOG = ACTIONS[MediaType.HMC_FLASH]


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


def max_sends() -> int:
    return int(_setting("DECOMMISSION_MAX_SENDS", 3))


def max_errors() -> int:
    return int(_setting("DECOMMISSION_MAX_ERRORS", 8))


def unknown_settle() -> float:
    return _setting("DECOMMISSION_UNKNOWN_SETTLE_SECONDS", 3 * settings.DECOMMISSION_SETTLE_SECONDS)


def boot_grace() -> float:
    return _setting("DECOMMISSION_BOOT_GRACE_SECONDS", 300)


class Held(Exception):
    """The asset needs a person: ``reason`` and ``evidence`` are shown on the request page, API and metric."""

    def __init__(self, reason: str, evidence: dict[str, Any]) -> None:
        super().__init__(reason)
        self.reason, self.evidence = reason, evidence


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
    waits_for_scheduler: bool = False  # the chunk's scheduler gate (assets_gate): its node not drained and idle

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

    @property
    def system(self) -> str:
        return self.asset.system_uri


def _archive_logs(ctx: Ctx, medium: Medium) -> tuple[dict, list[list[str]]]:
    """Read a manager's log entries before they are cleared; their SHA-256 goes into the chain. Returns the
    archive and the (Id, Created) pairs: the baseline the clear is reconciled against."""
    entries = ctx.session.get(f"{medium.target_uri}/LogServices/Log/Entries").get("Members", [])
    raw = str(entries)
    archive = {"medium": medium, "step": "logs.archive", "tool": "redfish",
               "command": f"GET {medium.target_uri}/LogServices/Log/Entries", "output": raw, "result": "archived",
               "detail": {"entries": len(entries), "sha256": sha256_hex(raw)}}
    return archive, [[str(e.get("Id", "")), str(e.get("Created", ""))] for e in entries]


def _write(ctx: Ctx, archives: list[dict]) -> None:
    """The pass's outcomes, started tasks, log archives and asset fields so far (inside the caller's
    transaction, which holds the asset's row: the asset, then its chain, then the request when it finishes)."""
    ctx.flush()
    if archives:
        events_append_many(request=ctx.asset.request, actor=WORKER, items=archives)
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


def _fenced(ctx: Ctx, record: Callable[[], None] | None = None, archives: list[dict] | None = None) -> None:
    """Prove the lease, write the outcomes so far and the log archives, record "about to send" and renew the
    lease on the database's clock: ONE flushed transaction. A worker whose lease was taken writes nothing."""

    def write_and_record() -> None:
        _write(ctx, archives or [])
        if record is not None:
            record()
        Asset.objects.filter(pk=ctx.lease.pk, fence=ctx.lease.fence).update(
            lease_until=db_in(settings.DECOMMISSION_LEASE_SECONDS))

    fenced(ctx.lease, write_and_record)


def _stamp(ctx: Ctx, medium: Medium) -> None:
    """Just before this very send: prove the lease is still ours and renew it (so a batch of sends cannot
    outlast it: each send is bounded by FLEET_BMC_TIMEOUT, below the lease), and stamp the send time by the
    database (not the batch's record time): the settle period counts from here."""
    lease, seconds = ctx.lease, settings.DECOMMISSION_LEASE_SECONDS
    if connection.vendor == "postgresql":  # one statement: the lease renewed only if ours, then the stamp
        with connection.cursor() as cursor:
            cursor.execute(
                f"WITH lease AS (UPDATE {Asset._meta.db_table} SET lease_until = clock_timestamp() + "
                f"make_interval(secs => %s) WHERE id = %s AND fence = %s AND lease_owner = %s RETURNING id) "
                f"UPDATE {Medium._meta.db_table} SET sent_at = clock_timestamp(), sends = sends + 1 "
                f"WHERE id = %s AND EXISTS (SELECT 1 FROM lease) RETURNING sent_at",
                [seconds, lease.pk, lease.fence, lease.owner, medium.pk])
            row = cursor.fetchone()
        stamped, sent_at = row is not None, row[0] if row else None
    else:
        sent_at = db_now()
        stamped = bool(Asset.objects.filter(pk=lease.pk, fence=lease.fence, lease_owner=lease.owner).update(
            lease_until=db_in(seconds)) and Medium.objects.filter(pk=medium.pk).update(
            sent_at=sent_at, sends=F("sends") + 1))
    if not stamped:
        raise LostLease(f"asset {lease.pk}: fence {lease.fence} is no longer current")
    medium.sends += 1
    medium.sent_at = sent_at  # a lost answer settles from here, in this pass too


def _record(ctx: Ctx, media: list[Medium], archives: list[dict] | None = None) -> None:
    """Fenced: these media are about to be sent, with the readings taken before (their ``baseline``)."""
    for medium in media:
        medium.state, medium.unknown_checks = MediaState.SENDING, 0

    def record() -> None:
        Medium.objects.bulk_update(media, ["state", "baseline", "unknown_checks"])  # JSON: not fleet.bulk
        Medium.objects.filter(pk__in=[m.pk for m in media]).update(sent_at=Now())
    _fenced(ctx, record, archives)


def _action(medium: Medium) -> tuple[str, dict]:
    if medium.media_type == MediaType.BMC_FLASH and medium.baseline.get("phase") != "reset":
        return CLEAR_LOG
    return ACTIONS[medium.media_type]


def _send(ctx: Ctx, medium: Medium) -> str:
    action, body = _action(medium)
    _stamp(ctx, medium)
    try:
        response = ctx.session.post(f"{medium.target_uri}{action}", body)
    except BmcError as exc:
        if exc.kind == ErrorKind.AMBIGUOUS:  # stays ``sending``: reconciled after the settle period
            ctx.wait_seconds = settings.DECOMMISSION_SETTLE_SECONDS
            return WAIT
        if exc.kind == ErrorKind.INFRA:  # not processed (refused, 5xx, 401): pending again; the pass counts it
            Medium.objects.filter(pk=medium.pk).update(state=MediaState.PENDING, sent_at=None)
            medium.state = MediaState.PENDING
            raise
        raise Held(f"the BMC refused {action.rsplit('/', 1)[1]} on {medium}: a person decides",
                   {"medium": medium.pk, "status": exc.status, "error": str(exc)[:300],
                    "message_ids": exc.message_ids}) from exc
    return _answered(ctx, medium, action, response.task_location, f"HTTP {response.status}")


def _answered(ctx: Ctx, medium: Medium, action: str, task_uri: str, how: str) -> str:
    """The action landed (answered, or adopted from the device): a task to poll, the BMC's next phase, or done."""
    if task_uri:  # written with the pass's outcomes: if lost, ``sending`` is reconciled
        medium.state, medium.task_uri = MediaState.RUNNING, task_uri
        ctx.running.append(medium)
        return _poll(ctx, medium)
    if medium.media_type == MediaType.BMC_FLASH and medium.baseline.get("phase") != "reset":
        medium.baseline = {"phase": "reset", "cleared": how}  # the log is cleared: the reset to defaults follows
        Medium.objects.filter(pk=medium.pk).update(state=MediaState.PENDING, baseline=medium.baseline, sent_at=None)
        medium.state = MediaState.PENDING
        return _step(ctx, medium)
    ctx.done(medium, MediaState.SANITIZED, tool="redfish", tool_version="1.17",
             command=f"POST {medium.target_uri}{action}", output=how,
             reason=f"{action.rsplit('/', 1)[1]} {how}", detail={"baseline": medium.baseline})
    return DONE


def _pending(ctx: Ctx, medium: Medium) -> str:
    """Read the device, record, send."""
    archives: list[dict] = []
    entries = None
    clearing = medium.media_type == MediaType.HMC_FLASH or (
        medium.media_type == MediaType.BMC_FLASH and medium.baseline.get("phase") != "reset")
    if clearing:
        archive, entries = _archive_logs(ctx, medium)
        archives = [] if medium.pk in ctx.archived and medium.media_type == MediaType.HMC_FLASH else [archive]
    medium.baseline = reconcile.baseline(ctx.session, medium, system=ctx.system, entries=entries)
    if medium.media_type == MediaType.BMC_FLASH and medium.baseline.get("phase") == "reset":
        ctx.asset_fields["boot_grace_until"] = db_in(boot_grace())  # written with the record, before the send
    _record(ctx, [medium], archives)
    return _send(ctx, medium)


def _unknown(ctx: Ctx, medium: Medium, evidence: dict) -> str:
    """UNKNOWN: once a longer settle and a second reading; then the asset is held for a person."""
    if medium.unknown_checks == 0:
        Medium.objects.filter(pk=medium.pk).update(unknown_checks=1)
        medium.unknown_checks = 1
        with transaction.atomic():
            event_append(request=ctx.asset.request, medium=medium, step=f"{medium.media_type}.reconcile",
                         tool="redfish", result="unknown", actor=WORKER, detail=evidence)
        ctx.wait_seconds = unknown_settle()
        return WAIT
    raise Held(f"{medium}: the BMC's standard evidence cannot show whether {_action(medium)[0].rsplit('/', 1)[1]} "
               f"landed; never resent on a guess: a person decides", {"medium": medium.pk, **evidence})


def _sending(ctx: Ctx, medium: Medium) -> str:
    seconds = settings.DECOMMISSION_SETTLE_SECONDS if medium.unknown_checks == 0 else unknown_settle()
    found: dict[str, reconcile.Look] = {}

    def trace() -> Trace:
        found["look"] = reconcile.look(ctx.session, medium, system=ctx.system)
        return found["look"].trace

    verdict = settle(sent_at=medium.sent_at, settle_seconds=seconds, reconcile=trace, now=db_now())
    if verdict == Verdict.WAIT:
        ctx.wait_seconds = seconds
        return WAIT
    look = found["look"]
    if verdict == Verdict.INCONCLUSIVE:
        return _unknown(ctx, medium, look.evidence)
    with transaction.atomic():
        event_append(request=ctx.asset.request, medium=medium, step=f"{medium.media_type}.reconcile",
                     tool="redfish", result="adopted" if verdict == Verdict.FOUND else "absent", actor=WORKER,
                     detail={**look.evidence, "task": look.task_uri})
    if verdict == Verdict.ABSENT:
        if medium.sends >= max_sends():
            raise Held(f"{medium}: sent {medium.sends} times and the BMC shows none landed: a person decides",
                       {"medium": medium.pk, **look.evidence})
        Medium.objects.filter(pk=medium.pk).update(state=MediaState.PENDING, sent_at=None)
        medium.state = MediaState.PENDING
        return _pending(ctx, medium)
    return _answered(ctx, medium, _action(medium)[0], look.task_uri, "landed (reconciled from the BMC's standard "
                     "evidence after a lost answer)")


def _poll(ctx: Ctx, medium: Medium) -> str:
    try:
        task = ctx.session.get(medium.task_uri)
    except BmcError as exc:
        if exc.kind != ErrorKind.DEFINITE or exc.status != 404:
            raise
        return _purged(ctx, medium)
    state = task.get("TaskState", "")
    if state in RUNNING_TASK:
        ctx.wait_seconds = settings.DECOMMISSION_POLL_SECONDS
        return WAIT
    messages = [str(m.get("MessageId", "")) for m in task.get("Messages") or []]
    ok = state == "Completed" and task.get("TaskStatus", "OK") == "OK"
    if not ok and reconcile.ABORTED in messages:
        return _aborted(ctx, medium, {"task": medium.task_uri, "state": state, "messages": messages})
    return _ended(ctx, medium, ok, f"GET {medium.task_uri}", str(task), f"task {state} ({task.get('TaskStatus')})")


def _ended(ctx: Ctx, medium: Medium, ok: bool, command: str, output: str, reason: str) -> str:
    ctx.done(medium, MediaState.SANITIZED if ok else MediaState.FAILED, tool="redfish", tool_version="1.17",
             command=command, output=output, reason=reason, device_failure=not ok)
    return DONE if ok else STOP


def _aborted(ctx: Ctx, medium: Medium, evidence: dict) -> str:
    """A task the BMC aborted (its reboot): not the device's verdict; sent again, within the send bound."""
    if medium.sends >= max_sends():
        raise Held(f"{medium}: its task was aborted {medium.sends} times: a person decides",
                   {"medium": medium.pk, **evidence})
    with transaction.atomic():
        event_append(request=ctx.asset.request, medium=medium, step=f"{medium.media_type}.task", tool="redfish",
                     result="aborted", actor=WORKER, detail=evidence)
    Medium.objects.filter(pk=medium.pk).update(state=MediaState.PENDING, sent_at=None, task_uri="")
    medium.state, medium.task_uri = MediaState.PENDING, ""
    ctx.wait_seconds = RETRY.delay(1)
    return WAIT


def _purged(ctx: Ctx, medium: Medium) -> str:
    """The task monitor answers 404: the BMC purged the finished task. Its end comes from the event log."""
    kind, evidence = reconcile.task_outcome(ctx.session, medium, ctx.system, medium.task_uri)
    if kind == "unknown":
        return _unknown(ctx, medium, evidence)
    if kind == "aborted":
        return _aborted(ctx, medium, evidence)
    return _ended(ctx, medium, kind == "ok", f"GET {medium.task_uri} (404: purged) + event log", str(evidence),
                  f"task {'completed' if kind == 'ok' else 'failed on the device'} (event log {evidence['event']})")


def _step(ctx: Ctx, medium: Medium) -> str:
    if medium.state == MediaState.PENDING:
        return _pending(ctx, medium)
    if medium.state == MediaState.SENDING:
        return _sending(ctx, medium)
    if medium.state == MediaState.RUNNING:
        return _poll(ctx, medium)
    return DONE


def _power_off_and_volatile(ctx: Ctx, media: list[Medium]) -> str:
    """GPU HBM is volatile: after the agent's reset, the system is powered off (PowerState Off is the evidence).
    The ForceOff is recorded before it is sent, and sent again only when the system is still On after the
    settle period (at most ``DECOMMISSION_MAX_SENDS`` in all)."""
    asset = ctx.asset
    if asset.powered_off_at is None:
        system = ctx.session.get(ctx.system)
        power = system.get("PowerState")
        if power != "Off":
            if asset.power_off_sent_at is not None:
                if power == "PoweringOff" or db_now() < asset.power_off_sent_at + dt.timedelta(
                        seconds=settings.DECOMMISSION_SETTLE_SECONDS):
                    ctx.wait_seconds = settings.DECOMMISSION_POLL_SECONDS
                    return WAIT
                if asset.power_off_sends >= max_sends():
                    raise Held(f"ForceOff sent {asset.power_off_sends} times; the system still reports "
                               f"PowerState {power}: a person decides", {"power_state": power})
            _fenced(ctx, lambda: Asset.objects.filter(pk=asset.pk).update(
                power_off_sent_at=Now(), power_off_sends=F("power_off_sends") + 1))
            asset.power_off_sent_at, asset.power_off_sends = db_now(), asset.power_off_sends + 1
            try:
                ctx.session.post(f"{ctx.system}/Actions/ComputerSystem.Reset", {"ResetType": "ForceOff"})
            except BmcError as exc:
                if exc.kind == ErrorKind.AMBIGUOUS:
                    ctx.wait_seconds = settings.DECOMMISSION_SETTLE_SECONDS
                    return WAIT
                if exc.kind == ErrorKind.INFRA:  # not processed: the record is withdrawn, the pass counts it
                    Asset.objects.filter(pk=asset.pk).update(power_off_sent_at=None)
                    raise
                raise Held("the BMC refused ForceOff: a person decides",
                           {"status": exc.status, "error": str(exc)[:300]}) from exc
            if ctx.session.get(ctx.system).get("PowerState") != "Off":
                ctx.wait_seconds = settings.DECOMMISSION_POLL_SECONDS
                return WAIT
        asset.powered_off_at = db_now()
        ctx.asset_fields["powered_off_at"] = asset.powered_off_at  # written with the outcomes
    for medium in [m for m in media if m.media_type == MediaType.GPU_HBM and m.state == MediaState.PENDING]:
        ctx.done(medium, MediaState.SANITIZED, tool="redfish+nvidia-smi",
                 reason=f"no compute contexts, GPU reset, PowerState Off at {asset.powered_off_at.isoformat()}",
                 detail={"powered_off_at": asset.powered_off_at.isoformat()})
    return DONE


PLAN = (MediaType.HMC_FLASH, MediaType.UEFI_NVRAM, MediaType.NVME, MediaType.DPU, "agent", MediaType.GPU_INFOROM,
        MediaType.GPU_HBM, MediaType.BMC_FLASH)
FIRST = (MediaType.HMC_FLASH, MediaType.UEFI_NVRAM, MediaType.NVME, MediaType.DPU)


def _first_batch(ctx: Ctx, by_type: dict[str, list[Medium]]) -> None:
    """The independent BMC actions of a server in one go: read what each is reconciled against (the HMC's log,
    archived; the BIOS attributes; the event log), record them all as about to be sent in ONE fenced
    transaction, then send each, its send time stamped just before it (a crash in between leaves the unsent
    ones ``sending``: reconciled from the device, sent again only if it proves they did not land)."""
    first = [m for t in FIRST for m in by_type.get(t, []) if m.state == MediaState.PENDING and m.target_uri]
    if not first:
        return
    ctx.archived = set(EvidenceEvent.objects.filter(asset=ctx.asset, step="logs.archive").values_list(
        "medium_id", flat=True))
    archives = []
    events = reconcile.events_reading(ctx.session, ctx.system) if any(
        m.media_type in reconcile.TASK_MEDIA for m in first) else None
    for medium in first:
        entries = None
        if medium.media_type == MediaType.HMC_FLASH:
            archive, entries = _archive_logs(ctx, medium)
            if medium.pk not in ctx.archived:
                archives.append(archive)
        medium.baseline = reconcile.baseline(ctx.session, medium, system=ctx.system, events=events, entries=entries)
    _record(ctx, first, archives)
    for index, medium in enumerate(first):
        try:
            _send(ctx, medium)
        except (BmcError, Held):  # the ones after it were not sent: pending again, not "ambiguous"
            Medium.objects.filter(pk__in=[m.pk for m in first[index + 1:]]).update(
                state=MediaState.PENDING, sent_at=None)
            raise


def asset_run(ctx: Ctx) -> str:
    """Run ``ctx.asset``'s next steps until one must wait or everything is done."""
    if ctx.waits_for_scheduler:  # h19: no wipe step before the scheduler's node is drained and idle
        ctx.wait_seconds = settings.FLEET_SCHEDULER_POLL_SECONDS
        return WAIT
    if not ctx.asset.system_uri:
        ctx.asset.system_uri = ctx.asset_fields["system_uri"] = reconcile.system_uri(ctx.session)
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
            outcome = _step(ctx, medium)
            if outcome != DONE:
                return outcome
    return DONE


def asset_hold(asset: Asset, *, reason: str, evidence: dict[str, Any], lease: Lease | None = None) -> None:
    """Hold ``asset`` for a person: not run again until released; the reason and the evidence are recorded."""
    with transaction.atomic():
        Asset.objects.select_for_update(no_key=True).filter(pk=asset.pk).values_list("pk").get()
        Asset.objects.filter(pk=asset.pk).update(hold_reason=reason[:300], hold_evidence=evidence, held_at=Now(),
                                                 next_run_at=None)
        event_append(request=asset.request, asset=asset, step="asset.hold", result="needs a person", actor=WORKER,
                     detail={"reason": reason, **evidence})
    logger.warning("decommission: %s held: %s", asset, reason)


def _error(ctx: Ctx, exc: BmcError) -> tuple[str, float]:
    """A pass that ended in a BMC error: inside the recorded boot grace it is the reboot (waited, not counted);
    else it counts, and past the bound the asset is held with the error."""
    asset, now = ctx.asset, db_now()
    evidence = {"error": str(exc)[:300], "kind": str(exc.kind), "status": exc.status, "path": exc.path}
    if asset.boot_grace_until is not None and now < asset.boot_grace_until:
        return WAIT, min(RETRY.delay(2), max(1.0, (asset.boot_grace_until - now).total_seconds()))
    errors = asset.errors + 1
    Asset.objects.filter(pk=asset.pk).update(errors=errors)
    if errors >= max_errors():
        raise Held(f"the BMC failed {errors} passes in a row: {str(exc)[:200]}", evidence) from exc
    return WAIT, max(RETRY.delay(errors), float(exc.retry_after or 0))


def run_due(*, limit: int | None = None) -> int:
    """Lease due assets of sanitizing requests and run them until the time budget is spent; returns how many ran."""
    budget = TimeBudget.for_task()
    due = Asset.objects.filter(state=AssetState.SANITIZING, request__state=RequestState.SANITIZING, hold_reason="")
    ran = 0
    leases = lease_due(due, limit=limit or settings.DECOMMISSION_CHUNK, seconds=settings.DECOMMISSION_LEASE_SECONDS,
                       now=db_now())
    gate = assets_gate(leases)  # the chunk's servers: their drains, one scheduler read for all their nodes
    for lease in leases:
        asset = Asset.objects.select_related("request", "server").get(pk=lease.pk)
        if asset.server_id is None:  # a loose board: already out of power; its InfoROM is recorded
            loose_gpu_finish(asset)
            lease_release(lease, next_run_at=None)
            continue
        if budget.expired():
            lease_release(lease, next_run_at=db_now())
            continue
        if asset.pk in gate.lost:
            continue  # another worker owns it now (its drain was not sent by us)
        ctx = Ctx(lease, asset, session_for(asset.server.bmc_address), budget,
                  waits_for_scheduler=asset.pk in gate.waiting)
        grace = (asset.boot_grace_until - db_now()).total_seconds() if asset.boot_grace_until else 0.0
        ctx.session.expect_reboot(max(0.0, grace))  # the grace is the database's, not this process's memory
        held: Held | None = None
        try:
            try:
                outcome = asset_run(ctx)
                if asset.errors:
                    ctx.asset_fields["errors"] = 0
            except BmcError as exc:
                logger.info("decommission: %s: %s", asset, exc)
                outcome, ctx.wait_seconds = _error(ctx, exc)
        except LostLease:
            continue  # another worker owns it now: it sends, not us (its outcomes so far are reconciled)
        except Held as exc:
            held, outcome = exc, HOLD
        _write_outcomes(ctx)  # the outcomes of this pass
        ran += 1
        if held is not None:
            asset_hold(asset, reason=held.reason, evidence=held.evidence)
            lease_release(lease)
        elif outcome == WAIT:
            lease_release(lease, next_run_at=db_now() + dt.timedelta(seconds=ctx.wait_seconds))
            if ctx.waits_for_agent and agent_media_done(asset):  # the upload landed while we held the lease
                Asset.objects.filter(pk=asset.pk, lease_owner="").update(next_run_at=Now())
        elif outcome == STOP:  # a device failure: the medium is pending again (or escalated); back off
            lease_release(lease, next_run_at=db_now() + dt.timedelta(seconds=RETRY.delay(2)))
        else:
            lease_release(lease, next_run_at=None)
    return ran


def loose_gpu_finish(asset: Asset) -> None:
    media = list(Medium.objects.filter(asset=asset, state=MediaState.PENDING).order_by("id"))
    media_finish_many(media=[m for m in media if m.media_type == MediaType.GPU_INFOROM], state=MediaState.RECORDED,
                      actor=WORKER, tool="inventory", reason="InfoROM/VBIOS recorded; no workload data, not altered")
    media_finish_many(media=[m for m in media if m.media_type == MediaType.GPU_HBM], state=MediaState.SANITIZED,
                      actor=WORKER, tool="inventory", reason="volatile: the board is out of its server, unpowered")
