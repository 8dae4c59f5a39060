"""One way for tests to start a real Celery worker process: on this test database (its PostgreSQL session named
``application_name``, so its locks and session can be found), on ``broker``, with eager mode OFF in the worker
whatever the environment says (an eager worker would run the tasks it sends itself, inline, instead of
publishing them). The test process's side of the rule is the ``no_eager_celery`` fixture: it publishes, it
never runs a step. With ``--pool solo`` the process that runs a step is the one a kill lands on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO

from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


def worker_database_url(application_name: str = "") -> str:
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return f"{url}?application_name={application_name}" if application_name else url


def start_worker(*, broker: str, env: dict[str, str] | None = None, name: str = "", pool: str = "solo",
                 loglevel: str = "WARNING", output: int | IO | None = subprocess.DEVNULL) -> subprocess.Popen:
    """A worker process (one child with ``pool="prefork"``: the pool that enforces Celery's time limits)."""
    worker_env = {**os.environ, **(env or {}), "REDIS_URL": broker, "DATABASE_URL": worker_database_url(name),
                  "CELERY_TASK_ALWAYS_EAGER": "0"}
    return subprocess.Popen(  # noqa: S603 - our own interpreter
        [sys.executable, "-m", "celery", "-A", "fleet", "worker", "--pool", pool, "--concurrency", "1",
         "--loglevel", loglevel, *(("-n", f"{name}@%h") if name else ()), "--without-heartbeat",
         "--without-gossip", "--without-mingle"],
        cwd=ROOT, env=worker_env, stdout=output, stderr=subprocess.STDOUT if output is subprocess.PIPE else output,
        text=output is subprocess.PIPE)
