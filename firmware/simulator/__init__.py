"""A Redfish BMC simulator: many virtual BMCs behind one HTTP port, with firmware updates, tasks, resets,
activation and fault injection. Pure stdlib, importable without Django settings.

    from firmware.simulator import SimulatorServer
    server = SimulatorServer(bmcs=64, task_seconds=2, seed=1)
    url = server.start()           # http://127.0.0.1:<port>; BMC n is at f"{url}/bmc/bmc-{n:04d}"
    server.stop()

Also: ``python -m firmware.simulator --port 8100 --bmcs 64``, ``manage.py bmc_simulator``, and
``firmware.simulator.testing`` (running_simulator, SimulatorProcess, SimulatorControl).
"""

from .server import SimulatorServer
from .state import ManualClock, Simulator

__all__ = ["ManualClock", "Simulator", "SimulatorServer"]
