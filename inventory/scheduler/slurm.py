"""Slurm through its command-line clients (22.05+): ``sinfo --json``, ``squeue --json``, ``scontrol``.

Why the CLI and not slurmrestd: the clients come with every Slurm install and use the cluster's own munge
authentication (nothing more to deploy, no JWT keys to issue), and ``--json`` gives the same OpenAPI shapes
slurmrestd serves (docs/scheduler.md). In 22.05 ``sinfo --json`` and ``squeue --json`` ignore ``-n``/``-w``:
every call reads the whole cluster, so results are cached for ``FLEET_SCHEDULER_CACHE_SECONDS`` per process and
filtered here; hostlists (``gpu[01-04]``) are expanded by ``scontrol show hostnames``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from inventory.scheduler.base import NodeState, Scheduler, SchedulerError

_SIMPLE_HOSTS = re.compile(r"^[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*$")
_USERS = re.compile(r"^[A-Za-z0-9_.@-]+(,[A-Za-z0-9_.@-]+)*$")


class SlurmScheduler(Scheduler):
    name = "slurm"

    def __init__(self, *, conf: str = "", timeout: float = 10.0, cache_seconds: float = 1.0,
                 reservation_user: str = "root") -> None:
        if not _USERS.match(reservation_user):
            raise ValueError(f"FLEET_SLURM_RESERVATION_USER={reservation_user!r}: a user name or a comma-separated "
                             "list of them")
        self.reservation_user = reservation_user
        self.env = {**os.environ, **({"SLURM_CONF": conf} if conf else {})}
        self.timeout = timeout
        self.cache_seconds = cache_seconds
        self._lock = threading.Lock()
        self._cache: tuple[float, dict[str, NodeState]] | None = None
        self._hostlists: dict[str, list[str]] = {}

    # -- the CLI ---------------------------------------------------------------------------------------------
    def _run(self, *args: str) -> str:
        try:
            done = subprocess.run(list(args), capture_output=True, text=True, env=self.env,  # noqa: S603
                                  timeout=self.timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SchedulerError(f"{args[0]}: {exc}") from exc
        if done.returncode != 0:
            raise SchedulerError(f"{' '.join(args[:3])}: {done.stderr.strip() or done.returncode}")
        return done.stdout

    def _json(self, *args: str) -> dict[str, Any]:
        out = self._run(*args)
        try:
            data = json.loads(out)
        except ValueError as exc:
            raise SchedulerError(f"{args[0]} --json: not JSON ({exc})") from exc
        if data.get("errors"):
            raise SchedulerError(f"{args[0]}: {data['errors']}")
        return data

    def hostnames(self, hostlist: str) -> list[str]:
        if not hostlist or hostlist == "(null)":
            return []
        if _SIMPLE_HOSTS.match(hostlist):
            return hostlist.split(",")
        if hostlist not in self._hostlists:
            self._hostlists[hostlist] = self._run("scontrol", "show", "hostnames", hostlist).split()
        return self._hostlists[hostlist]

    def invalidate(self) -> None:
        with self._lock:
            self._cache = None

    # -- reads -----------------------------------------------------------------------------------------------
    def _cluster(self) -> dict[str, NodeState]:
        with self._lock:
            if self._cache and time.monotonic() - self._cache[0] < self.cache_seconds:
                return self._cache[1]
        nodes = self._json("sinfo", "--json").get("nodes", [])
        jobs: dict[str, list[int]] = {}
        for job in self._json("squeue", "--json").get("jobs", []):
            if str(job.get("job_state", "")).upper() not in ("RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING"):
                continue
            for host in self.hostnames(str(job.get("nodes") or "")):
                jobs.setdefault(host, []).append(int(job["job_id"]))
        states = {}
        for node in nodes:
            name = str(node["name"])
            at = node.get("reason_changed_at") or 0
            states[name] = NodeState(
                name=name, state=str(node.get("state", "unknown")).lower(),
                flags=tuple(str(f).upper() for f in node.get("state_flags") or ()),
                reason=str(node.get("reason") or ""), reason_user=str(node.get("reason_set_by_user") or ""),
                reason_at=dt.datetime.fromtimestamp(at, tz=dt.UTC) if at else None,
                partitions=tuple(node.get("partitions") or ()), jobs=tuple(sorted(jobs.get(name, ()))))
        with self._lock:
            self._cache = (time.monotonic(), states)
        return states

    def node_state(self, nodes: Iterable[str] | None = None) -> dict[str, NodeState]:
        cluster = self._cluster()
        if nodes is None:
            return dict(cluster)
        return {n: cluster[n] for n in nodes if n in cluster}

    # -- writes ----------------------------------------------------------------------------------------------
    def drain(self, node: str, reason: str) -> None:
        self._run("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")
        self.invalidate()

    def send_resume(self, node: str) -> None:
        self._run("scontrol", "update", f"NodeName={node}", "State=RESUME")
        self.invalidate()

    def requeue(self, jobs: Sequence[int]) -> None:
        if jobs:
            self._run("scontrol", "requeue", ",".join(str(j) for j in jobs))
            self.invalidate()

    def reserve(self, name: str, nodes: Sequence[str], start: dt.datetime, seconds: int) -> None:
        """A maintenance reservation (MAINT: the scheduler places no job on the nodes that would run into it;
        IGNORE_JOBS: it is created whatever runs there now), for ``FLEET_SLURM_RESERVATION_USER`` (only they could
        run jobs in it). scontrol reads StartTime in this process's local time zone (it sends epoch seconds)."""
        try:
            self._run("scontrol", "create", "reservation", f"ReservationName={name}", f"Nodes={','.join(nodes)}",
                      f"StartTime={start.astimezone().replace(tzinfo=None):%Y-%m-%dT%H:%M:%S}",
                      f"Duration={max(1, -(-seconds // 60))}", "Flags=MAINT,IGNORE_JOBS",
                      f"Users={self.reservation_user}")
        except SchedulerError as exc:
            if "Duplicate reservation name" not in str(exc):
                raise  # a worker that died after creating it: it is there, nothing more to do

    def unreserve(self, name: str) -> None:
        try:
            self._run("scontrol", "delete", f"ReservationName={name}")
        except SchedulerError as exc:
            if "Requested reservation is invalid" not in str(exc):
                raise  # deleted already (or it ended)
