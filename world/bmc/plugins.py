"""Plugins: what an app adds to every simulated BMC (routes, resources, state), on top of the core.

A plugin module defines ``PLUGIN``, an instance of a subclass of :class:`Plugin`; ``python -m world.bmc
--plugin world.bmc.decommission`` (or ``SimulatorServer(plugins=["world.bmc.decommission"])``) loads it. The core
calls the hooks below; everything else a BMC does (authentication, fault injection, reboot windows, the
counters of mutating requests, task purging) applies to a plugin's routes as to the core's, for free.

A plugin's Redfish routes answer what a real BMC answers, no more. What only tests set or read (device faults,
the state inside) goes through the control API: ``control`` answers routes under ``/_sim/`` and ``index`` lists
them in ``GET /_sim/``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from .state import Bmc, Simulator

Response = tuple[int, dict | None, dict[str, str]]
ControlResponse = tuple[int, object]


class Plugin:
    """Override what you need; the defaults do nothing."""

    name: str = "plugin"
    index: ClassVar[dict[str, str]] = {}  # "METHOD /_sim/<path>" -> what it does (listed by GET /_sim/)

    def on_bmc_created(self, sim: Simulator, bmc: Bmc) -> None:
        """A BMC was created (or reset to its initial state): put your state in ``bmc.extra[self.name]``."""

    def route(self, sim: Simulator, bmc: Bmc, method: str, parts: tuple[str, ...], body: dict[str, Any],
              raw: bytes) -> Response | None:
        """Answer a Redfish request (``parts``: the path below /redfish/v1) or return None (not mine). Called
        with ``bmc.lock`` held, before the core's routes."""
        return None

    def control(self, sim: Simulator, method: str, parts: tuple[str, ...], data: Any) -> ControlResponse | None:
        """Answer a control-API request (``parts``: the path below /_sim, e.g. ("bmcs", "bmc-0001", "x"); ``data``:
        the JSON body, {} when empty) with (status, JSON body), or return None (not mine). Called without a lock
        (take ``bmc.lock`` to touch a BMC), after the core's own control routes; ValueError, TypeError or KeyError
        answer 400."""
        return None

    def tick(self, sim: Simulator, bmc: Bmc, now: float) -> None:
        """Before every request to this BMC (``bmc.lock`` held): advance your own timers."""

    def snapshot(self, sim: Simulator, bmc: Bmc) -> dict[str, Any]:
        """Merged into ``GET /_sim/bmcs/<id>``."""
        return {}

    def on_reset(self, sim: Simulator, bmc: Bmc, kind: str) -> None:
        """After a reset of the system, chassis or manager (``kind``: system, chassis, manager)."""


def load_plugins(names: list[str] | tuple[str, ...]) -> list[Plugin]:
    """Import each module and take its ``PLUGIN``; raises ValueError naming a module without one."""
    plugins = []
    for name in names:
        module = importlib.import_module(name)
        plugin = getattr(module, "PLUGIN", None)
        if not isinstance(plugin, Plugin):
            raise ValueError(f"{name} defines no PLUGIN (an instance of world.bmc.Plugin)")
        plugins.append(plugin)
    return plugins
