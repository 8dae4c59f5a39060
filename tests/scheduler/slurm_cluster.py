# ruff: noqa: S603, S607 - our own Slurm test cluster: the binaries on PATH are the ones under test
"""A real Slurm cluster for tests: munged (started if not running), slurmctld and one ``slurmd -N`` per node, in
a temporary directory, on free ports of our own (several test runs may share the machine). Nothing is skipped:
missing binaries fail loudly. The configuration is the one of ../shared/design/scheduler.md."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = ("slurmctld", "slurmd", "sinfo", "squeue", "scontrol", "sbatch", "scancel", "munged")


class SlurmUnavailable(RuntimeError):
    pass


def _free_ports(n: int) -> list[int]:
    """``n`` consecutive free TCP ports (slurm.conf's ``Port=[a-b]`` wants a range)."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + n > 65000:
            continue
        ok = True
        for port in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return list(range(base, base + n))
    raise SlurmUnavailable("no free port range for the Slurm test cluster")


def _munge_running() -> bool:
    return subprocess.run(["munge", "-n"], capture_output=True, timeout=10).returncode == 0 if shutil.which(
        "munge") else False


@dataclass
class SlurmCluster:
    root: Path
    nodes: list[str]
    conf: Path
    env: dict[str, str] = field(default_factory=dict)
    pids: list[int] = field(default_factory=list)
    log_offset: int = 0

    def run(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(list(args), capture_output=True, text=True, env=self.env, timeout=30)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {done.returncode} {done.stderr.strip()}")
        return done.stdout

    def sbatch(self, node: str, seconds: float) -> int:
        """A real job on ``node``: ``sleep seconds``; returns its id once it runs."""
        out = self.run("sbatch", "--parsable", "-w", node, "-o", "/dev/null", "--wrap", f"sleep {seconds}")
        job = int(out.strip().split(";")[0])
        self.wait(lambda: self.job_state(job) == "RUNNING", f"job {job} running on {node}")
        return job

    def job_state(self, job: int) -> str:
        out = self.run("squeue", "-h", "-j", str(job), "-o", "%T", check=False).strip()
        return out or "GONE"

    def node_line(self, node: str) -> tuple[str, str]:
        """(state, reason) as ``sinfo -N`` prints them, e.g. ("draining", "fleet: ...")."""
        out = self.run("sinfo", "-h", "-N", "-n", node, "-o", "%T|%E").strip().splitlines()
        state, _, reason = out[0].partition("|")
        return state.strip().rstrip("*~#!%$@^-"), reason.strip()

    def reset(self) -> None:
        """Between tests: cancel every job, resume every node, drop reservations."""
        self.run("scancel", "--user", "root", check=False)
        for line in self.run("scontrol", "show", "reservation", "-o", check=False).splitlines():
            if line.startswith("ReservationName="):
                name = line.split()[0].split("=", 1)[1]
                self.run("scontrol", "delete", f"ReservationName={name}", check=False)
        self.wait(lambda: not self.run("squeue", "-h", check=False).strip(), "no job left")
        for node in self.nodes:
            state, _ = self.node_line(node)
            if "drain" in state or "down" in state:
                self.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
        self.wait(lambda: all(self.node_line(n)[0] == "idle" for n in self.nodes), "every node idle")
        self.log_offset = len(self.log(whole=True))

    def log(self, whole: bool = False) -> str:
        """slurmctld's log since the last ``reset`` (the whole of it with ``whole``)."""
        text = (self.root / "log" / "slurmctld.log").read_text(errors="replace")
        return text if whole else text[self.log_offset:]

    @staticmethod
    def wait(condition, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}")


CONF = """ClusterName=fleettest{tag}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
ReturnToService=2
MpiDefault=none
SlurmctldDebug=info
MinJobAge=300
NodeName={first}[01-{count:02d}] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[{node_lo}-{node_hi}] CPUs=1 RealMemory=1000 State=UNKNOWN
PartitionName=batch Nodes={first}[01-{count:02d}] Default=YES MaxTime=INFINITE State=UP
"""


@contextmanager
def slurm_cluster(nodes: int = 4, prefix: str = "gpu") -> Iterator[SlurmCluster]:
    missing = [b for b in BINARIES if shutil.which(b) is None and not Path(f"/usr/sbin/{b}").exists()]
    if missing:
        raise SlurmUnavailable(f"Slurm/munge binaries missing: {missing} (apt-get install slurmctld slurmd "
                               "slurm-client munge)")
    if not _munge_running():
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        started = subprocess.run(["/usr/sbin/munged", "--force"], capture_output=True, text=True, timeout=30)
        if started.returncode != 0 and not _munge_running():
            raise SlurmUnavailable(f"munged would not start: {started.stderr.strip()}")
        SlurmCluster.wait(_munge_running, "munged")
    root = Path(tempfile.mkdtemp(prefix="fleet-slurm-"))
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir()
    ports = _free_ports(nodes + 2)
    names = [f"{prefix}{i:02d}" for i in range(1, nodes + 1)]
    conf = root / "slurm.conf"
    conf.write_text(CONF.format(tag=os.getpid(), ctld_port=ports[0], slurmd_port=ports[1], root=root,
                                first=prefix, count=nodes, node_lo=ports[2], node_hi=ports[-1]))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    cluster = SlurmCluster(root=root, nodes=names, conf=conf, env=env)
    try:
        subprocess.run(["slurmctld", "-c", "-f", str(conf)], check=True, env=env, timeout=30)
        for name in names:
            (root / "spool" / name).mkdir()
            subprocess.run(["slurmd", "-f", str(conf), "-N", name], check=True, env=env, timeout=30)
        cluster.wait(lambda: all(cluster.node_line(n)[0] == "idle" for n in names), "every slurm node idle", 60)
        yield cluster
    finally:
        for pidfile in sorted(root.glob("*.pid")):
            try:
                os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
            except (ValueError, ProcessLookupError, OSError):
                pass
        deadline = time.monotonic() + 10
        for pidfile in sorted(root.glob("*.pid")):
            try:
                pid = int(pidfile.read_text().strip())
                while time.monotonic() < deadline:
                    os.kill(pid, 0)
                    time.sleep(0.1)
                os.kill(pid, signal.SIGKILL)
            except (ValueError, ProcessLookupError, OSError):
                pass
        shutil.rmtree(root, ignore_errors=True)
