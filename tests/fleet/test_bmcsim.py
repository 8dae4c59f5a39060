"""world/bmc's core for every plugin, over real HTTP through fleet/redfish.py: a plugin's routes, the counters
of mutating requests, late processing, reboot windows (refused / 503 / 404), task purging, error kinds."""

import time

import pytest

from world.bmc.testing import SimulatorControl, SimulatorProcess, running_simulator
from fleet.redfish import BmcError, ErrorKind, RedfishSession

ERASE = "/redfish/v1/Systems/1/Storage/1/Drives/0/Actions/Drive.SecureErase"


def test_a_plugin_route_is_counted_and_its_task_completes():
    with running_simulator(bmcs=2, plugins=["tests.fleet.bmcsim_plugin"]) as sim:
        session = RedfishSession(sim.bmc_url("bmc-0001"), timeout=2)
        response = session.post(ERASE, {"Mode": "Sanitize"})
        assert response.status == 202 and response.task_location.startswith("/redfish/v1/TaskService/Tasks/")
        assert session.get(response.task_location)["TaskState"] == "Completed"
        assert session.get("/redfish/v1/Systems/1/Storage/1/Drives/0")["Wiped"] is True
        with pytest.raises(BmcError) as refused:
            session.post(ERASE, {"Mode": "Overwrite"})
        assert refused.value.kind == ErrorKind.DEFINITE and refused.value.status == 400
        control = SimulatorControl(sim.url)
        counters = control.counters()["bmcs"]["bmc-0001"]
        assert counters["received"][f"POST {ERASE}"] == 2 and counters["processed"][f"POST {ERASE}"] == 2
        assert "bmc-0002" not in control.counters()["bmcs"]
        assert control.bmc("bmc-0001")["erase"]["wiped"] is True


def test_late_processing_is_ambiguous_and_lands_after_the_client_gave_up():
    with running_simulator(bmcs=1, plugins=["tests.fleet.bmcsim_plugin"],
                           faults=[{"kind": "late", "method": "POST", "seconds": 1.5}]) as sim:
        session = RedfishSession(sim.bmc_url("bmc-0001"), timeout=0.5)
        with pytest.raises(BmcError) as lost:
            session.post(ERASE, {})
        assert lost.value.kind == ErrorKind.AMBIGUOUS
        control = SimulatorControl(sim.url)
        assert control.counters()["bmcs"]["bmc-0001"]["processed"] == {}
        deadline = time.monotonic() + 10
        while not control.counters()["bmcs"]["bmc-0001"]["processed"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert control.counters()["bmcs"]["bmc-0001"]["processed"] == {f"POST {ERASE}": 1}
        assert control.counters()["faults"]["late"] == 1


@pytest.mark.parametrize("mode", ["503", "404", "refused"])
def test_a_reboot_window_is_infra_for_reads_within_the_boot_grace(mode):
    with running_simulator(bmcs=1) as sim:
        control = SimulatorControl(sim.url)
        session = RedfishSession(sim.bmc_url("bmc-0001"), timeout=1, boot_grace_seconds=30)
        session.expect_reboot()
        control.reboot("bmc-0001", 30, mode)
        with pytest.raises(BmcError) as down:
            session.get("/redfish/v1/UpdateService/FirmwareInventory")
        assert down.value.kind == ErrorKind.INFRA
        assert control.counters()["reboot_windows"] == 1


def test_purged_tasks_vanish_and_the_staged_image_stays_visible():
    with running_simulator(bmcs=1, purge_tasks_after=0.01) as sim:
        session = RedfishSession(sim.bmc_url("bmc-0001"), timeout=2)
        session.post("/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
                     {"ImageURI": "http://x/96.00.AA.00.01.fwpkg", "Targets": [
                         "/redfish/v1/UpdateService/FirmwareInventory/HGX_FW_GPU_SXM_1"], "Stage": True})
        time.sleep(0.05)
        assert session.get("/redfish/v1/TaskService/Tasks")["Members"] == []
        item = session.get("/redfish/v1/UpdateService/FirmwareInventory/HGX_FW_GPU_SXM_1")
        assert item["Oem"]["FleetSim"]["PendingImage"]["Version"] == "96.00.AA.00.01"


def test_the_command_line_loads_plugins():
    with SimulatorProcess(bmcs=1, plugins=("tests.fleet.bmcsim_plugin",)) as proc:
        session = RedfishSession(proc.bmc_url("bmc-0001"), timeout=2)
        assert session.post(ERASE, {}).status == 202
        assert proc.control.counters()["bmcs"]["bmc-0001"]["processed"] == {f"POST {ERASE}": 1}
