"""Redfish driver for firmware updates, on the DMTF ``redfish`` library.

Every call is one short HTTP request (timeout ``FLEET_BMC_TIMEOUT``, no library retries: ``max_retry=0``, so a
POST is never sent twice by the library). Nothing here sleeps: a running task returns its ``Retry-After`` and
the engine comes back later. Errors are classified: :class:`BmcError` with ``error_class`` ``infra`` (unreachable,
timeout, 5xx, auth) or ``firmware`` (the BMC refused or failed the image).

    client = bmc_client(server.bmc_address)
    accepted = client.update(image_uri=..., targets=["HGX_FW_GPU_SXM_1"], method="simple_update", stage=True)
    task = client.task(accepted.task_uri)          # TaskInfo(state, done, ok, retry_after, messages)
    client.activate(["HGX_FW_GPU_SXM_1"]); client.reset("chassis_power_cycle")
    versions = client.versions(["HGX_FW_GPU_SXM_1"])   # {"HGX_FW_GPU_SXM_1": "96.00.9F.00.01"}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from firmware.models import ErrorClass
from fleet.redfish import (
    BmcError,
    ErrorKind,
    RedfishSession,
    error_text,
    message_ids,
    session_for,
    session_forget,
    strip_prefix,
)

ROOT = "/redfish/v1"
UPDATE_SERVICE = f"{ROOT}/UpdateService"
INVENTORY = f"{UPDATE_SERVICE}/FirmwareInventory"
DONE_STATES = {"Completed", "Exception", "Killed", "Cancelled", "Interrupted"}
OK_STATES = {"Completed"}
# What each activation kind needs, and the reset types (Redfish ResetType) that do it.
RESET_ACTIONS = {
    "bmc_reset": ("Managers", "Manager.Reset", "GracefulRestart"),
    "host_reboot": ("Systems", "ComputerSystem.Reset", "ForceRestart"),
    "chassis_power_cycle": ("Chassis", "Chassis.Reset", "PowerCycle"),
    "ac_power_cycle": ("Chassis", "Chassis.Reset", "FullPowerCycle"),
}


def resets_for(kinds: set[str]) -> list[str]:
    """The fewest resets that activate ``kinds``: an AC power cycle covers every other kind, a chassis power
    cycle covers a host reboot; a BMC reset goes last (the BMC is unreachable after it)."""
    kinds = set(kinds) - {"none", ""}
    if "ac_power_cycle" in kinds:
        return ["ac_power_cycle"]
    ordered = []
    if "chassis_power_cycle" in kinds:
        ordered.append("chassis_power_cycle")
    elif "host_reboot" in kinds:
        ordered.append("host_reboot")
    if "bmc_reset" in kinds:
        ordered.append("bmc_reset")
    return ordered


@dataclass
class TaskInfo:
    uri: str
    state: str
    status: str = "OK"
    percent: int | None = None
    retry_after: int | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.state in DONE_STATES

    @property
    def ok(self) -> bool:
        return self.state in OK_STATES and self.status in ("OK", "Warning", "")

    @property
    def message_ids(self) -> list[str]:
        return [str(m.get("MessageId", "")) for m in self.messages if m.get("MessageId")]

    def failure(self) -> str:
        critical = [m for m in self.messages if m.get("Severity") == "Critical" or "Failed" in str(m.get("MessageId"))]
        text = "; ".join(f"{m.get('MessageId')}: {m.get('Message', '')}".strip(": ") for m in critical[-3:])
        return f"task {self.state} ({self.status})" + (f": {text}" if text else "")


@dataclass
class UpdateAccepted:
    status: int
    task_uri: str
    task: TaskInfo | None  # when the reply carried the task (202 + body), or None


def bmc_client(bmc_address: str) -> BmcClient:
    """A client for this BMC on the process's shared Redfish session (``fleet.redfish.session_for``), kept with
    the session (its Managers / Systems / Chassis lists are read once)."""
    session = session_for(bmc_address)
    client = getattr(session, "firmware_client", None)
    if client is None:
        client = session.firmware_client = BmcClient(session=session)
    return client


def bmc_client_forget(bmc_address: str) -> None:
    session_forget(bmc_address)


class BmcClient:
    """Firmware's requests on a ``fleet.redfish.RedfishSession`` (transport, timeouts, error kinds)."""

    def __init__(self, url: str = "", *, username: str | None = None, password: str | None = None,
                 timeout: float | None = None, session: RedfishSession | None = None) -> None:
        self.session = session or RedfishSession(url, username=username or "", password=password or "",
                                                 timeout=timeout)
        self.url = self.session.url
        self.timeout = self.session.timeout
        self._collections: dict[str, list[str]] = {}  # Managers, Systems, Chassis: fixed for a BMC

    # --- plumbing ---------------------------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
                 files: Any = None) -> Any:
        return self.session.request(method, path, body, headers=headers, files=files)

    def get(self, path: str) -> dict[str, Any]:
        """A 404 is INFRA: every resource firmware reads was listed by its collection or is one Redfish requires,
        so a 404 is a BMC rebooting or restarting its Redfish service, never the firmware's fault."""
        response = self._request("GET", path)
        if response.status >= 400:
            kind = ErrorKind.INFRA if response.status == 404 else ErrorKind.DEFINITE
            raise BmcError(f"GET {path}: HTTP {response.status} {error_text(response)}", kind=kind,
                           status=response.status)
        return response.body

    def collection(self, name: str) -> list[str]:
        """The members of Managers, Systems or Chassis (fixed for a BMC: read once per client)."""
        if name not in self._collections:
            self._collections[name] = self.members(f"{ROOT}/{name}")
        return self._collections[name]

    def members(self, path: str) -> list[str]:
        return [m["@odata.id"] for m in self.get(path).get("Members", []) if "@odata.id" in m]

    # --- inventory --------------------------------------------------------------------------------------------
    def inventory_ids(self) -> list[str]:
        """Ids of the FirmwareInventory members (last segment of their ``@odata.id``)."""
        return [uri.rstrip("/").rsplit("/", 1)[-1] for uri in self.members(INVENTORY)]

    def inventory(self, ids: list[str]) -> list[dict[str, Any]]:
        """The SoftwareInventory documents of ``ids``."""
        return [self.get(f"{INVENTORY}/{i}") for i in ids]

    def versions(self, ids: list[str]) -> dict[str, str]:
        return {doc.get("Id") or i: str(doc.get("Version") or "") for i, doc in zip(ids, self.inventory(ids),
                                                                                      strict=True)}

    # --- update -----------------------------------------------------------------------------------------------
    def update(self, *, image_uri: str, targets: list[str], method: str = "simple_update", stage: bool = True,
               image: bytes | None = None, transfer_protocol: str = "") -> UpdateAccepted:
        """Request an update of ``targets`` (inventory ids). ``stage``: install now, activate later (SimpleUpdate
        ``Stage`` / multipart ``@Redfish.OperationApplyTime: OnStartUpdateRequest``)."""
        uris = [f"{INVENTORY}/{t}" for t in targets]
        if method == "multipart_push":
            if image is None:
                raise BmcError("multipart push needs the image bytes", error_class=ErrorClass.FIRMWARE)
            params: dict[str, Any] = {"Targets": uris, "ForceUpdate": False}
            if stage:
                params["@Redfish.OperationApplyTime"] = "OnStartUpdateRequest"
            filename = urlsplit(image_uri).path.rsplit("/", 1)[-1] or "image.bin"
            path = self.get(UPDATE_SERVICE).get("MultipartHttpPushUri") or f"{UPDATE_SERVICE}/update-multipart"
            files = {"UpdateParameters": (None, json.dumps(params), "application/json"),
                     "UpdateFile": (filename, image, "application/octet-stream")}
            response = self._request("POST", path, files=files)
        else:
            body = {"ImageURI": image_uri, "Targets": uris}
            if transfer_protocol or "://" not in image_uri:
                body["TransferProtocol"] = transfer_protocol or "HTTP"
            if stage:
                body["Stage"] = True
            response = self._request("POST", f"{UPDATE_SERVICE}/Actions/UpdateService.SimpleUpdate", body)
        not_up(response, "update")
        if response.status not in (200, 202, 204):
            raise BmcError(f"update refused: HTTP {response.status} {error_text(response)}",
                           error_class=ErrorClass.FIRMWARE, status=response.status,
                           message_ids=message_ids(response))
        data = _json(response)
        task_uri = response.task_location or data.get("@odata.id") or ""
        task_uri = urlsplit(task_uri).path if "://" in task_uri else task_uri
        task_uri = strip_prefix(self.url, task_uri)
        task = _task_info(task_uri, data, response.retry_after) if data.get("TaskState") else None
        return UpdateAccepted(status=response.status, task_uri=task_uri, task=task)

    def task(self, uri: str) -> TaskInfo:
        """The task behind ``uri`` (a task or its monitor). A 404 (the BMC rebooted and forgot it) raises
        BmcError with status 404."""
        response = self._request("GET", uri)
        if response.status == 404:
            raise BmcError(f"task {uri} not found", error_class=ErrorClass.INFRA, status=404)
        if response.status >= 400:
            raise BmcError(f"GET {uri}: HTTP {response.status}", status=response.status)
        return _task_info(uri, _json(response), response.retry_after)

    def tasks(self) -> list[dict[str, Any]]:
        """Every task the BMC keeps (for reconciling an update whose reply was lost)."""
        return [self.get(strip_prefix(self.url, uri)) for uri in self.members(f"{ROOT}/TaskService/Tasks")]

    def find_update_task(self, *, image_uri: str, targets: list[str], version: str = "",
                         exclude: set[str] | frozenset[str] = frozenset()) -> TaskInfo | None:
        """The task an earlier update of ``targets`` with ``image_uri`` created, if the BMC still keeps it.

        Standard evidence only: a task names what it updates in ``Messages[].MessageArgs`` (the image URI or its
        file name, each component id, the version it installs: NVIDIA's ``Update.1.0.TargetDetermined`` /
        ``TransferringToComponent`` / ``UpdateSuccessful``). A task matches when every target is named and the
        image or the version is; ``Payload`` (optional in DMTF, hidden by most BMCs) is an extra. ``exclude``:
        task URIs already accounted for (an earlier attempt's task is not this request's)."""
        filename = urlsplit(image_uri).path.rsplit("/", 1)[-1]
        for doc in reversed(self.tasks()):
            uri = strip_prefix(self.url, str(doc.get("@odata.id", "")))
            if uri in exclude:
                continue
            if task_names(doc, image_uri=image_uri, filename=filename, version=version, targets=targets):
                return _task_info(uri, doc, None)
        return None

    def manager_times(self, manager_path: str) -> tuple[str, str]:
        """(LastResetTime, DateTime) of a manager or system, as the BMC reports them ("" for one it omits)."""
        doc = self.get(strip_prefix(self.url, manager_path))
        return str(doc.get("LastResetTime") or ""), str(doc.get("DateTime") or "")

    # --- activation -------------------------------------------------------------------------------------------
    def activate(self, targets: list[str]) -> int:
        """Activate staged images of ``targets`` (UpdateService.Activate; StartUpdate where Activate is absent)."""
        body = {"Targets": [f"{INVENTORY}/{t}" for t in targets]}
        response = self._request("POST", f"{UPDATE_SERVICE}/Actions/UpdateService.Activate", body)
        not_up(response, "activate")
        if response.status in (400, 405):
            response = self._request("POST", f"{UPDATE_SERVICE}/Actions/UpdateService.StartUpdate", {})
        if response.status >= 400:
            raise BmcError(f"activate refused: HTTP {response.status} {error_text(response)}",
                           error_class=ErrorClass.FIRMWARE, status=response.status)
        return int(response.status)

    def reset_paths(self, kind: str, related: list[str] | None = None) -> list[str]:
        """The resources a reset of ``kind`` goes to (see ``reset``): one per manager for a BMC reset."""
        collection = RESET_ACTIONS[kind][0]
        direct = [r for r in related or [] if f"{ROOT}/Managers/" in r] if kind == "bmc_reset" else []
        if direct and len(direct) == len(related or []):
            return sorted({strip_prefix(self.url, r) for r in direct})
        members = self.collection(collection)
        if not members:
            raise BmcError(f"no {collection} to reset", error_class=ErrorClass.FIRMWARE)
        chosen = [members[0]]
        if kind == "bmc_reset" and related:
            names = {r.rstrip("/").rsplit("/", 1)[-1] for r in related}
            chosen = [m for m in members if m.rstrip("/").rsplit("/", 1)[-1] in names] or chosen
        return [strip_prefix(self.url, m) for m in chosen]

    def reset_one(self, kind: str, path: str) -> int:
        """One reset request of ``kind`` to one resource (a manager, system or chassis path)."""
        _collection, action, reset_type = RESET_ACTIONS[kind]
        response = self._request("POST", f"{path}/Actions/{action}", {"ResetType": reset_type})
        not_up(response, action)
        if response.status >= 400:
            raise BmcError(f"{action} {reset_type} refused: HTTP {response.status} {error_text(response)}",
                           error_class=ErrorClass.FIRMWARE, status=response.status)
        return int(response.status)

    def reset(self, kind: str, *, related: list[str] | None = None) -> int:
        """The reset an activation kind needs. For a BMC reset, the managers the updated items' ``RelatedItem``
        point to (``/Managers/<id>``, or a chassis named like a manager: ``/Chassis/HGX_BMC_0``) are reset, else
        the first manager; other resets go to the first system or chassis."""
        collection, action, reset_type = RESET_ACTIONS[kind]
        direct = [r for r in related or [] if f"{ROOT}/Managers/" in r] if kind == "bmc_reset" else []
        if direct and len(direct) == len(related or []):
            chosen = direct  # the items name their managers: no collection read
        else:
            members = self.collection(collection)
            if not members:
                raise BmcError(f"no {collection} to reset", error_class=ErrorClass.FIRMWARE)
            chosen = [members[0]]
            if kind == "bmc_reset" and related:
                names = {r.rstrip("/").rsplit("/", 1)[-1] for r in related}
                chosen = [m for m in members if m.rstrip("/").rsplit("/", 1)[-1] in names] or chosen
        status = 0
        for member in chosen:
            path = f"{strip_prefix(self.url, member)}/Actions/{action}"
            response = self._request("POST", path, {"ResetType": reset_type})
            not_up(response, action)
            if response.status >= 400:
                raise BmcError(f"{action} {reset_type} refused: HTTP {response.status} {error_text(response)}",
                               error_class=ErrorClass.FIRMWARE, status=response.status)
            status = int(response.status)
        return status


def task_names(doc: dict[str, Any], *, image_uri: str, filename: str, version: str, targets: list[str]) -> bool:
    """Whether a task document names this update: every target, and the image or the version (see
    ``BmcClient.find_update_task``)."""
    args: set[str] = set()
    for message in doc.get("Messages") or []:
        if isinstance(message, dict):
            args.update(str(a) for a in message.get("MessageArgs") or [])
    names = {a.rstrip("/").rsplit("/", 1)[-1] for a in args} | args
    image_named = bool({image_uri, filename} & names) or any(a.endswith("/" + filename) for a in args if filename)
    if set(targets) <= names and (image_named or (version and version in names)):
        return True
    body = (doc.get("Payload") or {}).get("JsonBody") or {}
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return False
    if not isinstance(body, dict) or str(body.get("ImageURI", "")) not in (image_uri, filename):
        return False
    uris = {t.get("@odata.id", "") if isinstance(t, dict) else str(t) for t in body.get("Targets", [])}
    return {u.rstrip("/").rsplit("/", 1)[-1] for u in uris} >= set(targets)


def not_up(response: Any, what: str) -> None:
    """A 404 on an action Redfish defines (SimpleUpdate, Activate, a Reset): the BMC's Redfish service is not
    up (it is rebooting), so nothing was done: infrastructure, never the firmware's fault."""
    if response.status == 404:
        raise BmcError(f"{what}: HTTP 404 (the BMC's Redfish service is not up)", kind=ErrorKind.INFRA, status=404)


def _json(response: Any) -> dict[str, Any]:
    return response.body if isinstance(response.body, dict) else {}


def _task_info(uri: str, data: dict[str, Any], retry_after: int | None) -> TaskInfo:
    return TaskInfo(uri=uri, state=str(data.get("TaskState", "")), status=str(data.get("TaskStatus", "") or ""),
                    percent=data.get("PercentComplete"), retry_after=retry_after,
                    messages=list(data.get("Messages") or []), body=data)


