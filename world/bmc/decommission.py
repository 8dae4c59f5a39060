"""The decommission plugin of the BMC simulator (``world.bmc``): what an HGX server's BMC offers for sanitizing.

Load it with ``python -m world.bmc --plugin world.bmc.decommission`` or
``SimulatorServer(plugins=["world.bmc.decommission"])``. Pure stdlib; no Django. Resources below ``/redfish/v1``:

- ``Systems/1/Storage/1/Drives/<n>``: NVMe drives (SerialNumber, Model) with ``#Drive.SecureErase`` -> a task.
- ``Managers/<1|HGX_BMC_0>/LogServices/Log[/Entries]`` with ``#LogService.ClearLog`` (leaves a "Log cleared"
  entry, as real BMCs do).
- ``Systems/1/Bios`` with ``#Bios.ResetBios`` (attributes back to their defaults).
- ``Chassis/1/NetworkAdapters/DPU_0`` (BlueField DPU) with ``#NetworkAdapter.ResetSettingsToDefault`` -> a task.
- ``Chassis/1/TrustedComponents/TPM_0``: the TPM (cleared in-band by the host agent, not here).
- ``Managers/1/Actions/Manager.ResetToDefaults`` (``ResetType`` ResetAll only, as OpenBMC): opens a reboot window
  (the management path drops) and moves the manager's LastResetTime.
- ``Systems/1/Actions/ComputerSystem.Reset`` is the core's (ForceOff: the volatile-media power-off evidence).

Every action resource reports ``Oem.FleetSim.LastAction`` {Name, Time, Task}: the simulator's stand-in for the
device-specific evidence a real BMC gives (a drive's sanitize status, the cleared log's entry, BIOS defaults), so
an ambiguous send can be reconciled from the device's own state. Faults per BMC: ``POST
Oem/FleetSim/Decommission {"fail": {"<resource path>": n}, "erase_seconds": s}`` makes the next n actions on that
resource fail on the device (task Exception).
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from world.bmc import Plugin, RedfishError
from world.bmc.resources import link

R = "/redfish/v1"
DRIVES = 2
ERASE_SECONDS = float(os.environ.get("DECOMMISSION_SIM_ERASE_SECONDS", "1"))
BIOS_DEFAULTS = {"BootMode": "Uefi", "SecureBoot": "Enabled", "TpmState": "Enabled", "IpmiOverLan": "Enabled"}


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC).isoformat(timespec="milliseconds")


def _task_answer(task_id: int) -> tuple[int, dict, dict[str, str]]:
    uri = f"{R}/TaskService/Tasks/{task_id}"
    return 202, {"@odata.id": uri}, {"Location": uri}


class DecommissionPlugin(Plugin):
    name = "decommission"

    def on_bmc_created(self, sim, bmc) -> None:  # type: ignore[no-untyped-def]
        n = bmc.id
        bmc.extra[self.name] = {
            "drives": {str(i): {"serial": f"{n}-NVME{i}", "model": "SAMSUNG MZWLO3T8HCLS-00A07",
                                "manufacturer": "Samsung", "erased": False} for i in range(DRIVES)},
            "logs": {m: [{"Id": str(i), "Message": f"event {i}", "Created": _iso(sim.clock() + bmc.wall_offset)}
                         for i in range(1, 4)] for m in ("1", "HGX_BMC_0")},
            "bios": {**BIOS_DEFAULTS, "SecureBoot": "Disabled", "BootOrderCustom": "pxe,nvme0"},
            "dpu": {"serial": f"{n}-DPU0", "factory": False},
            "last": {}, "fail": {}, "erase_seconds": ERASE_SECONDS,
        }

    # --- helpers ----------------------------------------------------------------------------------------------
    def _state(self, bmc) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        return bmc.extra[self.name]

    def _act(self, sim, bmc, resource: str, name: str, seconds: float, on_done) -> int | None:  # type: ignore[no-untyped-def]
        """Record the action on ``resource``; start a task when ``seconds`` is not None (else do it now)."""
        state = self._state(bmc)
        failing = state["fail"].get(resource, 0) > 0
        if failing:
            state["fail"][resource] -= 1
        last = {"Name": name, "Time": _iso(sim.clock() + bmc.wall_offset), "Task": None}
        state["last"][resource] = last
        if seconds is None:
            if failing:
                raise RedfishError(500, "Base.1.13.0.InternalError")
            on_done()
            return None
        holder: dict[str, Any] = {}

        def fail(task) -> None:  # type: ignore[no-untyped-def]
            task.state, task.status = "Exception", "Critical"
            task.messages.append({"MessageId": "Base.1.13.0.GeneralError", "Message": f"{name} failed on the device"})

        def done() -> None:
            if failing:
                fail(holder["task"])
            else:
                on_done()

        if seconds <= 0:  # finished inside new_task: apply the outcome here
            task = sim.new_task(bmc, name=name, seconds=0)
            fail(task) if failing else on_done()
        else:
            task = sim.new_task(bmc, name=name, seconds=seconds, on_done=done)
            holder["task"] = task
        last["Task"] = f"{R}/TaskService/Tasks/{task.id}"
        return task.id

    def _oem(self, bmc, resource: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        return {"FleetSim": {"LastAction": self._state(bmc)["last"].get(resource)}}

    # --- routes -----------------------------------------------------------------------------------------------
    def route(self, sim, bmc, method, parts, body, raw):  # type: ignore[no-untyped-def]  # noqa: C901, PLR0911
        state = self._state(bmc)
        path = "/".join(parts)
        match method, parts:
            case "GET", ("Systems", "1", "Storage"):
                return 200, {"@odata.id": f"{R}/{path}", "Members": [link(f"{R}/{path}/1")]}, {}
            case "GET", ("Systems", "1", "Storage", "1"):
                return 200, {"@odata.id": f"{R}/{path}", "Id": "1", "Name": "NVMe storage",
                             "Drives": [link(f"{R}/{path}/Drives/{i}") for i in state["drives"]]}, {}
            case "GET", ("Systems", "1", "Storage", "1", "Drives", d) if d in state["drives"]:
                drive = state["drives"][d]
                return 200, {"@odata.id": f"{R}/{path}", "Id": d, "SerialNumber": drive["serial"],
                             "Model": drive["model"], "Manufacturer": drive["manufacturer"], "Protocol": "NVMe",
                             "MediaType": "SSD", "Actions": {"#Drive.SecureErase": {
                                 "target": f"{R}/{path}/Actions/Drive.SecureErase",
                                 "SanitizationType@Redfish.AllowableValues": ["CryptographicErase", "BlockErase"]}},
                             "Oem": self._oem(bmc, path)}, {}
            case "POST", ("Systems", "1", "Storage", "1", "Drives", d, "Actions", "Drive.SecureErase") \
                    if d in state["drives"]:
                if body.get("SanitizationType", "CryptographicErase") not in ("CryptographicErase", "BlockErase"):
                    raise RedfishError(400, "Base.1.13.0.ActionParameterValueNotInList",
                                       str(body.get("SanitizationType")), "SanitizationType", "Drive.SecureErase")
                drive = state["drives"][d]
                task_id = self._act(sim, bmc, "/".join(parts[:6]), "Drive.SecureErase", state["erase_seconds"],
                                    lambda: drive.update(erased=True))
                return _task_answer(task_id)
            case "GET", ("Managers", m, "LogServices", "Log") if m in state["logs"]:
                return 200, {"@odata.id": f"{R}/{path}", "Id": "Log", "Entries": link(f"{R}/{path}/Entries"),
                             "Actions": {"#LogService.ClearLog": {"target": f"{R}/{path}/Actions/LogService.ClearLog"}},
                             "Oem": self._oem(bmc, path)}, {}
            case "GET", ("Managers", m, "LogServices", "Log", "Entries") if m in state["logs"]:
                return 200, {"@odata.id": f"{R}/{path}", "Members": state["logs"][m],
                             "Members@odata.count": len(state["logs"][m])}, {}
            case "POST", ("Managers", m, "LogServices", "Log", "Actions", "LogService.ClearLog") if m in state["logs"]:
                cleared = [{"Id": "1", "Message": "Log cleared", "Created": _iso(sim.clock() + bmc.wall_offset)}]
                self._act(sim, bmc, "/".join(parts[:4]), "LogService.ClearLog", None,
                          lambda: state["logs"].__setitem__(m, cleared))
                return 204, None, {}
            case "GET", ("Systems", "1", "Bios"):
                return 200, {"@odata.id": f"{R}/{path}", "Id": "Bios", "Attributes": dict(state["bios"]),
                             "Actions": {"#Bios.ResetBios": {"target": f"{R}/{path}/Actions/Bios.ResetBios"}},
                             "Oem": self._oem(bmc, path)}, {}
            case "POST", ("Systems", "1", "Bios", "Actions", "Bios.ResetBios"):
                self._act(sim, bmc, "Systems/1/Bios", "Bios.ResetBios", None,
                          lambda: state.__setitem__("bios", dict(BIOS_DEFAULTS)))
                return 204, None, {}
            case "GET", ("Chassis", "1", "NetworkAdapters", "DPU_0"):
                return 200, {"@odata.id": f"{R}/{path}", "Id": "DPU_0", "Model": "BlueField-3 B3220",
                             "Manufacturer": "NVIDIA", "SerialNumber": state["dpu"]["serial"],
                             "Actions": {"#NetworkAdapter.ResetSettingsToDefault": {
                                 "target": f"{R}/{path}/Actions/NetworkAdapter.ResetSettingsToDefault"}},
                             "Oem": self._oem(bmc, path)}, {}
            case "POST", ("Chassis", "1", "NetworkAdapters", "DPU_0", "Actions", "NetworkAdapter.ResetSettingsToDefault"):
                task_id = self._act(sim, bmc, "Chassis/1/NetworkAdapters/DPU_0", "NetworkAdapter.ResetSettingsToDefault",
                                    state["erase_seconds"], lambda: state["dpu"].update(factory=True))
                return _task_answer(task_id)
            case "GET", ("Chassis", "1", "TrustedComponents", "TPM_0"):
                return 200, {"@odata.id": f"{R}/{path}", "Id": "TPM_0", "TrustedComponentType": "Discrete",
                             "Manufacturer": "Infineon", "Model": "SLB9672", "SerialNumber": f"{bmc.id}-TPM0"}, {}
            case "POST", ("Managers", "1", "Actions", "Manager.ResetToDefaults"):
                if body.get("ResetType") != "ResetAll":
                    raise RedfishError(400, "Base.1.13.0.ActionParameterValueNotInList", str(body.get("ResetType")),
                                       "ResetType", "Manager.ResetToDefaults")
                self._act(sim, bmc, "Managers/1", "Manager.ResetToDefaults", None, lambda: None)
                bmc.last_reset = sim.clock()
                sim.reboot_window(bmc, float(sim.config.bmc_reset_seconds))
                return 204, None, {}
            case "POST", ("Oem", "FleetSim", "Decommission"):
                state["fail"].update({k: int(v) for k, v in body.get("fail", {}).items()})
                if "erase_seconds" in body:
                    state["erase_seconds"] = float(body["erase_seconds"])
                return 200, {"fail": state["fail"], "erase_seconds": state["erase_seconds"]}, {}
        return None

    def snapshot(self, sim, bmc) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        state = self._state(bmc)
        return {"decommission": {"drives_erased": {d: v["erased"] for d, v in state["drives"].items()},
                                 "dpu_factory": state["dpu"]["factory"], "bios": state["bios"],
                                 "logs": {m: len(v) for m, v in state["logs"].items()}, "last": state["last"]}}


PLUGIN = DecommissionPlugin()
