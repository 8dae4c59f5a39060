"""Routes of one virtual BMC's Redfish service: ``dispatch`` maps (method, path, body) to a response.

The caller holds ``bmc.lock``. The version an update image carries comes from the simulator, never from the
request: the ``images`` config entry (``POST /_sim/config``) for the ImageURI, then for its file name; else the
ImageURI's ``version`` query parameter; else the file name without its extension (``.../96.00.9F.00.01.fwpkg`` ->
``96.00.9F.00.01``). An ``images`` entry may be a bundle, {component Id: version}: each target gets its version
there (a target it does not name, the version from the URI), and an update with no Targets updates the
components it names.
"""

import base64
import binascii
import json
import secrets
from email import policy
from email.parser import BytesParser
from urllib.parse import parse_qs, urlsplit

from . import resources as res
from .messages import RedfishError
from .state import Bmc, Simulator

Response = tuple[int, dict | None, dict[str, str]]
_EXTENSIONS = (".fwpkg", ".bin", ".img", ".pldm", ".rom", ".cap", ".tar", ".gz", ".zip", ".hpm")


def dispatch(sim: Simulator, bmc: Bmc, method: str, parts: tuple[str, ...], body: bytes,
             content_type: str) -> Response:
    """``parts`` is the path below /redfish/v1, split on '/', e.g. ("Systems", "1")."""
    now = sim.settle(bmc)
    match method, parts:
        case "GET", ():
            return _ok(res.service_root(bmc))
        case "GET", (kind,) if kind in _MEMBERS:
            odata_type, _action, _default = _MEMBERS[kind]
            return _ok(res.collection(f"{res.R}/{kind}", odata_type, kind, list(_members(bmc, kind))))
        case "GET", (kind, member_id) if kind in _MEMBERS and member_id in _members(bmc, kind):
            if kind in _RENDER_NOW:
                return _ok(_RENDER[kind](bmc, member_id, now))
            return _ok(_RENDER[kind](bmc, member_id))
        case "POST", (kind, member_id, "Actions", action) if kind in _MEMBERS and action == _MEMBERS[kind][1] \
                and member_id in _members(bmc, kind):
            _RESET[kind](sim, bmc, member_id, _json(body).get("ResetType", _MEMBERS[kind][2]))
            return 204, None, {}
        case "GET", ("UpdateService",):
            return _ok(res.update_service(bmc))
        case "POST", ("UpdateService", "Actions", "UpdateService.SimpleUpdate" | "SimpleUpdate"):
            data = _json(body)
            if not data.get("ImageURI"):
                raise RedfishError(400, "Base.1.13.0.ActionParameterMissing", "UpdateService.SimpleUpdate",
                                   "ImageURI")
            return _update(sim, bmc, data, str(data["ImageURI"]), now)
        case "POST", ("UpdateService", "update-multipart"):
            params, filename = _multipart(content_type, body)
            return _update(sim, bmc, params, filename, now)
        case "POST", ("UpdateService", "Actions", "UpdateService.StartUpdate"):
            sim.start_update(bmc, None)
            return 204, None, {}
        case "POST", ("UpdateService", "Actions", "UpdateService.Activate"):
            targets = _json(body).get("Targets")
            sim.start_update(bmc, [_target_id(t) for t in targets] if targets else None)
            return 204, None, {}
        case "GET", ("UpdateService", "FirmwareInventory"):
            return _ok(res.collection(res.INVENTORY, "SoftwareInventoryCollection", "Firmware Inventory Collection",
                                      list(bmc.components)))
        case "GET", ("UpdateService", "FirmwareInventory", component_id) if component_id in bmc.components:
            return _ok(res.inventory_item(bmc, bmc.components[component_id]))
        case "POST", ("UpdateService", "FirmwareInventory", component_id, "Actions",
                      "SoftwareInventory.Activate") if component_id in bmc.components:
            sim.start_update(bmc, [component_id])
            return 204, None, {}
        case "GET", ("TaskService",):
            return _ok({"@odata.id": f"{res.R}/TaskService", "@odata.type": "#TaskService.v1_2_0.TaskService",
                        "Id": "TaskService", "Name": "Task Service", "ServiceEnabled": True,
                        "Tasks": res.link(res.TASKS)})
        case "GET", ("TaskService", "Tasks"):
            return _ok(res.collection(res.TASKS, "TaskCollection", "Task Collection", [str(i) for i in bmc.tasks]))
        case "GET", ("TaskService", "Tasks", task_id, "Monitor"):
            # A task monitor answers 202 while the task runs, the task once when it is done, then 404 (DSP0266).
            task = _task(bmc, task_id)
            if task.done:
                if task.monitor_read:
                    raise RedfishError(404, "Base.1.13.0.ResourceNotFound", "TaskMonitor", task_id)
                task.monitor_read = True
                return 200, res.task(task, now, bmc), {}
            return 202, res.task(task, now, bmc), {"Retry-After": str(sim.config.retry_after_seconds)}
        case "GET", ("TaskService", "Tasks", task_id):
            task = _task(bmc, task_id)
            headers = {} if task.done else {"Retry-After": str(sim.config.retry_after_seconds)}
            return 200, res.task(task, now, bmc), headers
        case "DELETE", ("TaskService", "Tasks", task_id):
            sim.cancel_task(bmc, _task(bmc, task_id))
            return 204, None, {}
        case "GET", ("SessionService",):
            return _ok({"@odata.id": f"{res.R}/SessionService", "@odata.type": "#SessionService.v1_1_9.SessionService",
                        "Id": "SessionService", "Name": "Session Service", "ServiceEnabled": True,
                        "SessionTimeout": 1800, "Sessions": res.link(res.SESSIONS)})
        case "GET", ("SessionService", "Sessions"):
            return _ok(res.collection(res.SESSIONS, "SessionCollection", "Sessions", list(bmc.sessions.values())))
        case "POST", ("SessionService", "Sessions"):
            data = _json(body)
            if not credentials_ok(sim, str(data.get("UserName", "")), str(data.get("Password", ""))):
                raise RedfishError(401, "Base.1.13.0.NoValidSession")
            session_id, token = str(bmc.next_session_id), secrets.token_hex(16)
            bmc.next_session_id += 1
            bmc.sessions[token] = session_id
            return 201, res.session(session_id), {"X-Auth-Token": token, "Location": f"{res.SESSIONS}/{session_id}"}
        case "GET" | "DELETE", ("SessionService", "Sessions", session_id) if session_id in bmc.sessions.values():
            if method == "DELETE":
                bmc.sessions = {t: s for t, s in bmc.sessions.items() if s != session_id}
                return 204, None, {}
            return _ok(res.session(session_id))
    raise RedfishError(404, "Base.1.13.0.ResourceNotFound", "Resource", "/".join((res.R, *parts)))


# collection -> (collection type, reset action, default ResetType)
_MEMBERS = {"Systems": ("ComputerSystemCollection", "ComputerSystem.Reset", "On"),
            "Chassis": ("ChassisCollection", "Chassis.Reset", "PowerCycle"),
            "Managers": ("ManagerCollection", "Manager.Reset", "GracefulRestart")}
_RENDER = {"Systems": res.system, "Chassis": res.chassis, "Managers": res.manager}
_RENDER_NOW = {"Managers"}  # renderers that show the BMC's clock
_RESET = {"Systems": Simulator.reset_system, "Chassis": Simulator.reset_chassis, "Managers": Simulator.reset_manager}


def _members(bmc: Bmc, kind: str) -> tuple[str, ...]:
    return getattr(bmc.profile, kind.lower())


def authorized(sim: Simulator, bmc: Bmc, method: str, parts: tuple[str, ...], headers) -> bool:
    config = sim.config
    if not config.require_auth or (method == "GET" and not parts) or (
            method == "POST" and parts == ("SessionService", "Sessions")):
        return True
    token = headers.get("X-Auth-Token")
    if token:
        return token in bmc.sessions
    auth = headers.get("Authorization") or ""
    if not auth.startswith("Basic "):
        return False
    if not config.username:
        return True
    try:
        user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    return credentials_ok(sim, user, password)


def credentials_ok(sim: Simulator, user: str, password: str) -> bool:
    config = sim.config
    return not config.username or (secrets.compare_digest(user, config.username)
                                   and secrets.compare_digest(password, config.password))


def _update(sim: Simulator, bmc: Bmc, params: dict, image: str, now: float) -> Response:
    carried = image_version(image, sim.config.images)
    bundle = carried if isinstance(carried, dict) else {}
    targets = [_target_id(t) for t in params.get("Targets") or []] or list(bundle)
    if not targets:
        raise RedfishError(400, "Base.1.13.0.ActionParameterMissing", "UpdateService.SimpleUpdate", "Targets")
    version = carried if isinstance(carried, str) else _uri_version(image)
    task = sim.update(bmc, targets=targets, image=image, versions={t: bundle.get(t, version) for t in targets},
                      apply_time=params.get("@Redfish.OperationApplyTime", "Immediate"),
                      stage=bool(params.get("Stage", False)))
    return 202, res.task(task, now, bmc), {"Location": f"{res.TASKS}/{task.id}"}


def image_version(image: str, images: dict) -> str | dict[str, str]:
    """The version ``image`` carries (a bundle's: {component Id: version}), as the module docstring says."""
    filename = urlsplit(image).path.rsplit("/", 1)[-1]
    return images.get(image) or images.get(filename) or _uri_version(image)


def _uri_version(image: str) -> str:
    url = urlsplit(image)
    filename = url.path.rsplit("/", 1)[-1]
    query = parse_qs(url.query).get("version")
    if query:
        return query[0]
    while filename.lower().endswith(_EXTENSIONS):
        filename = filename.rsplit(".", 1)[0]
    return filename


def _target_id(target: object) -> str:
    odata_id = target.get("@odata.id", "") if isinstance(target, dict) else str(target)
    return odata_id.rstrip("/").rsplit("/", 1)[-1]


def _task(bmc: Bmc, task_id: str):
    task = bmc.tasks.get(int(task_id)) if task_id.isdigit() else None
    if task is None:
        raise RedfishError(404, "Base.1.13.0.ResourceNotFound", "Task", task_id)
    return task


def json_body(body: bytes) -> dict:
    """A request's JSON object (a Redfish 400 MalformedJSON otherwise)."""
    return _json(body)


def _json(body: bytes) -> dict:
    if not body:
        return {}
    try:
        data = json.loads(body)
    except ValueError:
        raise RedfishError(400, "Base.1.13.0.MalformedJSON") from None
    if not isinstance(data, dict):
        raise RedfishError(400, "Base.1.13.0.MalformedJSON")
    return data


def _multipart(content_type: str, body: bytes) -> tuple[dict, str]:
    """(UpdateParameters as a dict, the UpdateFile's file name) of a multipart/form-data push."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = BytesParser(policy=policy.HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise RedfishError(400, "Base.1.13.0.ActionParameterMissing", "MultipartHttpPushUri", "UpdateFile")
    parts = {part.get_param("name", header="content-disposition"): part for part in message.iter_parts()}
    if "UpdateFile" not in parts:
        raise RedfishError(400, "Base.1.13.0.ActionParameterMissing", "MultipartHttpPushUri", "UpdateFile")
    params = parts.get("UpdateParameters")
    data = _json(params.get_payload(decode=True) or b"") if params is not None else {}
    return data, parts["UpdateFile"].get_filename() or "UpdateFile"


def _ok(body: dict) -> Response:
    return 200, body, {}
