"""``manage.py dcgm_exporter_sim --port 9400``: a dcgm-exporter stand-in for the demo (and a real scrape target).

Serves ``/metrics`` with synthetic dcgm-exporter text (``telemetry.synth``) for every placed GPU with
a UUID in the database; values change on every scrape (noise) around each GPU's demo level, with the demo's
problem GPUs (``synth.demo_fleet``, the same as the 24 h backfill's, so the live values continue its history).
The GPU list is re-read every minute.
"""

from __future__ import annotations

import itertools
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections

from telemetry.selectors import gpus_with_identity
from telemetry.synth import DemoGpu, dcgm_text_for, demo_fleet


class _Exporter:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.lock = threading.Lock()
        self.gpus: list[tuple[str, str, str, str]] = []
        self.demo: dict[str, DemoGpu] = {}
        self.loaded_at = 0.0
        self.scrapes = itertools.count(1)

    def text(self) -> bytes:
        with self.lock:
            if time.monotonic() - self.loaded_at > 60:
                close_old_connections()
                gpus = gpus_with_identity()
                self.demo = demo_fleet([gpu[0] for gpu in gpus])  # the whole fleet's, as the backfill's
                self.gpus = gpus[: self.limit]
                self.loaded_at = time.monotonic()
            gpus, demo = self.gpus, self.demo
        return dcgm_text_for(gpus, seed=next(self.scrapes), health_fields=True, demo=demo).encode()


class Command(BaseCommand):
    help = "Serve synthetic dcgm-exporter /metrics for the GPUs in the database (the demo's scrape target)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=9400)
        parser.add_argument("--bind", default="127.0.0.1")
        parser.add_argument("--max-gpus", type=int, default=100_000)

    def handle(self, *args: Any, **options: Any) -> None:
        exporter = _Exporter(options["max_gpus"])

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                body = exporter.text()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
                pass

        server = ThreadingHTTPServer((options["bind"], options["port"]), Handler)
        self.stdout.write(f"dcgm-exporter simulator on http://{options['bind']}:{options['port']}/metrics")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
