"""Redfish transport shared by every app that drives BMCs (firmware rollouts, decommission's secure erase).

One short HTTP request per call: timeout ``FLEET_BMC_TIMEOUT``; a mutating request is never sent twice by the
transport; a GET whose answer did not come within the timeout is asked once more at once (it changes nothing, and a
BMC that drops an occasional read answers the next one: one lost read then costs one timeout, not a failed step
and its backoff); nothing sleeps. Every failure is classified, because what the caller may do next depends on it:

- ``INFRA``: the request was not processed: connection refused or a connect timeout (nothing left this host),
  5xx, 401/403/429, a read that timed out or dropped, and a 404 while the BMC is inside a boot grace period
  after a reset (``expect_reboot``). Try again later; never counts against firmware.
- ``AMBIGUOUS``: a mutating request (POST/PATCH/PUT/DELETE) that left this host and whose answer was lost (read
  timeout, connection dropped). The BMC may have done it. Never send it again until the BMC proves it did not
  (``fleet.execution.settle``).
- ``DEFINITE``: the BMC answered no (4xx on a mutation, a 404 outside a boot grace period).

    session = session_for(server.bmc_address)
    doc = session.get("/redfish/v1/Systems/1")
    response = session.post("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", {"ResetType": "ForceRestart"})
"""

from __future__ import annotations

import base64
import enum
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import requests
from django.conf import settings

ROOT = "/redfish/v1"
SAFE = ("GET", "HEAD")  # a read whose answer timed out is asked once more
MUTATING = frozenset({"POST", "PATCH", "PUT", "DELETE"})


class ErrorKind(enum.StrEnum):
    INFRA = "infra"
    AMBIGUOUS = "ambiguous"
    DEFINITE = "definite"


# error_class names firmware uses (ErrorClass values) for each kind
_ERROR_CLASS = {ErrorKind.INFRA: "infra", ErrorKind.AMBIGUOUS: "ambiguous", ErrorKind.DEFINITE: "firmware"}


class BmcError(Exception):
    """A Redfish request that did not succeed; ``kind`` says whether it may have been processed."""

    def __init__(self, message: str, *, kind: ErrorKind | str | None = None, error_class: str | None = None,
                 status: int | None = None, retry_after: int | None = None,
                 message_ids: list[str] | None = None, method: str = "", path: str = "") -> None:
        super().__init__(message)
        if kind is None:
            kind = {"firmware": ErrorKind.DEFINITE, "ambiguous": ErrorKind.AMBIGUOUS}.get(str(error_class or ""),
                                                                                        ErrorKind.INFRA)
        self.kind = ErrorKind(kind)
        self.status = status
        self.retry_after = retry_after
        self.message_ids = message_ids or []
        self.method = method
        self.path = path

    @property
    def error_class(self) -> str:
        """``infra`` / ``ambiguous`` / ``firmware`` (firmware's ErrorClass values)."""
        return _ERROR_CLASS[self.kind]

    @property
    def ambiguous(self) -> bool:
        return self.kind == ErrorKind.AMBIGUOUS


@dataclass
class Response:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)
    task_location: str = ""
    retry_after: int | None = None

    @property
    def dict(self) -> dict[str, Any]:  # the DMTF library's name, kept for callers written against it
        return self.body


def classify(method: str, *, exc: BaseException | None = None, status: int | None = None,
             in_boot_grace: bool = False) -> ErrorKind | None:
    """The kind of a failed request (None: not an error). ``exc``: a ``requests`` exception."""
    if exc is not None:
        if isinstance(exc, requests.ConnectTimeout):
            return ErrorKind.INFRA  # never connected: nothing was sent
        if isinstance(exc, requests.ConnectionError) and _refused(exc):
            return ErrorKind.INFRA
        if method.upper() in MUTATING:
            return ErrorKind.AMBIGUOUS  # sent; the answer is lost (even while rebooting: we cannot tell)
        return ErrorKind.INFRA
    if status is None or status < 400:
        return None
    if status >= 500 or status in (401, 403, 429, 408):
        return ErrorKind.INFRA
    if status == 404 and in_boot_grace:
        return ErrorKind.INFRA
    return ErrorKind.DEFINITE


def _refused(exc: BaseException) -> bool:
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, ConnectionRefusedError) or "Connection refused" in str(exc) \
                or "NewConnectionError" in type(exc).__name__:
            return True
        exc = exc.__cause__ or exc.__context__ or (exc.args[0] if exc.args and isinstance(exc.args[0], BaseException)
                                                   else None)
        seen += 1
    return False


def base_url(bmc_address: str) -> str:
    """``Server.bmc_address`` as a base URL: a full URL stays (the simulator's ``http://127.0.0.1:P/bmc/<id>``);
    a bare host or address becomes ``https://<host>``."""
    address = bmc_address.strip().rstrip("/")
    return address if "://" in address else f"https://{address}"


def strip_prefix(base: str, uri: str) -> str:
    """``/bmc/<id>/redfish/v1/...`` (a path under the base URL's path) or a full URL -> ``/redfish/v1/...``."""
    if "://" in uri:
        uri = urlsplit(uri).path
    prefix = urlsplit(base).path.rstrip("/")
    if prefix and uri.startswith(prefix + "/"):
        return uri[len(prefix):]
    return uri


_HTTP: dict[str, requests.Session] = {}  # one connection pool per host:port (the simulator: one per BMC, each its own port)
_SESSIONS: OrderedDict[str, RedfishSession] = OrderedDict()
_LOCK = threading.Lock()
MAX_SESSIONS = 4096


class RedfishSession:
    def __init__(self, url: str, *, username: str = "", password: str = "", timeout: float | None = None,
                 boot_grace_seconds: float | None = None) -> None:
        self.url = base_url(url)
        self.timeout = float(timeout if timeout is not None else settings.FLEET_BMC_TIMEOUT)
        self.boot_grace_seconds = float(boot_grace_seconds if boot_grace_seconds is not None
                                        else getattr(settings, "FLEET_BMC_BOOT_GRACE_SECONDS", 300))
        user = username or settings.FLEET_BMC_USERNAME or "fleet"
        secret = password or settings.FLEET_BMC_PASSWORD or "fleet"
        self.auth = {"Authorization": "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()}
        self.reboot_until = 0.0
        netloc = urlsplit(self.url).netloc
        with _LOCK:
            http = _HTTP.get(netloc)
            if http is None:
                http = _HTTP[netloc] = requests.Session()
                http.trust_env = False  # no proxy or netrc lookups per request: BMCs are reached directly
        self.http = http

    def expect_reboot(self, seconds: float | None = None) -> None:
        """For ``seconds`` (default the boot grace), 404s and dropped connections are the BMC rebooting."""
        self.reboot_until = time.monotonic() + (self.boot_grace_seconds if seconds is None else seconds)

    @property
    def in_boot_grace(self) -> bool:
        return time.monotonic() < self.reboot_until

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                headers: dict[str, str] | None = None, files: Any = None) -> Response:
        """One request. Raises BmcError for a transport failure and for 5xx/401/403/429 (INFRA); returns every
        other status."""
        method = method.upper()
        url = self.url + path if path.startswith("/") else f"{self.url}/{path}"
        all_headers = {**self.auth, "Accept": "application/json", **(headers or {})}
        try:
            try:
                raw = self.http.request(method, url, json=body if files is None else None, files=files,
                                        data=None, headers=all_headers, timeout=self.timeout, allow_redirects=False)
            except requests.ReadTimeout:
                if method not in SAFE:
                    raise
                raw = self.http.request(method, url, headers=all_headers, timeout=self.timeout,
                                        allow_redirects=False)  # a read: asked once more
        except requests.RequestException as exc:
            kind = classify(method, exc=exc, in_boot_grace=self.in_boot_grace)
            raise BmcError(f"{method} {path}: {type(exc).__name__}: {exc}"[:500], kind=kind, method=method,
                           path=path) from exc
        response = _response(raw, self.url)
        kind = classify(method, status=response.status, in_boot_grace=self.in_boot_grace)
        if kind == ErrorKind.INFRA:
            raise BmcError(f"{method} {path}: HTTP {response.status} {error_text(response)}", kind=kind,
                           status=response.status, retry_after=response.retry_after,
                           message_ids=message_ids(response), method=method, path=path)
        return response

    def get(self, path: str) -> dict[str, Any]:
        response = self.request("GET", path)
        if response.status >= 400:
            raise BmcError(f"GET {path}: HTTP {response.status} {error_text(response)}", kind=ErrorKind.DEFINITE,
                           status=response.status, method="GET", path=path)
        return response.body

    def post(self, path: str, body: dict[str, Any] | None = None) -> Response:
        response = self.request("POST", path, body)
        if response.status >= 400:
            raise BmcError(f"POST {path}: HTTP {response.status} {error_text(response)}", kind=ErrorKind.DEFINITE,
                           status=response.status, message_ids=message_ids(response), method="POST", path=path)
        return response

    def members(self, path: str) -> list[str]:
        return [strip_prefix(self.url, m["@odata.id"]) for m in self.get(path).get("Members", [])
                if isinstance(m, dict) and "@odata.id" in m]


def _response(raw: requests.Response, base: str) -> Response:
    try:
        body = raw.json() if raw.content else {}
    except ValueError:
        body = {}
    location = raw.headers.get("Location", "")
    retry = raw.headers.get("Retry-After", "")
    return Response(status=raw.status_code, headers=dict(raw.headers), body=body if isinstance(body, dict) else {},
                    task_location=strip_prefix(base, location) if location else "",
                    retry_after=int(retry) if retry.isdigit() else None)


def message_ids(response: Response) -> list[str]:
    error = response.body.get("error") or {}
    return [str(m.get("MessageId")) for m in error.get("@Message.ExtendedInfo", []) if m.get("MessageId")]


def error_text(response: Response) -> str:
    error = response.body.get("error") or {}
    info = error.get("@Message.ExtendedInfo") or []
    return "; ".join(str(m.get("Message") or m.get("MessageId")) for m in info) or str(error.get("message", ""))


def session_for(bmc_address: str) -> RedfishSession:
    """A session for this BMC, reused within the process (Basic auth: a BMC reboot loses nothing)."""
    url = base_url(bmc_address)
    with _LOCK:
        session = _SESSIONS.get(url)
        if session is not None:
            _SESSIONS.move_to_end(url)
            return session
    session = RedfishSession(url)
    with _LOCK:
        _SESSIONS[url] = session
        while len(_SESSIONS) > MAX_SESSIONS:
            _SESSIONS.popitem(last=False)
    return session


def session_forget(bmc_address: str) -> None:
    with _LOCK:
        _SESSIONS.pop(base_url(bmc_address), None)


def sessions_clear() -> None:
    """Forget every cached session (tests that change FLEET_BMC_TIMEOUT, a worker after a fork)."""
    with _LOCK:
        _SESSIONS.clear()
