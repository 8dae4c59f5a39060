"""A real Slurm cluster (session-scoped; tests/scheduler/slurm_cluster.py), pointed at by FLEET_SCHEDULER."""

import pytest

from tests.scheduler.slurm_cluster import slurm_cluster


@pytest.fixture(autouse=True)
def _step_threads_closed():
    """Rollouts driven in this process step on a thread pool whose threads keep their database connections:
    closed after each test (as in tests/firmware), so the test database can be dropped at the end."""
    yield
    from firmware.services.engine import steps

    steps.worker_pool_shutdown()


@pytest.fixture(scope="session")
def slurm_session():
    with slurm_cluster(nodes=4) as cluster:
        yield cluster


@pytest.fixture
def slurm(slurm_session, settings, monkeypatch):
    """The session's cluster, reset (no jobs, no drains, no reservations), configured as Fleet's scheduler."""
    slurm_session.reset()
    settings.FLEET_SCHEDULER = "slurm"
    settings.SLURM_CONF = str(slurm_session.conf)
    settings.FLEET_SCHEDULER_CACHE_SECONDS = 0
    settings.FLEET_SCHEDULER_POLL_SECONDS = 0.5
    monkeypatch.setenv("SLURM_CONF", str(slurm_session.conf))
    yield slurm_session
    slurm_session.run("scancel", "--user", "root", check=False)


class SlurmCalls:
    """The Slurm clients Fleet ran in this process, as wrapper scripts first on PATH logged them."""

    def __init__(self, log):
        self.log = log

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def count(self, prefix: str) -> int:
        """Invocations whose command line starts with ``prefix`` ("sinfo", "scontrol update", ...)."""
        return sum(line.startswith(prefix) for line in self.lines())

    def reset(self) -> None:
        self.log.write_text("")


@pytest.fixture
def slurm_calls(slurm, tmp_path, monkeypatch):
    """Every ``sinfo``/``squeue``/``scontrol`` Fleet runs (in this process), counted by wrappers that log their
    command line and exec the real client: the calls themselves, not a model of them."""
    import os
    import shutil

    from inventory import scheduler

    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    log = tmp_path / "slurm-calls.log"
    for name in ("sinfo", "squeue", "scontrol"):
        real = shutil.which(name)
        assert real, name
        wrapper = bin_dir / name
        wrapper.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nexec "{real}" "$@"\n')
        wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    scheduler.forget()  # the backend copies the environment when it is made
    yield SlurmCalls(log)
    scheduler.forget()
