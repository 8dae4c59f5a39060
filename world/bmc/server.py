"""The HTTP server: one port, many BMCs at ``/bmc/<bmc_id>/redfish/v1/...``, the control API at ``/_sim/``.

stdlib ``ThreadingHTTPServer`` with HTTP/1.1 keep-alive (a thread per client connection); every response has a
Content-Length and is written in one ``send``.
"""

import json
import logging
import socket
import struct
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import control, redfish
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
        self.refused: set = set()  # sockets to close with a reset (``_Handler.refuse``)
        super().__init__(address, _Handler)

    def shutdown_request(self, request) -> None:  # noqa: ANN001 - socketserver's signature
        """A refused request's socket is closed at once (no FIN first): with SO_LINGER 0 the client gets a RST."""
        if request in self.refused:
            self.refused.discard(request)
            self.close_request(request)
            return
        super().shutdown_request(request)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 300  # an idle keep-alive connection is closed after this
    server: _HTTPServer

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
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        path, _, query = self.path.partition("?")
        sim = self.server.sim
        sim.stats.count_request()
        try:
            if path.startswith("/bmc/"):
                self._redfish(sim, method, path, body)
            elif path == "/_sim" or path.startswith("/_sim/"):
                status, data = control.dispatch(sim, self.server.url, method, path, query, body)
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
        """Inside a reboot window: nothing is processed; the answer depends on the mode."""
        config = sim.config
        mode = bmc.reboot_mode or ("503" if config.unreachable == "503" else config.reboot_mode)
        if mode == "mixed":
            mode = ("refused", "503", "404")[bmc.requests % 3]
            bmc.requests += 1
        if mode == "503":
            raise RedfishError(503, "Base.1.13.0.ServiceTemporarilyUnavailable", config.retry_after_seconds)
        if mode == "404":
            raise RedfishError(404, "Base.1.13.0.ResourceNotFound", "Resource", path)
        self.refuse()

    def refuse(self) -> None:
        """What a client sees of a BMC that is down: its connection reset (TCP RST, ``SO_LINGER`` 0), nothing
        processed and nothing answered. One port serves every BMC, so a per-BMC refusal cannot fail the
        ``connect()`` itself; the client sees ``ConnectionResetError`` on its request instead (a GET: infra; a
        mutation: ambiguous, reconciled). docs/firmware.md, "What the simulator shows"."""
        self.close_connection = True
        self.server.sim.stats.count_fault("refused")
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
    """``SimulatorServer(bmcs=64, task_seconds=2).start()`` serves in a background thread and returns the base URL;
    ``.stop()`` ends it. Keyword arguments other than host, port, bmcs, profile, prefix, versions and clock are
    configuration keys (config.SimConfig). ``.sim`` is the Simulator, for direct inspection in tests."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, bmcs: int = 0, profile: str = "hgx-h100",
                 prefix: str = "bmc-", versions: dict[str, str] | None = None, clock=None,
                 plugins: list[str] | tuple[str, ...] = (), **config: object) -> None:
        self.sim = Simulator(clock=clock, plugins=load_plugins(plugins), **config)
        if bmcs:
            self.sim.create_bmcs(count=bmcs, profile=profile, prefix=prefix, versions=versions)
        self._address = (host, port)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._serving = False
        self._stop_lock = threading.Lock()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "not started"
        return self._httpd.url

    def bmc_url(self, bmc_id: str) -> str:
        return f"{self.url}/bmc/{bmc_id}"

    def bind(self) -> str:
        self._httpd = _HTTPServer(self._address, self.sim)
        return self.url

    def start(self) -> str:
        url = self.bind()
        self._thread = threading.Thread(target=self.serve_forever, name="bmc-simulator", daemon=True)
        self._thread.start()
        return url

    def serve_forever(self) -> None:
        if self._httpd is None:
            self.bind()
        assert self._httpd is not None
        self._serving = True
        self._httpd.serve_forever(poll_interval=0.1)

    def stop(self) -> None:
        """Stop serving (from any thread but the serving one) and close the port; safe to call twice."""
        with self._stop_lock:
            httpd, self._httpd = self._httpd, None
            if httpd is None:
                return
            httpd.stopping.set()
            if self._serving and self._thread is not threading.current_thread():
                httpd.shutdown()
            if self._thread is not None:
                self._thread.join(timeout=5)
            httpd.server_close()
            self._thread, self._serving = None, False

    def __enter__(self) -> "SimulatorServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
