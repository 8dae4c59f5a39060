"""Helpers for tests and benchmarks: the simulator in this process, in a child process, and a control client.

    with running_simulator(bmcs=8, task_seconds=0, seed=1) as sim:   # a started SimulatorServer
        sim.bmc_url("bmc-0001"); sim.sim.stats.as_json()

    proc = SimulatorProcess(bmcs=8, task_seconds=0).start()           # python -m world.bmc
    proc.bmc_url("bmc-0001")                                          # http://127.0.0.1:<its port>/bmc/bmc-0001
    proc.control.configure(faults=[...]); proc.kill(); proc.start()   # restart on the same ports, fresh state

Each BMC listens on its own port (server.py, listeners.py): ``bmc_url`` is what ``GET /_sim/bmcs`` reports.
"""

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .server import SimulatorServer


@contextmanager
def running_simulator(**config: object) -> Iterator[SimulatorServer]:
    """A SimulatorServer started in a background thread; keyword arguments as SimulatorServer's."""
    server = SimulatorServer(**config)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class SimulatorControl:
    """A client of the ``/_sim/`` control API (stdlib urllib), for a simulator in another process."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def request(self, method: str, path: str, data: object = None):
        body = None if data is None else json.dumps(data).encode()
        req = urllib.request.Request(f"{self.url}/_sim/{path}", data=body, method=method,  # noqa: S310 - loopback
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 - our own loopback URL
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{method} /_sim/{path}: {exc.code} {exc.read()!r}") from None
        return json.loads(raw) if raw else None

    def configure(self, **changes: object) -> dict:
        return self.request("POST", "config", changes)

    def create_bmcs(self, **spec: object) -> list[str]:
        return self.request("POST", "bmcs", spec)["ids"]

    def bmc(self, bmc_id: str) -> dict:
        return self.request("GET", f"bmcs/{bmc_id}")

    def bmc_urls(self) -> dict[str, str]:
        """Every BMC's base URL (``GET /_sim/bmcs``)."""
        return {m["id"]: m["url"] for m in self.request("GET", "bmcs")["Members"]}

    def stats(self, bmc: str | None = None) -> dict:
        return self.request("GET", f"stats?bmc={bmc}" if bmc else "stats")

    def counters(self, bmc: str | None = None) -> dict:
        return self.request("GET", f"counters?bmc={bmc}" if bmc else "counters")

    def reboot(self, bmc_id: str, seconds: float, mode: str = "") -> None:
        self.request("POST", f"bmcs/{bmc_id}/reboot", {"seconds": seconds, "mode": mode})

    def reset_stats(self) -> None:
        self.request("POST", "stats/reset")

    def advance(self, seconds: float) -> None:
        self.request("POST", "clock/advance", {"seconds": seconds})


class SimulatorProcess:
    """``python -m world.bmc`` as a child process. ``start()`` waits for the URL line; after the first
    start the ports are kept (the main one and each BMC's), so ``kill()`` then ``start()`` is a BMC fleet that
    crashed and came back empty-handed (state is in memory only) at the same URLs."""

    def __init__(self, *, port: int = 0, bmcs: int = 8, profile: str = "hgx-h100", task_seconds: float = 0.0,
                 seed: int = 0, extra_args: tuple[str, ...] = (), plugins: tuple[str, ...] = ()) -> None:
        self.port = port
        self.args = ["--bmcs", str(bmcs), "--profile", profile, "--task-seconds", str(task_seconds),
                     "--seed", str(seed), *extra_args, *(a for p in plugins for a in ("--plugin", p))]
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.bmc_ports: dict[str, int] = {}  # BMC id -> its own port, passed again on a restart
        self._urls: dict[str, str] = {}

    @property
    def control(self) -> SimulatorControl:
        return SimulatorControl(self.url)

    def bmc_url(self, bmc_id: str) -> str:
        """The BMC's base URL as the simulator reports it (asked again for a BMC created since); an unknown id's
        URL is on the main port, where it answers 404."""
        if bmc_id not in self._urls:
            self._refresh()
        return self._urls.get(bmc_id) or f"{self.url}/bmc/{bmc_id}"

    def _refresh(self) -> None:
        self._urls = self.control.bmc_urls()
        for bmc_id, url in self._urls.items():
            port = int(url.split("/", 3)[2].rsplit(":", 1)[1])
            if port != self.port:
                self.bmc_ports[bmc_id] = port

    def start(self) -> "SimulatorProcess":
        root = Path(__file__).resolve().parents[2]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
        ports = ("--bmc-ports", json.dumps(self.bmc_ports)) if self.bmc_ports else ()
        self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "world.bmc", "--port", str(self.port), *ports, *self.args],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=root)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("http://"):
            self.kill()
            raise RuntimeError(f"BMC simulator did not start: {line!r}")
        self.url = line
        self.port = int(line.rsplit(":", 1)[1])
        self._refresh()
        return self

    def stop(self) -> None:
        """SIGTERM, as a clean shutdown."""
        self._end(self.proc.terminate if self.proc else None)

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        self._end(self.proc.kill if self.proc else None)

    def _end(self, signal_fn) -> None:
        if self.proc is None or signal_fn is None:
            return
        if self.proc.poll() is None:
            signal_fn()
        try:
            self.proc.wait(timeout=10)
        finally:
            if self.proc.stdout:
                self.proc.stdout.close()
            self.proc = None

    def __enter__(self) -> "SimulatorProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()
