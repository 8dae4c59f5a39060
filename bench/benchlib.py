"""What the benchmark scripts share: output, load, and their dedicated PostgreSQL database (imported by the
scripts as ``benchlib``: Python puts a script's own folder on the path)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
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


def backend_cpu_s() -> float:
    """CPU seconds used so far by this connection's PostgreSQL backend (same machine: /proc), 0 if unreadable."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class Timing:
    """Wall seconds, this process's CPU seconds and the PostgreSQL backend's CPU seconds of one timed case (the
    backend is this process's connection: a benchmark that times Django in-process has no other server)."""

    def __enter__(self) -> Timing:
        self.backend = backend_cpu_s()
        self.cpu, self.started = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.started
        self.cpu = time.process_time() - self.cpu
        self.backend = backend_cpu_s() - self.backend

    def per(self, n: int, unit: str) -> str:
        n = max(n, 1)
        return (f"CPU {1000 * self.cpu / n:.3f} ms/{unit} here + {1000 * self.backend / n:.3f} ms/{unit} PostgreSQL "
                f"backend = {(self.cpu + self.backend) / n * 1e3:.3f} ms/{unit}")

    def per_gpu(self, gpus: int) -> str:
        return self.per(gpus, "GPU")
