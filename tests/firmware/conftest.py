"""Fixtures of the firmware tests: ``drive`` runs a rollout in this process (the tick, then the step chunks it
sends through ``fleet.dispatch``), for engine tests that are not about worker processes."""

import time

import pytest

from firmware.models import RolloutTarget
from firmware.services import engine
from firmware.services.engine import steps
from fleet import dispatch
from fleet import redfish as fleet_redfish


@pytest.fixture(autouse=True)
def _step_threads_closed():
    """Steps run on a per-process thread pool whose threads keep their database connections: closed after each
    test that stepped in this process (so the test database can be dropped)."""
    yield
    steps.worker_pool_shutdown()


@pytest.fixture
def drive(monkeypatch, settings):
    """``drive(rollout, until)``: tick and run the steps it sends, in this process, until ``until(rollout)``;
    ``each_step()``, if given, is called after the tick and after every chunk of steps."""
    settings.FLEET_BMC_TIMEOUT = 2
    settings.FLEET_ROLLOUT_LEASE_SECONDS = 2
    settings.FLEET_BMC_SETTLE_SECONDS = 3  # the simulator answers (or forgets) within a second
    queue: list = []

    def send(name, *args, **kwargs):  # every task goes through the dispatch seam: keep the step chunks (the
        # services' ticks are dropped: this driver ticks)
        if name == "firmware.tasks.rollout_steps_task":
            queue.append(args[0])
        return True

    monkeypatch.setattr(dispatch, "send", send)
    fleet_redfish.sessions_clear()

    def run(rollout, until, timeout: float = 40, each_step=lambda: None):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            engine.rollout_tick()
            each_step()
            while queue:
                engine.target_steps(queue.pop(0))
                each_step()
            rollout.refresh_from_db()
            if until(rollout):
                return rollout
            time.sleep(0.1)
        states = list(RolloutTarget.objects.filter(rollout=rollout).values_list("state", "last_error"))
        raise AssertionError(f"rollout {rollout.state} {rollout.pause_reason!r}: {states}")

    return run


