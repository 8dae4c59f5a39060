"""What the BMC shows about a side effect whose outcome we do not know (an ambiguous send, or a worker that died
between its flushed record and the BMC's answer): FOUND, ABSENT or UNKNOWN (``fleet.execution.Trace``).

Asked only after the settle period (``settle_seconds``: longer than the BMC class's worst processing time, so a
request the BMC took late has landed by then). Evidence, first that applies:
- update: a task for this image and these targets in the task list (FOUND, adopted); an image of this version
  staged or pending on a targeted item (FOUND: the task was purged); the items at the new version (FOUND);
  a targeted item busy with no task to show for it (UNKNOWN); else ABSENT;
- Activate: no targeted item still has a Staged image (FOUND), else ABSENT;
- reset: the LastResetTime of the system (the manager for a BMC reset) moved since it was read just before the
  request (FOUND) or did not (ABSENT); no reading recorded (ABSENT: the reading is flushed before every send,
  so the reset was never sent); a BMC that does not report LastResetTime (UNKNOWN).
A BMC that cannot be read raises ``BmcError`` (infra): the caller comes back later, within its attempts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings

from firmware.models import TargetStep, version_key
from firmware.redfish import ROOT, BmcClient, TaskInfo
from fleet.execution import Trace
from fleet.redfish import strip_prefix

EVIDENCE = "last_reset="


@dataclass
class Found:
    trace: Trace
    evidence: str
    task: TaskInfo | None = None


def settle_seconds(bmc_class: str) -> float:
    """How long after an unanswered request the BMC is asked what it did (per BMC class)."""
    per_class = getattr(settings, "FLEET_BMC_SETTLE_SECONDS_BY_CLASS", {}) or {}
    return float(per_class.get(bmc_class, settings.FLEET_BMC_SETTLE_SECONDS))


def pending_version(doc: dict[str, Any]) -> str:
    """The version of an image staged or awaiting activation on an inventory item ("" if none): the
    simulator's and several vendors' Oem ``PendingImage``, or a ``Staged``/``Pending`` status."""
    for oem in (doc.get("Oem") or {}).values():
        pending = (oem or {}).get("PendingImage") if isinstance(oem, dict) else None
        if isinstance(pending, dict) and pending.get("Version"):
            return str(pending["Version"])
    return ""


def update_trace(client: BmcClient, item: dict[str, Any]) -> Found:
    task = client.find_update_task(image_uri=item["image"], targets=item["targets"])
    if task is not None:
        return Found(Trace.FOUND, f"task {task.uri} {task.state}", task)
    docs = client.inventory(item["targets"])
    wanted = version_key(item["version"])
    if all(version_key(str(d.get("Version") or "")) == wanted for d in docs):
        return Found(Trace.FOUND, "inventory at the new version")
    staged = [d.get("Id") for d in docs if version_key(pending_version(d)) == wanted]
    if staged:
        return Found(Trace.FOUND, f"image {item['version']} pending on {', '.join(map(str, staged))} (task purged)")
    busy = {str(b.get("@odata.id", "")).rsplit("/", 1)[-1]
            for b in ((client.get(f"{ROOT}/UpdateService").get("Oem") or {}).get("FleetSim") or {})
            .get("BusyTargets", [])}
    if busy & set(item["targets"]):
        return Found(Trace.UNKNOWN, f"targets busy ({', '.join(sorted(busy))}) but no task for this image")
    return Found(Trace.ABSENT, "no task, no pending image, old version")


def activate_trace(client: BmcClient, work: list[dict[str, Any]]) -> Found:
    targets = sorted({t for w in work for t in w["targets"]})
    staged = [d.get("Id") for d in client.inventory(targets)
              if any(isinstance(o, dict) and (o.get("PendingImage") or {}).get("State") == "Staged"
                     for o in (d.get("Oem") or {}).values())]
    if staged:
        return Found(Trace.ABSENT, f"still staged: {', '.join(map(str, staged))}")
    return Found(Trace.FOUND, "no image left staged")


def reset_evidence_path(client: BmcClient, kind: str) -> str:
    collection = "Managers" if kind == "bmc_reset" else "Systems"
    members = client.members(f"{ROOT}/{collection}")
    return members[0] if members else f"{ROOT}/{collection}/1"


def last_reset(client: BmcClient, kind: str) -> str:
    """The BMC's LastResetTime for this kind of reset ("" when it does not say)."""
    doc = client.get(strip_prefix(client.url, reset_evidence_path(client, kind)))
    return str(doc.get("LastResetTime") or "")


def reset_trace(client: BmcClient, step: TargetStep, kind: str) -> Found:
    before = next((m[len(EVIDENCE):] for m in reversed(step.messages)
                   if isinstance(m, str) and m.startswith(EVIDENCE)), None)  # the reading before the last send
    if before is None:  # the reading is written (flushed) before every send: none means never sent
        return Found(Trace.ABSENT, "no LastResetTime was recorded, so the reset was never sent")
    if not before:
        return Found(Trace.UNKNOWN, "the BMC did not report LastResetTime before the reset")
    now = last_reset(client, kind)
    if now and now != before:
        return Found(Trace.FOUND, f"LastResetTime {before} -> {now}")
    if now == before:
        return Found(Trace.ABSENT, f"LastResetTime still {now}")
    return Found(Trace.UNKNOWN, "the BMC does not report LastResetTime")


__all__ = ["EVIDENCE", "Found", "activate_trace", "last_reset", "pending_version", "reset_trace",
           "settle_seconds", "update_trace"]
