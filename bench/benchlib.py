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


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def pid_cpu(pid: int) -> float:
    """CPU seconds (user + system) of one process so far (Linux ``/proc``; 0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def backend_cpu_s() -> float:
    """CPU seconds used so far by this connection's PostgreSQL backend (same machine: /proc), 0 if unreadable."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    return pid_cpu(pid)


def processes_cpu(procs: Iterable[subprocess.Popen]) -> float:  # type: ignore[type-arg]
    """CPU seconds of these processes and their children so far."""
    procs = list(procs)
    return sum(pid_cpu(pid) for pid in [p.pid for p in procs] + [c for p in procs for c in children(p.pid)])


def postgres_cpu() -> float:
    """CPU seconds of the local PostgreSQL server so far: every live postgres process's own time plus the time of
    the children each has reaped (a backend that exited, its connection closed, is counted in the postmaster's
    cutime/cstime, so the sum only grows). On a quiet machine its other sessions are idle."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if "(postgres)" in text[:64] or "(postmaster)" in text[:64]:
            fields = text.rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime
    return total


class CpuMeter:
    """CPU seconds spent between ``start()`` and ``stop()`` by the named processes, this process and PostgreSQL:
    the cost of the work beside its wall time (``per(n)``: milliseconds per operation, per part)."""

    def __init__(self, **procs: Iterable[subprocess.Popen]) -> None:  # type: ignore[type-arg]
        self.procs = {name: list(p) for name, p in procs.items()}

    def read(self) -> dict[str, float]:
        return {**{name: processes_cpu(p) for name, p in self.procs.items()}, "this process": time.process_time(),
                "postgres": postgres_cpu()}

    def start(self) -> CpuMeter:
        self.before = self.read()
        return self

    def stop(self) -> dict[str, float]:
        after = self.read()
        self.used = {k: after[k] - self.before[k] for k in after}
        return self.used

    def per(self, n: int, what: str) -> str:
        n = max(n, 1)
        parts = ", ".join(f"{k} {1000 * v / n:.1f}" for k, v in self.used.items())
        return f"CPU {1000 * sum(self.used.values()) / n:.1f} ms per {what} ({parts})"

    def total_ms_per(self, n: int) -> float:
        return round(1000 * sum(self.used.values()) / max(n, 1), 2)


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
