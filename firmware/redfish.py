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

import base64
import json
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import redfish
import requests
from django.conf import settings

from firmware.models import ErrorClass

# The library logs every request at INFO (two lines per request, formatted eagerly): too costly at fleet scale.
logging.getLogger("redfish.rest.v1").setLevel(logging.WARNING)

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


class BmcError(Exception):
    def __init__(self, message: str, *, error_class: str = ErrorClass.INFRA, status: int | None = None,
                 retry_after: int | None = None, message_ids: list[str] | None = None) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.status = status
        self.retry_after = retry_after
        self.message_ids = message_ids or []


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


def base_url(bmc_address: str) -> str:
    """``Server.bmc_address`` as a base URL: a full URL stays (the simulator's ``http://127.0.0.1:P/bmc/<id>``);
    a bare host or address becomes ``https://<host>``."""
    address = bmc_address.strip().rstrip("/")
    return address if "://" in address else f"https://{address}"


# One HTTP connection pool per BMC endpoint host:port in this process (the simulator serves many BMCs on one port).
_SESSIONS: dict[str, requests.Session] = {}
_CLIENTS: OrderedDict[str, BmcClient] = OrderedDict()
_LOCK = threading.Lock()
MAX_CLIENTS = 4096


def bmc_client(bmc_address: str) -> BmcClient:
    """A logged-in client for this BMC, reused within the process (Basic auth: a BMC reboot loses nothing)."""
    url = base_url(bmc_address)
    with _LOCK:
        client = _CLIENTS.get(url)
        if client is not None:
            _CLIENTS.move_to_end(url)
            return client
    client = BmcClient(url)
    with _LOCK:
        _CLIENTS[url] = client
        while len(_CLIENTS) > MAX_CLIENTS:
            _CLIENTS.popitem(last=False)
    return client


def bmc_client_forget(bmc_address: str) -> None:
    with _LOCK:
        _CLIENTS.pop(base_url(bmc_address), None)


class BmcClient:
    def __init__(self, url: str, *, username: str | None = None, password: str | None = None,
                 timeout: float | None = None) -> None:
        self.url = url
        self.timeout = timeout if timeout is not None else settings.FLEET_BMC_TIMEOUT
        user = username if username is not None else settings.FLEET_BMC_USERNAME
        secret = password if password is not None else settings.FLEET_BMC_PASSWORD
        # Basic auth on every request instead of login(): the library's login costs two requests per BMC and
        # process, and a session dies with every BMC reset. Bad credentials show as a 401 on the first request.
        self._auth = {"Authorization": "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()}
        try:
            self._rf = redfish.redfish_client(base_url=url, username=user, password=secret, timeout=self.timeout,
                                              max_retry=0, check_connectivity=False)
        except Exception as exc:  # noqa: BLE001 - a malformed URL
            raise BmcError(f"BMC {url}: {type(exc).__name__}: {exc}") from exc
        netloc = urlsplit(url).netloc
        with _LOCK:
            session = _SESSIONS.get(netloc)
            if session is None:
                session = _SESSIONS[netloc] = requests.Session()
                session.trust_env = False  # no proxy or netrc lookups per request: BMCs are reached directly
        self._rf._session = session  # share keep-alive connections between BMCs behind one endpoint
        self._collections: dict[str, list[str]] = {}  # Managers, Systems, Chassis: fixed for a BMC

    # --- plumbing ---------------------------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        headers = {**self._auth, **(headers or {})}
        try:
            if method == "GET":
                response = self._rf.get(path, headers=headers, timeout=self.timeout, max_retry=0)
            elif method == "DELETE":
                response = self._rf.delete(path, headers=headers, timeout=self.timeout, max_retry=0)
            else:
                response = self._rf.post(path, body=body, headers=headers, timeout=self.timeout, max_retry=0)
        except Exception as exc:  # noqa: BLE001 - RetriesExhaustedError wraps timeouts and refused connections
            cause = exc.__cause__ or exc
            raise BmcError(f"{method} {path}: {type(cause).__name__}: {cause}") from exc
        status = response.status
        if status >= 500 or status in (401, 403, 429):
            raise BmcError(f"{method} {path}: HTTP {status} {_error_text(response)}", status=status,
                           retry_after=response.retry_after, message_ids=_message_ids(response))
        return response

    def get(self, path: str) -> dict[str, Any]:
        response = self._request("GET", path)
        if response.status == 404:
            raise BmcError(f"GET {path}: not found", error_class=ErrorClass.FIRMWARE, status=404)
        if response.status >= 400:
            raise BmcError(f"GET {path}: HTTP {response.status} {_error_text(response)}", status=response.status)
        return response.dict or {}

    def _members(self, path: str) -> list[str]:
        return [m["@odata.id"] for m in self.get(path).get("Members", []) if "@odata.id" in m]

    # --- inventory --------------------------------------------------------------------------------------------
    def inventory_ids(self) -> list[str]:
        """Ids of the FirmwareInventory members (last segment of their ``@odata.id``)."""
        return [uri.rstrip("/").rsplit("/", 1)[-1] for uri in self._members(INVENTORY)]

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
            body: Any = {"UpdateParameters": (None, json.dumps(params), "application/json"),
                         "UpdateFile": (filename, image, "application/octet-stream")}
            response = self._request("POST", path, body, headers={"Content-Type": "multipart/form-data"})
        else:
            body = {"ImageURI": image_uri, "Targets": uris}
            if transfer_protocol or "://" not in image_uri:
                body["TransferProtocol"] = transfer_protocol or "HTTP"
            if stage:
                body["Stage"] = True
            response = self._request("POST", f"{UPDATE_SERVICE}/Actions/UpdateService.SimpleUpdate", body)
        if response.status not in (200, 202, 204):
            raise BmcError(f"update refused: HTTP {response.status} {_error_text(response)}",
                           error_class=ErrorClass.FIRMWARE, status=response.status,
                           message_ids=_message_ids(response))
        data = _json(response)
        task_uri = response.task_location or data.get("@odata.id") or ""
        task_uri = urlsplit(task_uri).path if "://" in task_uri else task_uri
        task_uri = _strip_prefix(self.url, task_uri)
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
        return [self.get(_strip_prefix(self.url, uri)) for uri in self._members(f"{ROOT}/TaskService/Tasks")]

    def find_update_task(self, *, image_uri: str, targets: list[str]) -> TaskInfo | None:
        """The task an earlier update of ``targets`` with ``image_uri`` created, if the BMC has it."""
        wanted = {f"{INVENTORY}/{t}" for t in targets}
        filename = urlsplit(image_uri).path.rsplit("/", 1)[-1]
        for doc in reversed(self.tasks()):
            body = (doc.get("Payload") or {}).get("JsonBody") or {}
            if isinstance(body, str):
                try:
                    body = json.loads(body)
                except ValueError:
                    continue
            image = str(body.get("ImageURI", ""))
            if image not in (image_uri, filename):
                continue
            uris = {t.get("@odata.id", "") if isinstance(t, dict) else str(t) for t in body.get("Targets", [])}
            if not uris or uris & wanted:
                return _task_info(doc.get("@odata.id", ""), doc, None)
        return None

    # --- activation -------------------------------------------------------------------------------------------
    def activate(self, targets: list[str]) -> int:
        """Activate staged images of ``targets`` (UpdateService.Activate; StartUpdate where Activate is absent)."""
        body = {"Targets": [f"{INVENTORY}/{t}" for t in targets]}
        response = self._request("POST", f"{UPDATE_SERVICE}/Actions/UpdateService.Activate", body)
        if response.status in (400, 404, 405):
            response = self._request("POST", f"{UPDATE_SERVICE}/Actions/UpdateService.StartUpdate", {})
        if response.status >= 400:
            raise BmcError(f"activate refused: HTTP {response.status} {_error_text(response)}",
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
            if collection not in self._collections:
                self._collections[collection] = self._members(f"{ROOT}/{collection}")
            members = self._collections[collection]
            if not members:
                raise BmcError(f"no {collection} to reset", error_class=ErrorClass.FIRMWARE)
            chosen = [members[0]]
            if kind == "bmc_reset" and related:
                names = {r.rstrip("/").rsplit("/", 1)[-1] for r in related}
                chosen = [m for m in members if m.rstrip("/").rsplit("/", 1)[-1] in names] or chosen
        status = 0
        for member in chosen:
            path = f"{_strip_prefix(self.url, member)}/Actions/{action}"
            response = self._request("POST", path, {"ResetType": reset_type})
            if response.status >= 400:
                raise BmcError(f"{action} {reset_type} refused: HTTP {response.status} {_error_text(response)}",
                               error_class=ErrorClass.FIRMWARE, status=response.status)
            status = int(response.status)
        return status


def _json(response: Any) -> dict[str, Any]:
    try:
        data = response.dict
    except Exception:  # noqa: BLE001 - an empty 204 body
        return {}
    return data if isinstance(data, dict) else {}


def _message_ids(response: Any) -> list[str]:
    error = _json(response).get("error") or {}
    return [str(m.get("MessageId")) for m in error.get("@Message.ExtendedInfo", []) if m.get("MessageId")]


def _error_text(response: Any) -> str:
    error = _json(response).get("error") or {}
    info = error.get("@Message.ExtendedInfo") or []
    return "; ".join(str(m.get("Message") or m.get("MessageId")) for m in info) or str(error.get("message", ""))


def _task_info(uri: str, data: dict[str, Any], retry_after: int | None) -> TaskInfo:
    return TaskInfo(uri=uri, state=str(data.get("TaskState", "")), status=str(data.get("TaskStatus", "") or ""),
                    percent=data.get("PercentComplete"), retry_after=retry_after,
                    messages=list(data.get("Messages") or []), body=data)


def _strip_prefix(base: str, uri: str) -> str:
    """``/bmc/<id>/redfish/v1/...`` (a path under the base URL's path) -> ``/redfish/v1/...``."""
    prefix = urlsplit(base).path.rstrip("/")
    if prefix and uri.startswith(prefix + "/"):
        return uri[len(prefix):]
    return uri
