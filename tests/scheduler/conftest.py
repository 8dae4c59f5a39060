"""A real Slurm cluster (session-scoped; tests/scheduler/slurm_cluster.py), pointed at by FLEET_SCHEDULER."""

import pytest

from tests.scheduler.slurm_cluster import slurm_cluster


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
