"""What a BMC shows about a decommission action, from standard Redfish only (DMTF schemas; no ``Oem`` object,
no task ``Payload``): the reading taken before a send (the medium's ``baseline``) and the look after an
ambiguous one, which answers FOUND (it landed), ABSENT (the device proves it did not) or UNKNOWN (the evidence
cannot tell: the executor waits a longer settle, reads again, then holds the asset for a person).

| action | before the send | FOUND | ABSENT | otherwise UNKNOWN |
|---|---|---|---|---|
| ``LogService.ClearLog`` | the log's entries (Id, Created) | none of them is left | all of them are left | |
| ``Bios.ResetBios`` | the ``Attributes`` | they changed, or ``ResetBiosToDefaultsPending`` | they are the same | |
| ``Drive.SecureErase``, ``NetworkAdapter.ResetSettingsToDefault`` | the event log's last entry Id | a drive ``Operations`` entry with its ``AssociatedTask``, or an event-log entry after the reading whose ``OriginOfCondition`` is the resource (TaskEvent ``MessageArgs`` = the task) | the event log still holds the reading's last entry and nothing after it names the resource | no event log, or it wrapped or was cleared |
| ``Manager.ResetToDefaults`` (ResetAll) | the manager's ``LastResetTime`` | 401 (the factory accounts are back) or a later ``LastResetTime`` | the same ``LastResetTime`` and our credentials still work | no ``LastResetTime`` |
| ``ComputerSystem.Reset`` ForceOff | - | ``PowerState`` Off | ``PowerState`` On after the settle | |

``LastResetTime`` is compared only with the earlier reading of the same BMC, at the resolution it reports."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from decommission.models import MediaType, Medium
from fleet.execution import Trace
from fleet.redfish import BmcError, ErrorKind, RedfishSession, strip_prefix

ROOT = "/redfish/v1"
TASK_MEDIA = (MediaType.NVME, MediaType.DPU)
STARTED, COMPLETED, ABORTED = "TaskEvent.1.0.TaskStarted", "TaskEvent.1.0.TaskCompletedOK", "TaskEvent.1.0.TaskAborted"
WARNING = "TaskEvent.1.0.TaskCompletedWarning"


@dataclass
class Look:
    trace: Trace
    evidence: dict[str, Any] = field(default_factory=dict)
    task_uri: str = ""


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def system_uri(session: RedfishSession) -> str:
    """The system this BMC manages: the first member of its Systems collection (no hard-coded ``Systems/1``)."""
    members = session.members(f"{ROOT}/Systems")
    if not members:
        raise BmcError("GET /redfish/v1/Systems: no system", kind=ErrorKind.DEFINITE, status=404, method="GET",
                       path=f"{ROOT}/Systems")
    return members[0]


def _event_log(session: RedfishSession, system: str) -> list[dict] | None:
    """The system's event log entries, or None when the BMC keeps none."""
    try:
        services = session.members(f"{system}/LogServices")
    except BmcError as exc:
        if exc.kind == ErrorKind.DEFINITE and exc.status == 404:
            return None
        raise
    log = next((m for m in services if m.rsplit("/", 1)[-1] in ("EventLog", "SEL", "Log")), None)
    if log is None:
        return None
    return list(session.get(f"{log}/Entries").get("Members", []))


def _entry_id(entry: dict) -> int | None:
    try:
        return int(str(entry.get("Id", "")))
    except ValueError:
        return None


def log_entries(session: RedfishSession, manager: str) -> list[list[str]]:
    entries = session.get(f"{manager}/LogServices/Log/Entries").get("Members", [])
    return [[str(e.get("Id", "")), str(e.get("Created", ""))] for e in entries]


def baseline(session: RedfishSession, medium: Medium, *, system: str, events: dict | None = None,
             entries: list[list[str]] | None = None) -> dict[str, Any]:
    """The device's reading before the send (``events``/``entries``: readings the caller already has)."""
    kind = medium.media_type
    if kind == MediaType.HMC_FLASH or (kind == MediaType.BMC_FLASH and medium.baseline.get("phase") != "reset"):
        return {"entries": entries if entries is not None else log_entries(session, medium.target_uri)}
    if kind == MediaType.UEFI_NVRAM:
        return {"attributes": _digest(session.get(medium.target_uri).get("Attributes"))}
    if kind in TASK_MEDIA:
        return dict(events if events is not None else events_reading(session, system))
    if kind == MediaType.BMC_FLASH:
        return {"phase": "reset", "last_reset": session.get(medium.target_uri).get("LastResetTime", "")}
    return {}


def events_reading(session: RedfishSession, system: str) -> dict[str, Any]:
    entries = _event_log(session, system)
    if entries is None:
        return {"event_log": False}
    ids = [i for i in (_entry_id(e) for e in entries) if i is not None]
    return {"event_log": True, "events_last": max(ids) if ids else None}


def look(session: RedfishSession, medium: Medium, *, system: str) -> Look:
    """After the settle: did the recorded send land? (An unreachable BMC raises: the caller tries later.)"""
    kind, before = medium.media_type, medium.baseline
    if kind == MediaType.HMC_FLASH or (kind == MediaType.BMC_FLASH and before.get("phase") != "reset"):
        return _look_cleared(session, medium, before)
    if kind == MediaType.UEFI_NVRAM:
        bios = session.get(medium.target_uri)
        changed = _digest(bios.get("Attributes")) != before.get("attributes")
        pending = bios.get("ResetBiosToDefaultsPending")  # Bios v1.2: applied at the next boot
        evidence = {"attributes_changed": changed, "reset_pending": pending}
        return Look(Trace.FOUND if changed or pending is True else Trace.ABSENT, evidence)
    if kind in TASK_MEDIA:
        return _look_task(session, medium, before, system)
    if kind == MediaType.BMC_FLASH:
        return _look_reset(session, medium, before)
    return Look(Trace.UNKNOWN, {"why": f"no standard evidence for {kind}"})


def _look_cleared(session: RedfishSession, medium: Medium, before: dict) -> Look:
    old = {tuple(e) for e in before.get("entries", [])}
    now = {tuple(e) for e in log_entries(session, medium.target_uri)}
    evidence = {"entries_before": len(old), "entries_now": len(now), "left": len(old & now)}
    if old and not old & now:
        return Look(Trace.FOUND, evidence)
    if old and old <= now:
        return Look(Trace.ABSENT, evidence)
    return Look(Trace.UNKNOWN, {**evidence, "why": "the log's entries before the send cannot tell"})


def _look_reset(session: RedfishSession, medium: Medium, before: dict) -> Look:
    try:
        manager = session.get(medium.target_uri)
    except BmcError as exc:
        if exc.status == 401:  # ResetAll restored the factory accounts: it landed
            return Look(Trace.FOUND, {"status": 401, "why": "credentials reset to factory (expected)"})
        raise
    then, now = before.get("last_reset") or "", manager.get("LastResetTime") or ""
    evidence = {"last_reset_before": then, "last_reset_now": now}
    if not then or not now:
        return Look(Trace.UNKNOWN, {**evidence, "why": "no LastResetTime"})
    try:
        later = dt.datetime.fromisoformat(now) > dt.datetime.fromisoformat(then)
    except ValueError:
        return Look(Trace.UNKNOWN, {**evidence, "why": "LastResetTime unreadable"})
    return Look(Trace.FOUND if later else Trace.ABSENT, evidence)


def _origin(entry: dict) -> str:
    links = entry.get("Links") or {}
    origin = links.get("OriginOfCondition") or entry.get("OriginOfCondition") or {}
    return str(origin.get("@odata.id", "")) if isinstance(origin, dict) else ""


def task_events(session: RedfishSession, medium: Medium, system: str, after: int | None) -> list[dict] | None:
    """Event-log entries after Id ``after`` that name the medium's resource (None: no event log)."""
    entries = _event_log(session, system)
    if entries is None:
        return None
    return [e for e in entries if (_entry_id(e) or 0) > (after or 0)
            and strip_prefix(session.url, _origin(e)) == medium.target_uri]


def _look_task(session: RedfishSession, medium: Medium, before: dict, system: str) -> Look:
    resource = session.get(medium.target_uri)
    for operation in resource.get("Operations") or []:
        task = (operation.get("AssociatedTask") or {}).get("@odata.id", "")
        if task:
            return Look(Trace.FOUND, {"operation": operation.get("Operation") or operation.get("OperationName")},
                        task_uri=strip_prefix(session.url, task))
    if not before.get("event_log"):
        return Look(Trace.UNKNOWN, {"why": "no event log and no operation in progress: a finished, purged task "
                                           "cannot be told from none"})
    entries = _event_log(session, system)
    if entries is None:
        return Look(Trace.UNKNOWN, {"why": "the event log is gone"})
    last = before.get("events_last")
    ids = {i for i in (_entry_id(e) for e in entries) if i is not None}
    mine = [e for e in entries if (_entry_id(e) or 0) > (last or 0)
            and strip_prefix(session.url, _origin(e)) == medium.target_uri]
    started = [e for e in mine if e.get("MessageId") == STARTED and e.get("MessageArgs")]
    if started:
        task_id = str(started[-1]["MessageArgs"][0])
        return Look(Trace.FOUND, {"event": started[-1].get("Id"), "task": task_id},
                    task_uri=f"{ROOT}/TaskService/Tasks/{task_id}")
    intact = (last in ids) if last is not None else (not ids or min(ids) == 1)
    evidence = {"events_last_before": last, "events_now": len(ids), "log_intact": intact}
    if intact:
        return Look(Trace.ABSENT, evidence)
    return Look(Trace.UNKNOWN, {**evidence, "why": "the event log wrapped or was cleared since the send"})


def task_outcome(session: RedfishSession, medium: Medium, system: str, task_uri: str) -> tuple[str, dict]:
    """A task whose monitor answers 404 (purged after it finished): its end from the event log. Returns
    ("ok" | "failed" | "aborted" | "unknown", evidence)."""
    task_id = task_uri.rstrip("/").rsplit("/", 1)[-1]
    events = task_events(session, medium, system, None)
    if events is None:
        return "unknown", {"task": task_id, "why": "the task was purged and the BMC keeps no event log"}
    ends = [e for e in events if [str(a) for a in e.get("MessageArgs") or []][:1] == [task_id]
            and e.get("MessageId") in (COMPLETED, ABORTED, WARNING)]
    if not ends:
        return "unknown", {"task": task_id, "why": "the task was purged; the event log shows no end for it"}
    end = ends[-1]
    kind = {COMPLETED: "ok", ABORTED: "aborted", WARNING: "failed"}[end["MessageId"]]
    return kind, {"task": task_id, "event": end.get("Id"), "message": end.get("MessageId"),
                  "created": end.get("Created")}
