"""The BMC simulator moved to ``fleet.bmcsim`` (shared by firmware and decommission, with plugins); this name
stays so ``python -m firmware.simulator`` and old imports keep working."""

from fleet.bmcsim import ManualClock, Plugin, Simulator, SimulatorServer

__all__ = ["ManualClock", "Plugin", "Simulator", "SimulatorServer"]
