"""What the benchmark scripts share: output, load, and their dedicated PostgreSQL database (imported by the
scripts as ``benchlib``: Python puts a script's own folder on the path)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit


def say(text: str = "") -> None:
    print(text, flush=True)


def loadavg() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def stop_processes(procs: Iterable[subprocess.Popen], timeout: float = 20) -> None:
    """Terminate every process still running, wait for each, kill one that outlives ``timeout``."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()


def bench_database_url(url: str, default: str) -> str:
    """``url`` on the database ``default`` unless it already names one of that kind (``fleet_bench_fw`` keeps a
    database named ``..bench_fw..``): a benchmark recreates its database, so it never runs on another one."""
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        sys.exit(f"{sys.argv[0]} needs PostgreSQL: DATABASE_URL=postgres://user@host:5432/{default}")
    name = parts.path.lstrip("/")
    return urlunsplit(parts._replace(path=f"/{name if default.removeprefix('fleet_') in name else default}"))


def recreate_database(url: str) -> None:
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
