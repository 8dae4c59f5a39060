"""world/bmc's core for every plugin, over real HTTP through fleet/redfish.py: a plugin's routes, the counters
of mutating requests, late processing, reboot windows (refused at connect() on each BMC's own port, reset on the
shared port, 503 / 404), task purging, error kinds."""

import datetime
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest
import requests

from fleet.redfish import BmcError, ErrorKind, RedfishSession
from world.bmc.testing import SimulatorControl, SimulatorProcess, running_simulator

ERASE = "/redfish/v1/Systems/1/Storage/1/Drives/0/Actions/Drive.SecureErase"
RESET = "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"


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


def wait_for(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_purged_tasks_vanish_and_the_staged_image_stays_visible_to_the_control_api_only():
    with running_simulator(bmcs=1, purge_tasks_after=0.01) as sim:
        control = SimulatorControl(sim.url)
        session = RedfishSession(sim.bmc_url("bmc-0001"), timeout=2)
        session.post("/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
                     {"ImageURI": "http://x/96.00.AA.00.01.fwpkg", "Targets": [
                         "/redfish/v1/UpdateService/FirmwareInventory/HGX_FW_GPU_SXM_1"], "Stage": True})
        wait_for(lambda: session.get("/redfish/v1/TaskService/Tasks")["Members"] == [])
        item = session.get("/redfish/v1/UpdateService/FirmwareInventory/HGX_FW_GPU_SXM_1")
        assert "Oem" not in item and item["Version"] == "96.00.89.00.01"
        pending = control.bmc("bmc-0001")["components"]["HGX_FW_GPU_SXM_1"]["pending"]
        assert pending["Version"] == "96.00.AA.00.01" and pending["State"] == "Staged"
        assert control.counters()["faults"]["purged"] == 1


def _crawl(session, path, seen):
    if path in seen or len(seen) > 200:
        return
    seen.add(path)
    doc = session.get(path)
    yield path, doc
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "RelatedItem":  # hardware the simulator does not model beyond its inventory
                    continue
                if key == "@odata.id" and isinstance(value, str) and value.startswith("/redfish/v1") \
                        and "#" not in value and value.rstrip("/") != path.rstrip("/"):
                    yield from _crawl(session, value.rstrip("/") or value, seen)
                else:
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)


def _keys(node):
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _keys(value)
    elif isinstance(node, list):
        for value in node:
            yield from _keys(value)


@pytest.mark.parametrize("profile", ["hgx-h100", "generic"])
def test_default_profiles_answer_standard_redfish_only(profile):
    """Every resource reachable from the service root (tasks included): no Oem object, no task Payload; tasks
    name image, component and version in Messages[].MessageArgs and carry StartTime/EndTime."""
    with running_simulator(bmcs=1, profile=profile) as sim:
        session = RedfishSession(sim.bmc_url("bmc-0001"), timeout=2)
        target = "HGX_FW_GPU_SXM_1" if profile == "hgx-h100" else "NIC"
        session.post("/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
                     {"ImageURI": "http://x/9.9.9.fwpkg", "Targets": [
                         f"/redfish/v1/UpdateService/FirmwareInventory/{target}"], "Stage": True})
        docs = dict(_crawl(session, "/redfish/v1", set()))
        assert "/redfish/v1/TaskService/Tasks/1" in docs and len(docs) > 10
        for path, doc in docs.items():
            keys = set(_keys(doc))
            assert "Oem" not in keys and "Payload" not in keys, path
        task = docs["/redfish/v1/TaskService/Tasks/1"]
        args = [a for m in task["Messages"] for a in m["MessageArgs"]]
        assert {"http://x/9.9.9.fwpkg", target, "9.9.9"} <= set(args)
        assert task["StartTime"] and task["EndTime"]


def test_a_task_monitor_answers_the_finished_task_once_then_404():
    with running_simulator(bmcs=1) as sim:
        session = RedfishSession(sim.bmc_url("bmc-0001"), timeout=2)
        reply = session.post("/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
                             {"ImageURI": "http://x/9.9.9.fwpkg", "Targets": [
                                 "/redfish/v1/UpdateService/FirmwareInventory/HGX_FW_GPU_SXM_1"]})
        monitor = reply.body["TaskMonitor"]
        assert session.request("GET", monitor).status == 200
        assert session.request("GET", monitor).status == 404
        assert session.get(reply.task_location)["TaskState"] == "Completed"


def _port(url):
    parts = urlsplit(url)
    return parts.hostname, parts.port


def test_a_rebooting_bmc_refuses_connections_on_its_own_port_and_answers_again_after_the_window():
    """Each BMC listens on its own port; in a refused reboot window that port is closed: the kernel refuses the
    connection (a POST is INFRA: it never left), an idle keep-alive connection is dropped, nothing is received.
    Afterwards the same URL answers; another BMC answers throughout."""
    with running_simulator(bmcs=2) as sim:
        control = SimulatorControl(sim.url)
        url, other_url = sim.bmc_url("bmc-0001"), sim.bmc_url("bmc-0002")
        assert len({_port(url), _port(other_url), _port(sim.url)}) == 3
        assert control.bmc_urls() == {"bmc-0001": url, "bmc-0002": other_url}
        session = RedfishSession(url, timeout=2)
        other = RedfishSession(other_url, timeout=2)
        assert session.get("/redfish/v1/Systems/1")["PowerState"] == "On"  # leaves a keep-alive connection
        control.reboot("bmc-0001", 1.5, "refused")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(_port(url), timeout=2).close()
        with pytest.raises(BmcError) as down:
            session.post(RESET, {"ResetType": "ForceRestart"})
        assert down.value.kind == ErrorKind.INFRA  # refused at connect(): the request never left
        assert other.get("/redfish/v1/Systems/1")["PowerState"] == "On"  # only that BMC is down
        counters = control.counters()
        assert counters["faults"]["refused"] == 1 and "connection_reset" not in counters["faults"]
        assert "bmc-0001" not in counters["bmcs"]  # nothing received, so nothing processed

        def answers():
            try:
                return session.get("/redfish/v1/Systems/1")["PowerState"] == "On"
            except BmcError as exc:
                assert exc.kind == ErrorKind.INFRA
                return False

        wait_for(answers)
        assert sim.bmc_url("bmc-0001") == url and control.bmc("bmc-0001")["unreachable_for"] == 0
        assert session.post(RESET, {"ResetType": "ForceRestart"}).status == 204
        assert other.get("/redfish/v1/Systems/1")["PowerState"] == "On"


def _connects(url):
    try:
        socket.create_connection(_port(url), timeout=2).close()
    except ConnectionRefusedError:
        return False
    return True


def test_a_bmc_reset_answers_then_its_port_refuses_until_it_is_back():
    with running_simulator(bmcs=1, bmc_reset_seconds=1.0) as sim:
        url = sim.bmc_url("bmc-0001")
        session = RedfishSession(url, timeout=2)
        reset = session.post("/redfish/v1/Managers/1/Actions/Manager.Reset", {"ResetType": "GracefulRestart"})
        assert reset.status == 204  # the answer arrives, then the BMC goes down
        assert not _connects(url)
        wait_for(lambda: _connects(url))
        assert session.get("/redfish/v1/Managers/1")["Id"] == "1"


def test_on_the_shared_port_a_rebooting_bmc_resets_the_connection_and_processes_nothing():
    """``shared_port`` (``--shared-port``): every BMC on one port, so a refusal cannot fail the connect(); the
    connection is reset instead, which a client cannot tell from a reset after its send (a POST: ambiguous)."""
    with running_simulator(bmcs=2, shared_port=True) as sim:
        assert sim.bmc_url("bmc-0001") == f"{sim.url}/bmc/bmc-0001"
        control = SimulatorControl(sim.url)
        control.reboot("bmc-0001", 30, "refused")
        session = RedfishSession(sim.bmc_url("bmc-0001"), timeout=2)
        with pytest.raises(BmcError) as down:
            session.post(RESET, {"ResetType": "ForceRestart"})
        assert "reset" in str(down.value).lower() and down.value.kind == ErrorKind.AMBIGUOUS
        counters = control.counters()
        assert counters["faults"]["refused"] == 1 and counters["faults"]["connection_reset"] == 1
        assert counters["bmcs"]["bmc-0001"]["processed"] == {}
        other = RedfishSession(sim.bmc_url("bmc-0002"), timeout=2)
        assert other.get("/redfish/v1/Systems/1")["PowerState"] == "On"  # only that BMC is down


def test_a_skewed_bmc_clock_shows_in_its_times_and_each_manager_resets_on_its_own():
    with running_simulator(bmcs=1) as sim:
        control = SimulatorControl(sim.url)
        control.request("POST", "bmcs/bmc-0001/clock", {"skew_seconds": -300})
        session = RedfishSession(sim.bmc_url("bmc-0001"), timeout=2)
        hmc = session.get("/redfish/v1/Managers/HGX_BMC_0")
        bmc = session.get("/redfish/v1/Managers/1")
        skewed = datetime.datetime.fromisoformat(bmc["DateTime"])
        assert (datetime.datetime.now(datetime.UTC) - skewed).total_seconds() > 290
        assert len(hmc["LastResetTime"]) == len("2026-01-01T00:00:00+00:00")  # one-second resolution
        before = session.get("/redfish/v1/Managers/1")["LastResetTime"]
        wait_for(lambda: session.get("/redfish/v1/Managers/1")["DateTime"] != before)  # a second later
        session.post("/redfish/v1/Managers/HGX_BMC_0/Actions/Manager.Reset", {"ResetType": "GracefulRestart"})
        assert session.get("/redfish/v1/Managers/HGX_BMC_0")["LastResetTime"] != hmc["LastResetTime"]
        assert session.get("/redfish/v1/Managers/1")["LastResetTime"] == before  # the HMC's reset is its own
        assert control.stats()["manager_resets"] == {"bmc-0001/HGX_BMC_0": 1}


def test_a_hold_rule_parks_requests_until_released():
    with running_simulator(bmcs=1) as sim:
        control = SimulatorControl(sim.url)
        control.configure(faults=[{"kind": "hold", "method": "POST", "path": "/redfish/v1/Systems/*"}])
        session = RedfishSession(sim.bmc_url("bmc-0001"), timeout=10)
        result = []
        thread = threading.Thread(target=lambda: result.append(session.post(
            "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", {"ResetType": "ForceOff"})))
        thread.start()
        wait_for(lambda: control.request("GET", "holds")["waiting"])
        assert control.counters()["bmcs"]["bmc-0001"]["processed"] == {}
        assert control.request("POST", "holds/release", {})["released"] == 1
        thread.join(10)
        assert result[0].status == 204 and session.get("/redfish/v1/Systems/1")["PowerState"] == "Off"


def test_the_command_line_loads_plugins():
    with SimulatorProcess(bmcs=1, plugins=("tests.fleet.bmcsim_plugin",)) as proc:
        session = RedfishSession(proc.bmc_url("bmc-0001"), timeout=2)
        assert session.post(ERASE, {}).status == 202
        assert proc.control.counters()["bmcs"]["bmc-0001"]["processed"] == {f"POST {ERASE}": 1}


# Where Fleet's decommission inventory reads the plugin's resources (decommission/collect.py): standard places
# below the system, chassis and managers that the core's renderings do not link.
DECOMMISSION_ENTRY_POINTS = ("/redfish/v1/Systems/1/Storage", "/redfish/v1/Systems/1/LogServices",
                             "/redfish/v1/Systems/1/Bios", "/redfish/v1/Chassis/1/NetworkAdapters/DPU_0",
                             "/redfish/v1/Chassis/1/TrustedComponents/TPM_0", "/redfish/v1/Managers/1/LogServices/Log",
                             "/redfish/v1/Managers/HGX_BMC_0/LogServices/Log")


class _TextSession:
    """GETs for ``_crawl`` that keep each answer's text."""

    def __init__(self, base):
        self.base, self.texts = base, {}
        self.http = requests.Session()
        self.http.auth = ("fleet", "fleet")

    def get(self, path):
        reply = self.http.get(self.base + path, timeout=5)
        assert reply.status_code == 200, (path, reply.status_code, reply.text)
        self.texts[path] = reply.text
        return reply.json()


def test_decommission_plugin_answers_carry_no_simulator_fields_and_its_test_inputs_are_control_routes():
    """Every answer reachable from the service root and from the plugin's standard entry points, after erases
    that finished, failed (a device fault set through the control API) and still run: no "FleetSim", no Oem key.
    The old simulator-only Redfish resource is a standard 404."""
    with running_simulator(bmcs=1, plugins=["world.bmc.decommission"]) as sim:
        control = SimulatorControl(sim.url)
        session = RedfishSession(sim.bmc_url("bmc-0001"), timeout=2)
        dpu = "/redfish/v1/Chassis/1/NetworkAdapters/DPU_0"
        assert control.request("POST", "bmcs/bmc-0001/decommission", {
            "erase_seconds": 0, "fail": {dpu: 1}}) == {
                "fail": {"Chassis/1/NetworkAdapters/DPU_0": 1}, "erase_seconds": 0.0, "event_log": True}
        assert session.post(ERASE, {"SanitizationType": "CryptographicErase"}).status == 202
        failed = session.post(f"{dpu}/Actions/NetworkAdapter.ResetSettingsToDefault", {})
        assert session.get(failed.task_location)["TaskState"] == "Exception"
        control.request("POST", "bmcs/bmc-0001/decommission", {"erase_seconds": 60})
        running = session.post("/redfish/v1/Systems/1/Storage/1/Drives/1/Actions/Drive.SecureErase", {})
        assert session.get(running.task_location)["TaskState"] == "Running"
        assert session.post("/redfish/v1/Managers/1/LogServices/Log/Actions/LogService.ClearLog", {}).status == 204

        crawler, docs, seen = _TextSession(sim.bmc_url("bmc-0001")), {}, set()
        for start in ("/redfish/v1", *DECOMMISSION_ENTRY_POINTS):
            docs.update(_crawl(crawler, start, seen))
        assert {"/redfish/v1/Systems/1/Storage/1/Drives/1", "/redfish/v1/Systems/1/LogServices/EventLog/Entries",
                failed.task_location, running.task_location} <= set(docs)
        assert docs["/redfish/v1/Systems/1/Storage/1/Drives/1"]["Operations"][0]["Operation"] == "Sanitize"
        for path, text in crawler.texts.items():
            assert "FleetSim" not in text, path
            assert "Oem" not in set(_keys(docs[path])), path

        old = requests.post(f"{sim.bmc_url('bmc-0001')}/redfish/v1/Oem/FleetSim/Decommission",
                            json={"event_log": False}, auth=("fleet", "fleet"), timeout=5)
        assert old.status_code == 404 and old.json()["error"]["code"] == "Base.1.13.0.ResourceNotFound"
        assert control.bmc("bmc-0001")["decommission"]["events"] > 0  # the event log is still kept

        index = control.request("GET", "")
        assert "POST /_sim/bmcs/<id>/decommission" in index and "GET /_sim/config" in index
        for bad in ({"fail": ["x"]}, {"erase_seconds": "soon"}):
            with pytest.raises(RuntimeError, match="400"):
                control.request("POST", "bmcs/bmc-0001/decommission", bad)
        with pytest.raises(RuntimeError, match="404"):
            control.request("POST", "bmcs/bmc-0404/decommission", {})


def test_a_read_that_times_out_is_asked_once_more_a_post_never():
    """The transport asks a GET once more when its answer did not come in time (a read changes nothing); a POST
    whose answer did not come is never sent again by the transport (AMBIGUOUS: the caller settles it)."""
    with running_simulator(bmcs=1, faults=[{"kind": "timeout", "seconds": 1.0, "path": "/redfish/v1/Systems*"}]) as sim:
        session = RedfishSession(sim.bmc_url("bmc-0001"), timeout=0.3)
        control = SimulatorControl(sim.url)
        with pytest.raises(BmcError) as read:
            session.get("/redfish/v1/Systems")
        assert read.value.kind == ErrorKind.INFRA
        assert control.counters()["faults"]["timeout"] == 2  # the read, and the one more
        with pytest.raises(BmcError) as post:
            session.post("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", {"ResetType": "On"})
        assert post.value.kind == ErrorKind.AMBIGUOUS
        assert control.counters()["faults"]["timeout"] == 3  # sent once
        assert session.get("/redfish/v1/UpdateService")["Id"] == "UpdateService"  # other paths answer
