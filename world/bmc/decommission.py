"""The decommission plugin of the BMC simulator (``world.bmc``): what an HGX server's BMC offers for sanitizing,
answered in standard Redfish shapes only (no ``Oem`` objects in any answer), as real BMCs do.

Load it with ``python -m world.bmc --plugin world.bmc.decommission`` or
``SimulatorServer(plugins=["world.bmc.decommission"])``. Pure stdlib; no Django. Resources below ``/redfish/v1``
(``<system>``, ``<chassis>`` are the profile's first system and chassis, found through the collections):

- ``Systems/<system>/Storage/1/Drives/<n>``: NVMe drives with ``#Drive.SecureErase`` -> a task; while it runs the
  drive lists it in ``Operations`` (``Operation`` Sanitize, ``PercentageComplete``, ``AssociatedTask``).
- ``Systems/<system>/LogServices/EventLog/Entries[/<Id>]``: the event log (``LogEntry``: monotonic ``Id``, ``Created``
  at one-second resolution, ``MessageId`` from the TaskEvent registry - TaskStarted, TaskCompletedOK,
  TaskCompletedWarning (failed on the device) - with ``MessageArgs`` [task id] and ``Links.OriginOfCondition`` the resource the task works on).
  It outlives the tasks, which the core purges after they finish: the durable, standard trace of each task.
- ``Managers/<1|HGX_BMC_0>/LogServices/Log[/Entries]`` with ``#LogService.ClearLog`` (leaves one "Log cleared"
  entry with a new Id, as real BMCs do).
- ``Systems/<system>/Bios`` with ``#Bios.ResetBios`` (attributes back to their defaults).
- ``Chassis/<chassis>/NetworkAdapters/DPU_0`` (BlueField DPU) with ``#NetworkAdapter.ResetSettingsToDefault``
  -> a task.
- ``Chassis/<chassis>/TrustedComponents/TPM_0``: the TPM (cleared in-band by the host agent, not here).
- ``Managers/<first>/Actions/Manager.ResetToDefaults`` (``ResetType`` ResetAll only, as OpenBMC): the accounts
  go back to the factory's, so every later request with Fleet's credentials is answered 401; the BMC reboots
  (the core's reboot window) and its LastResetTime moves.
- ``Systems/<system>/Actions/ComputerSystem.Reset`` is the core's (ForceOff: the volatile-media power-off).

Tests look inside and set device faults through the control API only: ``GET /_sim/bmcs/<id>`` (the
``decommission`` object, with how many times each action was carried out), the core's counters
(``GET /_sim/counters``) and ``POST /_sim/bmcs/<id>/decommission {"fail": {"<resource path>": n},
"erase_seconds": s, "event_log": false}``: the next n actions on that resource (its path below /redfish/v1) fail
on the device (task Exception); ``erase_seconds`` is how long erases and DPU resets run; ``event_log`` false makes
a BMC that keeps no event log.
"""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter
from typing import Any, ClassVar

from world.bmc import Plugin, RedfishError
from world.bmc.messages import error_body
from world.bmc.resources import link

R = "/redfish/v1"
DRIVES = 2
ERASE_SECONDS = float(os.environ.get("DECOMMISSION_SIM_ERASE_SECONDS", "1"))
BIOS_DEFAULTS = {"BootMode": "Uefi", "SecureBoot": "Enabled", "TpmState": "Enabled", "IpmiOverLan": "Enabled"}
EVENT_LOG_SIZE = 1000


def _iso(seconds: float) -> str:
    """Redfish date-times at one-second resolution, as BMCs report them."""
    return dt.datetime.fromtimestamp(int(seconds), tz=dt.UTC).isoformat()


def _task_answer(task_id: int) -> tuple[int, dict, dict[str, str]]:
    uri = f"{R}/TaskService/Tasks/{task_id}"
    return 202, {"@odata.id": uri}, {"Location": uri}


def _task_message(message_id: str, task_id: int, text: str) -> dict:
    return {"@odata.type": "#Message.v1_1_1.Message", "MessageId": f"TaskEvent.1.0.{message_id}",
            "MessageArgs": [str(task_id)], "Message": text.format(task_id),
            "Severity": "OK" if message_id in ("TaskStarted", "TaskCompletedOK") else "Warning"}


def _log_entry(entries: str, event: dict) -> dict:
    return {"@odata.id": f"{entries}/{event['Id']}", "@odata.type": "#LogEntry.v1_15_0.LogEntry", "Id": event["Id"],
            "EntryType": "Event", "Created": event["Created"], "Severity": event["Severity"],
            "Message": event["Message"], "MessageId": event["MessageId"], "MessageArgs": event["MessageArgs"],
            "Links": {"OriginOfCondition": link(event["origin"])}}


class DecommissionPlugin(Plugin):
    name = "decommission"
    index: ClassVar[dict[str, str]] = {
        "POST /_sim/bmcs/<id>/decommission": "{fail: {<resource path below /redfish/v1>: n}, erase_seconds, "
                                             "event_log}: the next n actions on that resource fail on the device"}

    def on_bmc_created(self, sim, bmc) -> None:  # type: ignore[no-untyped-def]
        n = bmc.id
        now = sim.clock() + bmc.wall_offset
        bmc.extra[self.name] = {
            "drives": {str(i): {"serial": f"{n}-NVME{i}", "model": "SAMSUNG MZWLO3T8HCLS-00A07",
                                "manufacturer": "Samsung", "erased": False, "task": None} for i in range(DRIVES)},
            "logs": {m: [{"Id": str(i), "Message": f"event {i}", "Created": _iso(now)} for i in range(1, 4)]
                     for m in bmc.profile.managers},
            "log_ids": 3,
            "events": [], "event_ids": 0, "event_log": True,
            "bios": {**BIOS_DEFAULTS, "SecureBoot": "Disabled", "BootOrderCustom": "pxe,nvme0"},
            "dpu": {"serial": f"{n}-DPU0", "factory": False},
            "done": Counter(), "fail": {}, "erase_seconds": ERASE_SECONDS, "factory_accounts": False,
        }

    # --- helpers ----------------------------------------------------------------------------------------------
    def _state(self, bmc) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        return bmc.extra[self.name]

    def _event(self, sim, bmc, message: dict, origin: str) -> None:  # type: ignore[no-untyped-def]
        state = self._state(bmc)
        if not state["event_log"]:
            return
        state["event_ids"] += 1
        state["events"].append({**message, "Id": str(state["event_ids"]), "Created": _iso(sim.clock() + bmc.wall_offset),
                                "origin": origin})
        del state["events"][:-EVENT_LOG_SIZE]

    def _act(self, sim, bmc, resource: str, name: str, seconds: float | None, on_done) -> int | None:  # type: ignore[no-untyped-def]
        """Carry out ``name`` on ``resource``; start a task when ``seconds`` is not None (else do it now)."""
        state = self._state(bmc)
        failing = state["fail"].get(resource, 0) > 0
        if failing:
            state["fail"][resource] -= 1
        origin = f"{R}/{resource}"
        if seconds is None:
            if failing:
                raise RedfishError(500, "Base.1.13.0.InternalError")
            on_done()
            state["done"][name] += 1
            return None
        holder: dict[str, Any] = {}

        def fail(task) -> None:  # type: ignore[no-untyped-def]
            task.state, task.status = "Exception", "Critical"
            task.messages.append({"@odata.type": "#Message.v1_1_1.Message", "MessageId": "Base.1.13.0.GeneralError",
                                  "Message": f"{name} failed on the device.", "Severity": "Critical"})
            message = _task_message("TaskCompletedWarning", task.id,
                                    "The task with Id '{}' has completed with warnings.")
            task.messages.append(message)
            self._event(sim, bmc, message, origin)

        def complete(task) -> None:  # type: ignore[no-untyped-def]
            on_done()
            state["done"][name] += 1
            message = _task_message("TaskCompletedOK", task.id, "The task with Id '{}' has completed.")
            task.messages.append(message)
            self._event(sim, bmc, message, origin)

        def done() -> None:
            fail(holder["task"]) if failing else complete(holder["task"])

        if seconds <= 0:  # finished inside new_task: apply the outcome here
            task = sim.new_task(bmc, name=name, seconds=0)
            started = _task_message("TaskStarted", task.id, "The task with Id '{}' has started.")
            task.messages.insert(0, started)
            self._event(sim, bmc, started, origin)
            fail(task) if failing else complete(task)
        else:
            task = sim.new_task(bmc, name=name, seconds=seconds, on_done=done)
            holder["task"] = task
            started = _task_message("TaskStarted", task.id, "The task with Id '{}' has started.")
            task.messages.insert(0, started)
            self._event(sim, bmc, started, origin)
        return task.id

    def _running(self, bmc, task_id: int | None):  # type: ignore[no-untyped-def]
        task = bmc.tasks.get(task_id) if task_id is not None else None
        return task if task is not None and not task.done else None

    # --- routes -----------------------------------------------------------------------------------------------
    def route(self, sim, bmc, method, parts, body, raw):  # type: ignore[no-untyped-def]  # noqa: C901, PLR0911, PLR0912
        state = self._state(bmc)
        if state["factory_accounts"] and parts:
            # ResetAll restored the factory accounts: Fleet's credentials are no longer known here.
            return 401, error_body("Base.1.13.0.NoValidSession"), {"WWW-Authenticate": 'Basic realm="BMC"'}
        system, chassis, manager = bmc.profile.systems[0], bmc.profile.chassis[0], bmc.profile.managers[0]
        path = "/".join(parts)
        match method, parts:
            case "GET", ("Systems", s, "Storage") if s == system:
                return 200, {"@odata.id": f"{R}/{path}", "@odata.type": "#StorageCollection.StorageCollection",
                             "Members": [link(f"{R}/{path}/1")], "Members@odata.count": 1}, {}
            case "GET", ("Systems", s, "Storage", "1") if s == system:
                return 200, {"@odata.id": f"{R}/{path}", "@odata.type": "#Storage.v1_15_0.Storage", "Id": "1",
                             "Name": "NVMe storage",
                             "Drives": [link(f"{R}/{path}/Drives/{i}") for i in state["drives"]]}, {}
            case "GET", ("Systems", s, "Storage", "1", "Drives", d) if s == system and d in state["drives"]:
                drive = state["drives"][d]
                answer = {"@odata.id": f"{R}/{path}", "@odata.type": "#Drive.v1_17_0.Drive", "Id": d,
                          "SerialNumber": drive["serial"], "Model": drive["model"],
                          "Manufacturer": drive["manufacturer"], "Protocol": "NVMe", "MediaType": "SSD",
                          "Status": {"State": "Enabled", "Health": "OK"},
                          "Actions": {"#Drive.SecureErase": {
                              "target": f"{R}/{path}/Actions/Drive.SecureErase",
                              "SanitizationType@Redfish.AllowableValues": ["CryptographicErase", "BlockErase"]}}}
                task = self._running(bmc, drive["task"])
                if task is not None:
                    answer["Operations"] = [{"Operation": "Sanitize", "OperationName": "Sanitize",
                                             "PercentageComplete": task.percent(sim.clock()),
                                             "AssociatedTask": link(f"{R}/TaskService/Tasks/{task.id}")}]
                    answer["Status"] = {"State": "Updating", "Health": "OK"}
                return 200, answer, {}
            case "POST", ("Systems", s, "Storage", "1", "Drives", d, "Actions", "Drive.SecureErase") \
                    if s == system and d in state["drives"]:
                if body.get("SanitizationType", "CryptographicErase") not in ("CryptographicErase", "BlockErase"):
                    raise RedfishError(400, "Base.1.13.0.ActionParameterValueNotInList",
                                       str(body.get("SanitizationType")), "SanitizationType", "Drive.SecureErase")
                drive = state["drives"][d]
                if self._running(bmc, drive["task"]) is not None:
                    raise RedfishError(409, "Base.1.13.0.ResourceInUse")
                task_id = self._act(sim, bmc, "/".join(parts[:6]), "Drive.SecureErase", state["erase_seconds"],
                                    lambda: drive.update(erased=True))
                drive["task"] = task_id
                return _task_answer(task_id)
            case "GET", ("Systems", s, "LogServices") if s == system:
                members = [link(f"{R}/{path}/EventLog")] if state["event_log"] else []
                return 200, {"@odata.id": f"{R}/{path}", "Members": members,
                             "Members@odata.count": len(members)}, {}
            case "GET", ("Systems", s, "LogServices", "EventLog") if s == system and state["event_log"]:
                return 200, {"@odata.id": f"{R}/{path}", "@odata.type": "#LogService.v1_5_0.LogService",
                             "Id": "EventLog", "LogEntryType": "Event", "MaxNumberOfRecords": EVENT_LOG_SIZE,
                             "OverWritePolicy": "WrapsWhenFull", "Entries": link(f"{R}/{path}/Entries")}, {}
            case "GET", ("Systems", s, "LogServices", "EventLog", "Entries") if s == system and state["event_log"]:
                members = [_log_entry(f"{R}/{path}", e) for e in state["events"]]
                return 200, {"@odata.id": f"{R}/{path}", "@odata.type": "#LogEntryCollection.LogEntryCollection",
                             "Members": members, "Members@odata.count": len(members)}, {}
            case "GET", ("Systems", s, "LogServices", "EventLog", "Entries", entry) if s == system \
                    and state["event_log"] and any(e["Id"] == entry for e in state["events"]):
                event = next(e for e in state["events"] if e["Id"] == entry)
                return 200, _log_entry(f"{R}/{'/'.join(parts[:-1])}", event), {}
            case "GET", ("Managers", m, "LogServices", "Log") if m in state["logs"]:
                return 200, {"@odata.id": f"{R}/{path}", "@odata.type": "#LogService.v1_5_0.LogService",
                             "Id": "Log", "Entries": link(f"{R}/{path}/Entries"),
                             "Actions": {"#LogService.ClearLog": {
                                 "target": f"{R}/{path}/Actions/LogService.ClearLog"}}}, {}
            case "GET", ("Managers", m, "LogServices", "Log", "Entries") if m in state["logs"]:
                return 200, {"@odata.id": f"{R}/{path}", "Members": state["logs"][m],
                             "Members@odata.count": len(state["logs"][m])}, {}
            case "POST", ("Managers", m, "LogServices", "Log", "Actions", "LogService.ClearLog") if m in state["logs"]:
                def clear() -> None:
                    state["log_ids"] += 1
                    state["logs"][m] = [{"Id": str(state["log_ids"]), "Message": "Log cleared",
                                         "Created": _iso(sim.clock() + bmc.wall_offset)}]
                self._act(sim, bmc, "/".join(parts[:4]), f"LogService.ClearLog {m}", None, clear)
                return 204, None, {}
            case "GET", ("Systems", s, "Bios") if s == system:
                return 200, {"@odata.id": f"{R}/{path}", "@odata.type": "#Bios.v1_2_0.Bios", "Id": "Bios",
                             "Attributes": dict(state["bios"]), "ResetBiosToDefaultsPending": False,
                             "Actions": {"#Bios.ResetBios": {"target": f"{R}/{path}/Actions/Bios.ResetBios"}}}, {}
            case "POST", ("Systems", s, "Bios", "Actions", "Bios.ResetBios") if s == system:
                self._act(sim, bmc, f"Systems/{s}/Bios", "Bios.ResetBios", None,
                          lambda: state.__setitem__("bios", dict(BIOS_DEFAULTS)))
                return 204, None, {}
            case "GET", ("Chassis", c, "NetworkAdapters", "DPU_0") if c == chassis:
                return 200, {"@odata.id": f"{R}/{path}", "@odata.type": "#NetworkAdapter.v1_9_0.NetworkAdapter",
                             "Id": "DPU_0", "Model": "BlueField-3 B3220", "Manufacturer": "NVIDIA",
                             "SerialNumber": state["dpu"]["serial"],
                             "Actions": {"#NetworkAdapter.ResetSettingsToDefault": {
                                 "target": f"{R}/{path}/Actions/NetworkAdapter.ResetSettingsToDefault"}}}, {}
            case "POST", ("Chassis", c, "NetworkAdapters", "DPU_0", "Actions",
                          "NetworkAdapter.ResetSettingsToDefault") if c == chassis:
                task_id = self._act(sim, bmc, f"Chassis/{c}/NetworkAdapters/DPU_0",
                                    "NetworkAdapter.ResetSettingsToDefault", state["erase_seconds"],
                                    lambda: state["dpu"].update(factory=True))
                return _task_answer(task_id)
            case "GET", ("Chassis", c, "TrustedComponents", "TPM_0") if c == chassis:
                return 200, {"@odata.id": f"{R}/{path}", "@odata.type": "#TrustedComponent.v1_1_0.TrustedComponent",
                             "Id": "TPM_0", "TrustedComponentType": "Discrete", "Manufacturer": "Infineon",
                             "Model": "SLB9672", "SerialNumber": f"{bmc.id}-TPM0"}, {}
            case "POST", ("Managers", m, "Actions", "Manager.ResetToDefaults") if m == manager:
                if body.get("ResetType") != "ResetAll":
                    raise RedfishError(400, "Base.1.13.0.ActionParameterValueNotInList", str(body.get("ResetType")),
                                       "ResetType", "Manager.ResetToDefaults")
                self._act(sim, bmc, f"Managers/{m}", "Manager.ResetToDefaults", None,
                          lambda: state.__setitem__("factory_accounts", True))
                bmc.last_reset = sim.clock()
                bmc.sessions.clear()
                sim.reboot_window(bmc, float(sim.config.bmc_reset_seconds))
                return 204, None, {}
        return None

    # --- the control API ----------------------------------------------------------------------------------------
    def control(self, sim, method, parts, data):  # type: ignore[no-untyped-def]
        match method, parts:
            case "POST", ("bmcs", bmc_id, "decommission") if sim.bmc(bmc_id):
                if not isinstance(data, dict) or not isinstance(data.get("fail", {}), dict):
                    raise ValueError("expected {fail: {<resource path>: n}, erase_seconds, event_log}")
                fail = {str(k).strip("/").removeprefix("redfish/v1/"): int(v) for k, v in data.get("fail", {}).items()}
                bmc = sim.bmc(bmc_id)
                with bmc.lock:
                    state = self._state(bmc)
                    state["fail"].update(fail)
                    if "erase_seconds" in data:
                        state["erase_seconds"] = float(data["erase_seconds"])
                    if "event_log" in data:
                        state["event_log"] = bool(data["event_log"])
                    return 200, {"fail": dict(state["fail"]), "erase_seconds": state["erase_seconds"],
                                 "event_log": state["event_log"]}
        return None

    def snapshot(self, sim, bmc) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        state = self._state(bmc)
        return {"decommission": {"drives_erased": {d: v["erased"] for d, v in state["drives"].items()},
                                 "dpu_factory": state["dpu"]["factory"], "bios": state["bios"],
                                 "logs": {m: len(v) for m, v in state["logs"].items()},
                                 "factory_accounts": state["factory_accounts"],
                                 "done": dict(state["done"]), "events": len(state["events"])}}


PLUGIN = DecommissionPlugin()
