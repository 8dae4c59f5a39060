"""Redfish JSON bodies of one virtual BMC. @odata.id values are relative to the BMC's base URL
(``http://host:port/bmc/<id>``), as a real BMC's are relative to its host."""

import datetime as dt
import uuid

from .records import Component, Task
from .state import Bmc

R = "/redfish/v1"
UPDATE_SERVICE = f"{R}/UpdateService"
INVENTORY = f"{UPDATE_SERVICE}/FirmwareInventory"
SIMPLE_UPDATE = f"{UPDATE_SERVICE}/Actions/UpdateService.SimpleUpdate"
START_UPDATE = f"{UPDATE_SERVICE}/Actions/UpdateService.StartUpdate"
ACTIVATE = f"{UPDATE_SERVICE}/Actions/UpdateService.Activate"
MULTIPART = f"{UPDATE_SERVICE}/update-multipart"
TASKS = f"{R}/TaskService/Tasks"
SESSIONS = f"{R}/SessionService/Sessions"


def link(odata_id: str) -> dict:
    return {"@odata.id": odata_id}


def collection(odata_id: str, odata_type: str, name: str, member_ids: list[str]) -> dict:
    return {"@odata.id": odata_id, "@odata.type": f"#{odata_type}.{odata_type}", "Name": name,
            "Members": [link(f"{odata_id}/{m}") for m in member_ids], "Members@odata.count": len(member_ids)}


def service_root(bmc: Bmc) -> dict:
    return {
        "@odata.id": f"{R}/", "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot", "Id": "RootService",
        "Name": "Root Service", "RedfishVersion": "1.17.0", "UUID": _uuid(bmc.id),
        "Product": bmc.profile.model, "Vendor": bmc.profile.manufacturer,
        "Systems": link(f"{R}/Systems"), "Chassis": link(f"{R}/Chassis"), "Managers": link(f"{R}/Managers"),
        "UpdateService": link(UPDATE_SERVICE), "TaskService": link(f"{R}/TaskService"),
        "SessionService": link(f"{R}/SessionService"), "Links": {"Sessions": link(SESSIONS)},
    }


def system(bmc: Bmc, system_id: str) -> dict:
    odata_id = f"{R}/Systems/{system_id}"
    bios = bmc.components.get("BIOS")
    return {
        "@odata.id": odata_id, "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem", "Id": system_id,
        "Name": "System", "SystemType": "Physical", "Manufacturer": bmc.profile.manufacturer,
        "Model": bmc.profile.model, "PowerState": bmc.power[system_id],
        "BiosVersion": bios.version if bios else None, "Status": {"State": "Enabled", "Health": "OK"},
        "LastResetTime": _iso(bmc.wall(bmc.last_reset)),
        "Links": {"Chassis": [link(f"{R}/Chassis/{c}") for c in bmc.profile.chassis],
                  "ManagedBy": [link(f"{R}/Managers/{bmc.profile.managers[0]}")]},
        "Actions": {"#ComputerSystem.Reset": _reset_action(f"{odata_id}/Actions/ComputerSystem.Reset",
                                                           ["On", "ForceOff", "GracefulShutdown", "GracefulRestart",
                                                            "ForceRestart", "PowerCycle", "Nmi"])},
    }


def chassis(bmc: Bmc, chassis_id: str) -> dict:
    odata_id = f"{R}/Chassis/{chassis_id}"
    power = "On" if any(p == "On" for p in bmc.power.values()) else "Off"
    return {
        "@odata.id": odata_id, "@odata.type": "#Chassis.v1_23_0.Chassis", "Id": chassis_id, "Name": "Chassis",
        "ChassisType": "RackMount", "Manufacturer": bmc.profile.manufacturer, "Model": bmc.profile.model,
        "PowerState": power, "Status": {"State": "Enabled", "Health": "OK"},
        "Links": {"ComputerSystems": [link(f"{R}/Systems/{s}") for s in bmc.profile.systems]},
        "Actions": {"#Chassis.Reset": _reset_action(f"{odata_id}/Actions/Chassis.Reset",
                                                    ["On", "ForceOff", "PowerCycle", "FullPowerCycle"])},
    }


def manager(bmc: Bmc, manager_id: str, now: float) -> dict:
    """One manager: the host BMC (the first), or on HGX the HMC (``HGX_BMC_0``), each with its own LastResetTime
    (one-second resolution, on the BMC's own clock, as real BMCs report it) and the BMC's DateTime."""
    odata_id = f"{R}/Managers/{manager_id}"
    firmware = next((c.version for c in bmc.components.values() if c.spec.manager == manager_id), None)
    return {
        "@odata.id": odata_id, "@odata.type": "#Manager.v1_17_0.Manager", "Id": manager_id,
        "Name": "Manager" if manager_id == bmc.profile.managers[0] else "HGX Management Controller",
        "ManagerType": "BMC", "FirmwareVersion": firmware, "Status": {"State": "Enabled", "Health": "OK"},
        "DateTime": _iso(bmc.wall(now)), "DateTimeLocalOffset": "+00:00",
        "LastResetTime": _iso(bmc.wall(bmc.manager_reset.get(manager_id, bmc.last_reset))),
        "Actions": {"#Manager.Reset": _reset_action(f"{odata_id}/Actions/Manager.Reset",
                                                    ["GracefulRestart", "ForceRestart"])},
    }


def update_service(bmc: Bmc) -> dict:
    busy = [link(f"{INVENTORY}/{c.spec.id}") for c in bmc.components.values() if c.busy_task is not None]
    return {
        "@odata.id": UPDATE_SERVICE, "@odata.type": "#UpdateService.v1_17_0.UpdateService", "Id": "UpdateService",
        "Name": "Update Service", "ServiceEnabled": True, "Status": {"State": "Enabled", "Health": "OK"},
        "FirmwareInventory": link(INVENTORY), "MultipartHttpPushUri": MULTIPART,
        "HttpPushUriTargetsBusy": bool(busy),
        "Actions": {
            "#UpdateService.SimpleUpdate": {
                "target": SIMPLE_UPDATE, "TransferProtocol@Redfish.AllowableValues": ["HTTP", "HTTPS"],
                "@Redfish.OperationApplyTimeSupport": {
                    "@odata.type": "#Settings.v1_4_0.OperationApplyTimeSupport",
                    "SupportedValues": ["Immediate", "OnReset", "OnStartUpdateRequest"]}},
            "#UpdateService.StartUpdate": {"target": START_UPDATE},
            "#UpdateService.Activate": {"target": ACTIVATE},
        },
    }


def inventory_item(bmc: Bmc, component: Component) -> dict:
    spec = component.spec
    odata_id = f"{INVENTORY}/{spec.id}"
    body = {
        "@odata.id": odata_id, "@odata.type": spec.odata_type, "Id": spec.id, "Name": spec.name,
        "Manufacturer": spec.manufacturer, "Version": component.version, "Updateable": spec.updateable,
        "WriteProtected": False, "Status": {"State": "Enabled", "Health": "OK"},
        "RelatedItem": [link(spec.related_item)], "RelatedItem@odata.count": 1,
    }
    if spec.description:
        body["Description"] = spec.description
    if spec.software_id:
        body["SoftwareId"] = spec.software_id
    return body


def task(task: Task, now: float, bmc: Bmc) -> dict:
    """A task as real BMCs show it: no ``Payload``; the image, components and versions only in ``Messages``;
    ``StartTime``/``EndTime`` on the BMC's own clock, one-second resolution."""
    odata_id = f"{TASKS}/{task.id}"
    state = task.state
    if not task.done:
        state = "New" if now <= task.created else "Running"
    body = {
        "@odata.id": odata_id, "@odata.type": "#Task.v1_7_4.Task", "Id": str(task.id), "Name": "Update Task",
        "TaskState": state, "TaskStatus": task.status, "PercentComplete": task.percent(now),
        "TaskMonitor": f"{odata_id}/Monitor", "StartTime": _iso(bmc.wall(task.created)),
        "Messages": task.messages,
    }
    if task.done:
        body["EndTime"] = _iso(bmc.wall(task.ended or now))
    return body


def session(session_id: str) -> dict:
    return {"@odata.id": f"{SESSIONS}/{session_id}", "@odata.type": "#Session.v1_7_0.Session", "Id": session_id,
            "Name": "User Session", "UserName": "fleet"}


def _reset_action(target: str, allowed: list[str]) -> dict:
    return {"target": target, "ResetType@Redfish.AllowableValues": allowed}


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC).isoformat(timespec="seconds")


def _uuid(text: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"fleet-bmc-simulator:{text}"))
