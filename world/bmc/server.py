"""The HTTP server: many BMCs, each on its own loopback port at ``/bmc/<bmc_id>/redfish/v1/...``, the control API
at ``/_sim/`` on the main port (listeners.py: the ports, the one accept loop, and a rebooting BMC's refusals).

stdlib ``ThreadingHTTPServer`` machinery with HTTP/1.1 keep-alive (a thread per client connection); every response
has a Content-Length and is written in one ``send``.
"""

import json
import logging
import socket
import struct
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import control, redfish
from .listeners import Listeners
from .messages import RedfishError, error_body
from .plugins import load_plugins
from .state import Simulator

logger = logging.getLogger(__name__)
_REASONS = {s.value: s.phrase for s in HTTPStatus}
MUTATING = ("POST", "PATCH", "PUT", "DELETE")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], sim: Simulator) -> None:
        self.sim = sim
        self.stopping = threading.Event()  # wakes requests that hang on purpose
        self.refused: set = set()  # sockets to close with a reset (``_Handler.refuse``, ``Listeners``)
        self.listeners: Listeners | None = None
        super().__init__(address, _Handler)

    def shutdown_request(self, request) -> None:  # noqa: ANN001 - socketserver's signature
        """A refused request's socket is closed at once (no FIN first): with SO_LINGER 0 the client gets a RST."""
        if self.listeners is not None:
            self.listeners.forget(request)
        if request in self.refused:
            self.refused.discard(request)
            self.close_request(request)
            return
        super().shutdown_request(request)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def bmc_url(self, bmc_id: str) -> str:
        return f"{self.url}/bmc/{bmc_id}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 300  # an idle keep-alive connection is closed after this
    server: _HTTPServer
    home: str | None = None  # the BMC whose own port this connection came in on (None: the main port)

    def setup(self) -> None:
        super().setup()
        if self.server.listeners is not None:
            self.home = self.server.listeners.origin(self.connection)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's signature
        logger.debug(format, *args)

    def _handle(self, method: str) -> None:
        listeners = self.server.listeners
        if listeners is not None:
            listeners.busy(self.connection, True)
        try:
            self._answer(method)
        finally:
            if listeners is not None:
                listeners.busy(self.connection, False)

    def _answer(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        path, _, query = self.path.partition("?")
        sim = self.server.sim
        sim.stats.count_request()
        try:
            if self.home is not None and not (path + "/").startswith(f"/bmc/{self.home}/"):
                # a BMC's own port answers only that BMC (the control API and the others are elsewhere)
                self._send(404, error_body("Base.1.13.0.ResourceNotFound", "Resource", path))
            elif path.startswith("/bmc/"):
                self._redfish(sim, method, path, body)
            elif path == "/_sim" or path.startswith("/_sim/"):
                bmc_url = self.server.listeners.url if self.server.listeners else self.server.bmc_url
                status, data = control.dispatch(sim, bmc_url, method, path, query, body)
                self._send(status, data)
            else:
                self._send(404, error_body("Base.1.13.0.ResourceNotFound", "Resource", path))
        except RedfishError as exc:
            self._send(exc.status, exc.body)
        except Exception:
            logger.exception("BMC simulator: %s %s", method, self.path)
            self._send(500, error_body("Base.1.13.0.GeneralError"))

    def _redfish(self, sim: Simulator, method: str, path: str, body: bytes) -> None:
        bmc_id, _, sub = path[5:].partition("/")
        bmc = sim.bmc(bmc_id)
        parts = tuple(p for p in sub.split("/") if p)
        if bmc is None or parts[:2] != ("redfish", "v1"):
            raise RedfishError(404, "Base.1.13.0.ResourceNotFound", "Resource", path)
        parts = parts[2:]
        config = sim.config
        mutating = method in MUTATING
        key = f"{method} /{sub}"
        if mutating:
            sim.stats.count_received(bmc.id, key)
        if sim.clock() < bmc.unreachable_until:
            self._rebooting(sim, bmc, path)
            return
        rule = None
        if config.faults:
            with bmc.lock:
                rule = sim.request_fault(bmc, method, "/" + sub)
        if rule is not None and rule.kind == "late":
            # The client times out; the BMC gets to the request afterwards and does it.
            self._hang(rule.seconds)
            if not self.server.stopping.is_set() and redfish.authorized(sim, bmc, method, parts, self.headers):
                self._process(sim, bmc, method, parts, body, key, mutating)
            return
        if rule is not None and rule.kind == "hold":
            # A deterministic window: the request waits here (unprocessed) until POST /_sim/holds/release; then
            # it is processed (the client may have timed out meanwhile: its answer is then lost).
            sim.holds.park(bmc.id, method, "/" + sub, self.server.stopping)
            if self.server.stopping.is_set():
                return
            rule = None
        if rule is not None and rule.kind == "slow":
            self.server.stopping.wait(rule.seconds)
            rule = None
        if rule is not None and rule.kind in ("http_error", "timeout") and (
                rule.kind == "http_error" or rule.when == "before"):
            if rule.kind == "http_error":
                self._send(rule.status, error_body("Base.1.13.0.ServiceTemporarilyUnavailable",
                                                   config.retry_after_seconds),
                           {"Retry-After": str(config.retry_after_seconds)})
            else:
                self._hang(rule.seconds)
            return
        if not redfish.authorized(sim, bmc, method, parts, self.headers):
            self._send(401, error_body("Base.1.13.0.NoValidSession"), {"WWW-Authenticate": 'Basic realm="BMC"'})
            return
        status, data, headers = self._process(sim, bmc, method, parts, body, key, mutating)
        if rule is not None and rule.kind == "timeout":  # a timeout after processing: the answer is lost
            self._hang(rule.seconds)
            return
        if (rule is not None and rule.kind == "reboot") or sim.rebooting(bmc) == "refused":
            self.close_connection = True  # this answer is the last before the reboot (a Manager.Reset's, say)
        self._send(status, data, headers)
        if rule is not None and rule.kind == "reboot":
            with bmc.lock:
                sim.reboot_window(bmc, rule.seconds)

    def _process(self, sim: Simulator, bmc, method: str, parts: tuple[str, ...], body: bytes, key: str,
                 mutating: bool) -> tuple[int, object, dict[str, str]]:
        content_type = self.headers.get("Content-Type", "")
        try:
            with bmc.lock:
                now = sim.clock()
                for plugin in sim.plugins:
                    plugin.tick(sim, bmc, now)
                answer = None
                if sim.plugins:
                    parsed = redfish.json_body(body) if body and "json" in content_type else {}
                    for plugin in sim.plugins:
                        answer = plugin.route(sim, bmc, method, parts, parsed, body)
                        if answer is not None:
                            break
                if answer is None:
                    answer = redfish.dispatch(sim, bmc, method, parts, body, content_type)
        finally:
            if mutating:
                sim.stats.count_processed(bmc.id, key)
        return answer

    def _rebooting(self, sim: Simulator, bmc, path: str) -> None:
        """Inside a reboot window: nothing is processed; the answer depends on the mode. In "refused" mode the
        BMC's own port is closed (listeners.py): a request gets here only on a connection opened before the
        window, or on the main port, and is reset."""
        config = sim.config
        mode = sim.rebooting(bmc) or config.reboot_mode
        if mode == "mixed":
            mode = ("refused", "503", "404")[bmc.requests % 3]
            bmc.requests += 1
        if mode == "503":
            raise RedfishError(503, "Base.1.13.0.ServiceTemporarilyUnavailable", config.retry_after_seconds)
        if mode == "404":
            raise RedfishError(404, "Base.1.13.0.ResourceNotFound", "Resource", path)
        self.refuse()

    def refuse(self) -> None:
        """A request that reached a BMC that is down (a keep-alive connection opened before its window, the
        shared port, the "mixed" mode's third): its connection reset (TCP RST, ``SO_LINGER`` 0), nothing processed
        and nothing answered; the client sees ``ConnectionResetError`` (a GET: infra; a mutation: ambiguous,
        reconciled). New connections to a BMC's own port are refused by the kernel instead (listeners.py)."""
        self.close_connection = True
        self.server.sim.stats.count_fault("connection_reset")
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.server.refused.add(self.connection)
        except OSError:
            pass

    def _hang(self, seconds: float) -> None:
        self.server.stopping.wait(seconds)
        self.close_connection = True

    def _send(self, status: int, data: object, headers: dict[str, str] | None = None) -> None:
        payload = b"" if data is None else json.dumps(data, separators=(",", ":")).encode()
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, '')}",
                 "Content-Type: application/json; charset=utf-8", f"Content-Length: {len(payload)}",
                 "OData-Version: 4.0"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if self.close_connection:
            lines.append("Connection: close")
        self.wfile.write("\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + payload)


class SimulatorServer:
    """``SimulatorServer(bmcs=64, task_seconds=2).start()`` serves in a background thread and returns the main URL
    (the control API); ``.bmc_url(id)`` is a BMC's base URL on its own port. ``.stop()`` ends it. Keyword
    arguments other than host, port, bmcs, profile, prefix, versions, clock, plugins, shared_port (every BMC on
    the main port) and bmc_ports (BMC id -> the port to listen on: a restarted simulator keeps its URLs) are
    configuration keys (config.SimConfig). ``.sim`` is the Simulator, for direct inspection in tests."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, bmcs: int = 0, profile: str = "hgx-h100",
                 prefix: str = "bmc-", versions: dict[str, str] | None = None, clock=None,
                 plugins: list[str] | tuple[str, ...] = (), shared_port: bool = False,
                 bmc_ports: dict[str, int] | None = None, **config: object) -> None:
        self.sim = Simulator(clock=clock, plugins=load_plugins(plugins), **config)
        if bmcs:
            self.sim.create_bmcs(count=bmcs, profile=profile, prefix=prefix, versions=versions)
        self._address = (host, port)
        self.shared_port = shared_port
        self._bmc_ports = dict(bmc_ports or {})
        self._httpd: _HTTPServer | None = None
        self._listeners: Listeners | None = None
        self._thread: threading.Thread | None = None
        self._serving = False
        self._loop_stop = threading.Event()
        self._loop_done = threading.Event()
        self._stop_lock = threading.Lock()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "not started"
        return self._httpd.url

    def bmc_url(self, bmc_id: str) -> str:
        assert self._listeners is not None, "not started"
        return self._listeners.url(bmc_id)

    def bind(self) -> str:
        """Listen on the main port and on every BMC's own port (none with ``shared_port``)."""
        self._httpd = _HTTPServer(self._address, self.sim)
        self._listeners = Listeners(self._httpd, self.sim, shared=self.shared_port, ports=self._bmc_ports)
        self._httpd.listeners = self._listeners
        self.sim.on_table = self._listeners.table_changed
        self._listeners.table_changed(self.sim.bmc_ids(), ())
        return self.url

    def start(self) -> str:
        url = self.bind()
        self._thread = threading.Thread(target=self.serve_forever, name="bmc-simulator", daemon=True)
        self._thread.start()
        return url

    def serve_forever(self) -> None:
        if self._httpd is None:
            self.bind()
        assert self._listeners is not None
        self._serving = True
        self._loop_stop.clear()
        self._loop_done.clear()
        try:
            self._listeners.serve(self._loop_stop)
        finally:
            self._loop_done.set()

    def stop(self) -> None:
        """Stop serving (from any thread but the serving one) and close the ports; safe to call twice."""
        with self._stop_lock:
            httpd, self._httpd = self._httpd, None
            listeners, self._listeners = self._listeners, None
            if httpd is None or listeners is None:
                return
            httpd.stopping.set()
            self._loop_stop.set()
            if self._serving and self._thread is not threading.current_thread():
                self._loop_done.wait(timeout=5)
            if self._thread is not None:
                self._thread.join(timeout=5)
            self.sim.on_table = None
            listeners.close()
            httpd.server_close()
            self._thread, self._serving = None, False

    def __enter__(self) -> "SimulatorServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
