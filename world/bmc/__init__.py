"""A Redfish BMC simulator: many virtual BMCs, each on its own loopback port, with firmware updates, tasks, resets,
activation and fault injection (a rebooting BMC's port refuses connections: listeners.py). Pure stdlib, importable
without Django settings.

    from world.bmc import SimulatorServer
    server = SimulatorServer(bmcs=64, task_seconds=2, seed=1)
    url = server.start()           # http://127.0.0.1:<port>: the control API at f"{url}/_sim/"
    server.bmc_url("bmc-0001")     # http://127.0.0.1:<its own port>/bmc/bmc-0001 (also GET /_sim/bmcs)
    server.stop()

Also: ``python -m world.bmc --port 8100 --bmcs 64`` (``--shared-port``: every BMC on the main port), and
``world.bmc.testing`` (running_simulator, SimulatorProcess, SimulatorControl).

Plugins (``--plugin pkg.module``, ``SimulatorServer(plugins=[...])``) add routes and state to every BMC, and
control routes under ``/_sim/`` for what only tests set or see: ``plugins.Plugin``. The core's fault injection and counters of mutating requests (``GET /_sim/counters``)
apply to plugin routes too (docs: /work/coord/shared-exec.md, docs/firmware.md).
"""

from .messages import RedfishError
from .plugins import Plugin
from .records import ManualClock
from .server import SimulatorServer
from .state import Bmc, Simulator

__all__ = ["Bmc", "ManualClock", "Plugin", "RedfishError", "Simulator", "SimulatorServer"]
