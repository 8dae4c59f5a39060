"""The HTTP side: ``/metrics`` answered from a body function, on a thread (tests) or in the foreground (CLI)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ExporterServer:
    """Serves ``body()`` on ``/metrics`` (and ``/``). ``port=0`` takes a free port (``.port`` says which).
    ``scrapes`` counts the bodies served, so a test can wait for a scraper to have come by."""

    def __init__(self, body: Callable[[], bytes], *, bind: str = "127.0.0.1", port: int = 0) -> None:
        self.body = body
        self.scrapes = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                data = outer.body()
                with outer._lock:
                    outer.scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
                pass

        self.httpd = ThreadingHTTPServer((bind, port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://{bind}:{self.port}/metrics"
        self._thread: threading.Thread | None = None

    def start(self) -> ExporterServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        try:
            self.httpd.serve_forever()
        finally:
            self.httpd.server_close()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
