"""Each BMC on its own loopback port, and the one accept loop over every listening socket.

A BMC's base URL is ``http://127.0.0.1:<its port>/bmc/<id>`` (the path prefix stays, so routing is the same on
every port); the main port serves the control API (``/_sim/``) and, for old URLs, every BMC's routes too. One
thread (``Listeners.serve``) waits on all listening sockets with ``selectors`` and hands each accepted connection
to the HTTP server's ``process_request`` (a thread per connection, as ``ThreadingHTTPServer`` does): no thread
per listener, so 2,000 BMCs are 2,000 sockets and one loop.

A BMC inside a reboot window in "refused" mode has its listening socket closed (unregistered, closed): the kernel
refuses new connections, and a client knows its request never left (``ConnectionRefusedError`` at ``connect()``).
Its idle keep-alive connections are dropped when the window opens (a reboot drops them: shut down at once, then
reset); one in the middle of a request gets its answer, then ``Connection: close``. When the window ends the socket is bound again on the same
port (``SO_REUSEADDR``): the loop checks the closed ones every ``POLL`` seconds, and every change of a BMC's
window (``Bmc.unreachable_until``'s setter) and every advance of a manual clock is applied at once. Each window that closes a listener counts as the
fault "refused" (the kernel refuses the connections, so the simulator cannot count them; a request that still
arrives on a connection opened before the window is reset and counts as "connection_reset").

``shared=True`` (``--shared-port``): no BMC has a port of its own; every BMC is served on the main port, and a
refused window resets connections instead (the client sees ``ConnectionResetError``, not a refusal).
"""

import logging
import selectors
import socket
import struct
import threading
from collections.abc import Iterable

from .records import ManualClock
from .state import Bmc, Simulator

logger = logging.getLogger(__name__)
POLL = 0.05  # seconds between checks of the closed listeners (a window's end is seen this late at most)
ACCEPTS_PER_WAKE = 64  # connections accepted from one socket before the loop looks at the others


class Listeners:
    def __init__(self, httpd, sim: Simulator, *, shared: bool = False,  # noqa: ANN001 - server.py's _HTTPServer
                 ports: dict[str, int] | None = None) -> None:
        self.httpd = httpd
        self.sim = sim
        self.shared = shared
        self.host, self.main_port = httpd.server_address[:2]
        self._ports: dict[str, int] = {} if shared else dict(ports or {})  # BMC id -> its port (also while closed)
        self._sockets: dict[str, socket.socket] = {}  # BMC id -> its open listening socket
        self._down: set[str] = set()  # BMCs inside a refused reboot window
        self._reopen: set[str] = set()  # BMCs whose window ended but whose port could not be bound yet
        self._origin: dict[socket.socket, str] = {}  # a connection accepted on a BMC's port -> that BMC
        self._busy: set[socket.socket] = set()  # connections inside a request
        self._lock = threading.Lock()
        self._closed = False
        self._selector = selectors.DefaultSelector()
        httpd.socket.setblocking(False)
        self._selector.register(httpd.socket, selectors.EVENT_READ, "")
        if isinstance(sim.clock, ManualClock):  # a manual clock's windows end when it is moved on: look at once
            sim.clock.on_advance.append(self.check)

    # --- the BMC table ------------------------------------------------------------------------------------------
    def url(self, bmc_id: str) -> str:
        """The BMC's base URL: on its own port, or on the main port (shared mode, or no such BMC: a 404 there)."""
        port = self._ports.get(bmc_id) if self.sim.bmc(bmc_id) is not None else None
        return f"http://{self.host}:{port or self.main_port}/bmc/{bmc_id}"

    def table_changed(self, added: Iterable[str], removed: Iterable[str]) -> None:
        """``Simulator.on_table``: listen for new (or re-created) BMCs, close the ports of deleted ones."""
        with self._lock:
            if self._closed:
                return
            for bmc_id in removed:
                if self.sim.bmc(bmc_id) is None:
                    self._close(bmc_id)
                    self._down.discard(bmc_id)
                    self._reopen.discard(bmc_id)
            for bmc_id in added:
                bmc = self.sim.bmc(bmc_id)
                if bmc is None:
                    continue
                bmc.watcher = self.changed
                if not self.shared and bmc_id not in self._sockets and bmc_id not in self._down:
                    self._open(bmc_id, keep_port=False)
                self._sync(bmc)

    def changed(self, bmc: Bmc) -> None:
        """``Bmc.watcher``: its reboot window changed."""
        with self._lock:
            if not self._closed:
                self._sync(bmc)

    # --- connections (called by the HTTP server's threads) ---------------------------------------------------------
    def origin(self, conn: socket.socket) -> str | None:
        """The BMC whose port ``conn`` came in on; None for the main port."""
        return self._origin.get(conn)

    def busy(self, conn: socket.socket, busy: bool) -> None:
        if busy:
            self._busy.add(conn)
        else:
            self._busy.discard(conn)

    def forget(self, conn: socket.socket) -> None:
        with self._lock:
            self._origin.pop(conn, None)
            self._busy.discard(conn)

    # --- the accept loop ---------------------------------------------------------------------------------------
    def serve(self, stop: threading.Event) -> None:
        """Accept on every listening socket until ``stop`` is set."""
        while not stop.is_set():
            ready = self._selector.select(POLL)
            accepted = []
            with self._lock:
                for key, _ in ready:
                    accepted += self._accept(key.fileobj, key.data)
                if self._down or self._reopen:
                    self._check()
            for conn, address in accepted:
                try:
                    self.httpd.process_request(conn, address)
                except Exception:  # as socketserver does: log it, close the connection, serve on
                    self.httpd.handle_error(conn, address)
                    self.httpd.shutdown_request(conn)

    def check(self) -> None:
        """Reopen the ports of BMCs whose refused window has ended."""
        with self._lock:
            if not self._closed:
                self._check()

    def close(self) -> None:
        if isinstance(self.sim.clock, ManualClock) and self.check in self.sim.clock.on_advance:
            self.sim.clock.on_advance.remove(self.check)
        with self._lock:
            self._closed = True
            for bmc_id in list(self._sockets):
                self._close(bmc_id)
            self._selector.close()

    # --- inside (the caller holds self._lock) ------------------------------------------------------------------
    def _accept(self, sock: socket.socket, bmc_id: str) -> list:
        accepted = []
        if sock.fileno() < 0:  # closed since select() returned
            return accepted
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                conn, address = sock.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                logger.exception("BMC simulator: accept on %s", bmc_id or "the main port")
                break
            if bmc_id:
                self._origin[conn] = bmc_id
            accepted.append((conn, address))
        return accepted

    def _check(self) -> None:
        """Reopen the ports of BMCs whose refused window has ended (or that were deleted meanwhile)."""
        for bmc_id in list(self._down):
            bmc = self.sim.bmc(bmc_id)
            if bmc is None:
                self._down.discard(bmc_id)
            else:
                self._sync(bmc)
        for bmc_id in list(self._reopen):
            if bmc_id in self._down or self.sim.bmc(bmc_id) is None:
                self._reopen.discard(bmc_id)
            elif self._open(bmc_id, keep_port=True):
                self._reopen.discard(bmc_id)

    def _sync(self, bmc: Bmc) -> None:
        if self.sim.bmc(bmc.id) is not bmc:  # deleted, or replaced by a re-created BMC of the same id
            return
        down = self.sim.rebooting(bmc) == "refused"
        if down and bmc.id not in self._down:
            self._down.add(bmc.id)
            self._reopen.discard(bmc.id)
            self.sim.stats.count_fault("refused")
            if not self.shared:
                self._close(bmc.id)
                self._drop_connections(bmc.id)
        elif not down and bmc.id in self._down:
            self._down.discard(bmc.id)
            if not self.shared and not self._open(bmc.id, keep_port=True):
                self._reopen.add(bmc.id)

    def _open(self, bmc_id: str, *, keep_port: bool) -> bool:
        """Listen on the BMC's port (its earlier one if it had one). ``keep_port``: only on that port (False when
        it cannot be bound yet); else another port if that one is taken (a BMC's first port, a re-created BMC)."""
        port = self._ports.get(bmc_id, 0)
        sock = socket.socket(self.httpd.address_family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((self.host, port))
            except OSError:
                if keep_port or not port:
                    raise
                logger.warning("BMC simulator: %s's port %d is taken; it gets another", bmc_id, port)
                sock.bind((self.host, 0))
            sock.listen(self.httpd.request_queue_size)
            sock.setblocking(False)
        except OSError:
            sock.close()
            if not keep_port:
                raise
            logger.warning("BMC simulator: %s's port %d cannot be bound yet; retrying", bmc_id, port)
            return False
        self._ports[bmc_id] = sock.getsockname()[1]
        self._sockets[bmc_id] = sock
        self._selector.register(sock, selectors.EVENT_READ, bmc_id)
        return True

    def _close(self, bmc_id: str) -> None:
        sock = self._sockets.pop(bmc_id, None)
        if sock is not None:
            self._selector.unregister(sock)
            sock.close()

    def _drop_connections(self, bmc_id: str) -> None:
        """Drop the BMC's idle keep-alive connections: shut down at once (the client's pool sees it closed before
        it sends another request on it), then closed by their thread with ``SO_LINGER`` 0 (a RST). A connection
        inside a request finishes it (server.py closes it after the answer)."""
        for conn, origin in list(self._origin.items()):
            if origin != bmc_id or conn in self._busy:
                continue
            try:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.httpd.refused.add(conn)
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
