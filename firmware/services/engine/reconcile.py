"""What the BMC shows about a side effect whose outcome we do not know (an ambiguous send, or a worker that died
after it marked the request as leaving): FOUND, ABSENT or UNKNOWN (``fleet.execution.Trace``).

Standard Redfish only (DMTF properties; what the captures of real BMCs in samples/redfish show), asked only after
the settle period (``settle_seconds``: longer than the BMC class's worst processing time, so a request the BMC
took late has landed by then):
- update: a task naming this image (or version) and these targets in its ``Messages[].MessageArgs`` (FOUND,
  adopted; tasks already accounted for by other steps excluded); the items at the new version (FOUND); no such
  task while the BMC class is known to keep finished tasks longer than the time since the send
  (``FLEET_BMC_TASK_RETENTION_SECONDS_BY_CLASS``: ABSENT, the BMC would still show it); else UNKNOWN (tasks are
  purged after they finish on many BMCs: their absence proves nothing);
- Activate/StartUpdate: FOUND when every item already reports its new version (an image that needs no reset is
  active at once); otherwise UNKNOWN: the standard exposes no staged state, so nothing can prove it did not land.
  It is never sent again on that: the target waits a longer settle, is asked again, then is held for a person
  (``firmware.services.rollout.rollout_target_resolve`` records what the person found on the BMC);
- reset: one reading per reset resource (each manager for a BMC reset; the system otherwise), taken just before
  the send: ``LastResetTime`` and the BMC's ``DateTime``. LastResetTime moved (FOUND); unchanged while the
  reading was taken at least two of the BMC's seconds after that LastResetTime (ABSENT: a reset would show a
  later second); no reading recorded (ABSENT: the reading is flushed before the send, so it was never sent);
  otherwise (no LastResetTime, no DateTime, same second) UNKNOWN. BMC times are compared only with the same
  BMC's earlier reading, at its one-second resolution, never with a worker's or the database's clock.
A BMC that cannot be read raises ``BmcError`` (infra): the caller comes back later, within its attempts.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from firmware.models import TargetStep, version_key
from firmware.redfish import BmcClient, TaskInfo
from fleet.execution import Trace

EVIDENCE = "last_reset="
RESOLUTION_SECONDS = 1.0  # what real BMCs report LastResetTime/DateTime to (ISO 8601 without fractions)


@dataclass
class Found:
    trace: Trace
    evidence: str
    task: TaskInfo | None = None


def settle_seconds(bmc_class: str) -> float:
    """How long after an unanswered request the BMC is asked what it did (per BMC class)."""
    per_class = getattr(settings, "FLEET_BMC_SETTLE_SECONDS_BY_CLASS", {}) or {}
    return float(per_class.get(bmc_class, settings.FLEET_BMC_SETTLE_SECONDS))


def unknown_settle_seconds(bmc_class: str) -> float:
    """After an UNKNOWN, how long more before the BMC is asked again (then the target is held for a person)."""
    return float(getattr(settings, "FLEET_BMC_UNKNOWN_SETTLE_FACTOR", 3.0)) * settle_seconds(bmc_class)


def task_retention_seconds(bmc_class: str) -> float:
    """How long this BMC class is known to keep a finished task in its task collection (0: not known)."""
    per_class = getattr(settings, "FLEET_BMC_TASK_RETENTION_SECONDS_BY_CLASS", {}) or {}
    return float(per_class.get(bmc_class, getattr(settings, "FLEET_BMC_TASK_RETENTION_SECONDS", 0.0)))


def update_trace(client: BmcClient, item: dict[str, Any], *, exclude: set[str], elapsed: float,
                 bmc_class: str) -> Found:
    """``elapsed``: seconds on the database's clock since the request was marked as leaving."""
    task = client.find_update_task(image_uri=item["image"], targets=item["targets"], version=item["version"],
                                   exclude=exclude)
    if task is not None:
        return Found(Trace.FOUND, f"task {task.uri} {task.state} names {item['version']} for "
                                  f"{', '.join(item['targets'][:3])}", task)
    docs = client.inventory(item["targets"])
    wanted = version_key(item["version"])
    if all(version_key(str(d.get("Version") or "")) == wanted for d in docs):
        return Found(Trace.FOUND, "inventory at the new version")
    retention = task_retention_seconds(bmc_class)
    if retention and elapsed < retention:
        return Found(Trace.ABSENT, f"no task names {item['version']} for these targets {elapsed:.0f}s after the "
                                   f"send, and this BMC class keeps finished tasks {retention:.0f}s")
    return Found(Trace.UNKNOWN, f"no task names {item['version']} for these targets (the BMC may have purged "
                                f"it), inventory still at the old version")


def activate_trace(client: BmcClient, work: list[dict[str, Any]]) -> Found:
    """An unanswered Activate/StartUpdate: FOUND if every item is at its new version already, else UNKNOWN."""
    for item in work:
        wanted = version_key(item["version"])
        if not all(version_key(str(d.get("Version") or "")) == wanted for d in client.inventory(item["targets"])):
            return Found(Trace.UNKNOWN, f"Activate leaves no standard trace before the reset ({item['component']} "
                                        f"still below {item['version']}, staged images are not exposed)")
    return Found(Trace.FOUND, "inventory at the new versions")


def parse_time(text: str) -> dt.datetime | None:
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def reading(client: BmcClient, path: str) -> str:
    """The evidence line recorded (flushed) before a reset of ``path``'s resource is sent: its LastResetTime and
    the BMC's DateTime (a system has none: the first manager's, the same BMC's clock)."""
    last, now = client.manager_times(path)
    if not now:
        managers = client.collection("Managers")
        if managers:
            _, now = client.manager_times(managers[0])
    return f"{EVIDENCE}{path}|{last}|{now}"


def recorded_reading(step: TargetStep) -> tuple[str, str, str] | None:
    """(path, LastResetTime, DateTime) of the reading recorded before the last send, or None."""
    line = next((m for m in reversed(step.messages) if isinstance(m, str) and m.startswith(EVIDENCE)), None)
    if line is None:
        return None
    parts = line[len(EVIDENCE):].split("|")
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    return "", parts[0], ""  # a reading recorded before per-manager evidence (LastResetTime only)


def reset_trace(client: BmcClient, step: TargetStep, path: str) -> Found:
    before = recorded_reading(step)
    if before is None:  # the reading is written (flushed) before every send: none means never sent
        return Found(Trace.ABSENT, "no LastResetTime was recorded, so the reset was never sent")
    read_path, last_before, clock_before = before
    if not last_before:
        return Found(Trace.UNKNOWN, "the BMC did not report LastResetTime before the reset")
    last_now, _ = client.manager_times(read_path or path)
    if not last_now:
        return Found(Trace.UNKNOWN, "the BMC does not report LastResetTime")
    if last_now != last_before:
        return Found(Trace.FOUND, f"{read_path or path} LastResetTime {last_before} -> {last_now}")
    then, at = parse_time(last_before), parse_time(clock_before)
    if then is not None and at is not None and (at - then).total_seconds() >= 2 * RESOLUTION_SECONDS:
        return Found(Trace.ABSENT, f"{read_path or path} LastResetTime still {last_now} (read at the BMC's "
                                   f"{clock_before}, before the send)")
    return Found(Trace.UNKNOWN, f"{read_path or path} LastResetTime {last_now} unchanged, but the reading before "
                                f"the send was within the BMC's resolution of it (DateTime {clock_before or 'absent'})")


__all__ = ["EVIDENCE", "Found", "activate_trace", "reading", "recorded_reading", "reset_trace", "settle_seconds",
           "task_retention_seconds", "unknown_settle_seconds", "update_trace"]
