"""Gunicorn settings of the Procfile's ``web`` process (``make run``), chosen by measuring ``bench/load.py``
(16 clients mixing API pages, cursor paging, serial lookups, the HTML GPU list and heatmap data; figures in
bench/README.md). Each can be overridden from the environment.

- ``gthread`` workers with keep-alive: clients (browsers, scripts paging with cursors) reuse their
  connection; a sync worker closes it after every response.
- Workers: the request work is CPU (templates, serializers) on a machine that also runs PostgreSQL, Redis
  and Celery, so about one worker per core plus one; threads cover the waits on the database.
- Metrics: ``prometheus_client``'s multiprocess files of processes that are gone are removed at start, and a
  worker's live gauges when it exits (``fleet/metrics.py``).
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

# The same directory fleet/settings.py defaults to, known to the master (which does not load Django).
_var = Path(os.environ.get("FLEET_VAR_DIR", Path(__file__).resolve().parent.parent / "var"))
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(_var / "prometheus"))
Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)

bind = f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "gthread")
workers = int(os.environ.get("GUNICORN_WORKERS", str(multiprocessing.cpu_count() + 1)))
threads = int(os.environ.get("GUNICORN_THREADS", "4"))
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "30"))  # seconds an idle client connection is kept
backlog = 512
# Gunicorn's own request-line limit (default 4094 bytes) answers an HTML 414 that Fleet cannot shape; it is
# lifted (0: gunicorn keeps only its 1 MiB safety cap) so that Django sees the URL and Fleet's
# UriLengthMiddleware refuses anything over FLEET_MAX_URL_LENGTH (8190) with a JSON 414 under /api/.
limit_request_line = int(os.environ.get("GUNICORN_LIMIT_REQUEST_LINE", "0"))
timeout = 60
graceful_timeout = 20
max_requests = int(os.environ.get("GUNICORN_MAX_REQUESTS", "0"))  # 0: workers are not recycled
# Plain text logs keep gunicorn's access log; LOG_FORMAT=json logs each request as JSON (fleet.request) and
# gunicorn's own lines (start, workers, errors) as JSON too.
_json = os.environ.get("LOG_FORMAT", "").strip().lower() == "json"
accesslog = None if _json else "-"
if _json:
    logconfig_dict = {
        "version": 1, "disable_existing_loggers": False,
        "formatters": {"json": {"()": "fleet.logs.JsonFormatter"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
        "loggers": {"gunicorn.error": {"handlers": ["console"], "level": "INFO", "propagate": False}},
    }


def on_starting(server) -> None:  # type: ignore[no-untyped-def]
    from fleet.metrics import dead_process_files_remove

    dead_process_files_remove(os.environ["PROMETHEUS_MULTIPROC_DIR"])


def child_exit(server, worker) -> None:  # type: ignore[no-untyped-def]
    from prometheus_client.multiprocess import mark_process_dead

    mark_process_dead(worker.pid, os.environ["PROMETHEUS_MULTIPROC_DIR"])
