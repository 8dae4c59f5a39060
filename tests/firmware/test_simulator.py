"""The BMC simulator over real HTTP: Redfish shapes, the update -> task -> pending -> reset -> active loop,
multipart push, every fault kind, the update-request counters, many BMCs, and the standalone process."""

# ruff: noqa: S106 - test credentials for a loopback simulator
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import redfish
import requests

from world.bmc import ManualClock
from world.bmc.testing import SimulatorProcess, running_simulator

INV = "/redfish/v1/UpdateService/FirmwareInventory"
SIMPLE_UPDATE = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"
GPU1 = f"{INV}/HGX_FW_GPU_SXM_1"
NEW_VBIOS = "http://images.example/hgx/96.00.9F.00.01.fwpkg"


class Bmc:
    """A requests session on one virtual BMC."""

    def __init__(self, server, bmc_id="bmc-0001", auth=("admin", "secret")):
        self.base = server.bmc_url(bmc_id)
        self.control = f"{server.url}/_sim/bmcs/{bmc_id}"
        self.http = requests.Session()
        self.http.auth = auth

    def get(self, path, **kw):
        return self.http.get(self.base + path, timeout=kw.pop("timeout", 5), **kw)

    def post(self, path, body=None, **kw):
        return self.http.post(self.base + path, json=body or {}, timeout=kw.pop("timeout", 5), **kw)

    def update(self, image=NEW_VBIOS, targets=(GPU1,), timeout=5, **extra):
        return self.post(SIMPLE_UPDATE, {"ImageURI": image, "TransferProtocol": "HTTP", "Targets": list(targets),
                                         **extra}, timeout=timeout)

    def version(self, component="HGX_FW_GPU_SXM_1"):
        return self.get(f"{INV}/{component}").json()["Version"]

    def pending(self, component="HGX_FW_GPU_SXM_1"):
        """The pending image: only the control API shows it (Redfish answers carry no simulator Oem)."""
        return requests.get(self.control, timeout=5).json()["components"][component]["pending"]


def configure(server, **changes):
    """Configuration through the control API, as a test in another process would set it."""
    reply = requests.post(f"{server.url}/_sim/config", json=changes, timeout=5)
    assert reply.status_code == 200, reply.text
    return reply.json()


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def server(clock):
    with running_simulator(bmcs=4, clock=clock, task_seconds=10, bmc_reset_seconds=5, seed=7) as server:
        yield server


def test_service_root_collections_and_inventory_follow_the_redfish_shapes(server):
    bmc = Bmc(server)
    root = requests.get(bmc.base + "/redfish/v1/", timeout=5).json()  # the root needs no credentials
    for link in ("UpdateService", "TaskService", "Systems", "Chassis", "Managers", "SessionService"):
        assert root[link]["@odata.id"] == f"/redfish/v1/{link}"
    systems = bmc.get("/redfish/v1/Systems").json()
    assert systems["Members@odata.count"] == 1 and systems["Members"] == [{"@odata.id": "/redfish/v1/Systems/1"}]
    system = bmc.get("/redfish/v1/Systems/1").json()
    assert system["PowerState"] == "On"
    assert system["Actions"]["#ComputerSystem.Reset"]["target"] == "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"
    assert "#Chassis.Reset" in bmc.get("/redfish/v1/Chassis/1").json()["Actions"]
    assert "#Manager.Reset" in bmc.get("/redfish/v1/Managers/1").json()["Actions"]
    service = bmc.get("/redfish/v1/UpdateService").json()
    assert service["Actions"]["#UpdateService.SimpleUpdate"]["target"] == SIMPLE_UPDATE
    assert service["MultipartHttpPushUri"] == "/redfish/v1/UpdateService/update-multipart"

    inventory = bmc.get(INV).json()
    ids = {m["@odata.id"].rsplit("/", 1)[1] for m in inventory["Members"]}
    assert inventory["Members@odata.count"] == len(ids) == 37
    assert {f"HGX_FW_GPU_SXM_{n}" for n in range(1, 9)} | {f"HGX_InfoROM_GPU_SXM_{n}" for n in range(1, 9)} <= ids
    assert {"HGX_FW_BMC_0", "HGX_FW_ERoT_BMC_0", "HGX_FW_NVSwitch_0", "HGX_FW_CPLD_0", "BMC", "BIOS"} <= ids
    hmc = bmc.get(f"{INV}/HGX_FW_BMC_0").json()  # as in the lambdalabs happypath sample
    assert hmc["Version"] == "HGX-22.10-1-rc67" and hmc["SoftwareId"] == "0x0010"
    assert hmc["RelatedItem"] == [{"@odata.id": "/redfish/v1/Chassis/HGX_BMC_0"}]
    assert hmc["Status"] == {"State": "Enabled", "Health": "OK"} and hmc["Updateable"] is True
    assert bmc.get(f"{INV}/BMC").json()["Version"] == "01.04.11"
    assert bmc.get(f"{INV}/NOPE").status_code == 404
    assert requests.get(server.bmc_url("no-such-bmc") + "/redfish/v1/", timeout=5).status_code == 404


def test_auth_any_credentials_or_the_configured_ones_and_sessions(server):
    assert requests.get(server.bmc_url("bmc-0001") + INV, timeout=5).status_code == 401
    assert Bmc(server, auth=("anyone", "anything")).get(INV).status_code == 200
    server.sim.configure({"username": "root", "password": "0penBmc"})
    assert Bmc(server, auth=("anyone", "anything")).get(INV).status_code == 401
    assert Bmc(server, auth=("root", "0penBmc")).get(INV).status_code == 200

    client = redfish.redfish_client(base_url=server.bmc_url("bmc-0001"), username="root", password="0penBmc")
    client.login(auth="session")
    assert client.get(INV).dict["Members@odata.count"] == 37
    client.logout()
    with pytest.raises(redfish.rest.v1.InvalidCredentialsError):
        redfish.redfish_client(base_url=server.bmc_url("bmc-0001"), username="root", password="x").login(auth="basic")


def test_simple_update_runs_a_task_and_the_version_changes_only_after_the_right_reset(server, clock):
    bmc = Bmc(server)
    reply = bmc.update()
    assert reply.status_code == 202
    assert reply.headers["Location"] == "/redfish/v1/TaskService/Tasks/1"
    assert reply.json()["TaskState"] == "New"

    clock.advance(4)
    running = bmc.get(reply.headers["Location"])
    assert running.json()["TaskState"] == "Running" and running.json()["PercentComplete"] == 40
    assert running.headers["Retry-After"] == "1"
    assert bmc.get(reply.headers["Location"] + "/Monitor").status_code == 202
    assert bmc.pending() is None

    clock.advance(6)
    done = bmc.get(reply.headers["Location"])
    task = done.json()
    assert (task["TaskState"], task["TaskStatus"], task["PercentComplete"]) == ("Completed", "OK", 100)
    assert "Retry-After" not in done.headers
    ids = [m["MessageId"] for m in task["Messages"]]
    assert "Update.1.0.UpdateSuccessful" in ids
    assert task["Messages"][-1]["MessageArgs"] == ["/redfish/v1/Chassis/1/Actions/Chassis.Reset", "PowerCycle"]
    assert bmc.version() == "96.00.89.00.01"
    assert bmc.pending() == {"Version": "96.00.9F.00.01", "ImageURI": NEW_VBIOS, "State": "AwaitingActivation",
                             "TaskId": "1"}

    # A host reboot is not enough for a GPU VBIOS; a chassis power cycle is.
    assert bmc.post("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", {"ResetType": "ForceRestart"}).status_code == 204
    assert bmc.version() == "96.00.89.00.01"
    assert bmc.post("/redfish/v1/Chassis/1/Actions/Chassis.Reset", {"ResetType": "PowerCycle"}).status_code == 204
    assert bmc.version() == "96.00.9F.00.01" and bmc.pending() is None
    assert Bmc(server, "bmc-0002").version() == "96.00.89.00.01"


def test_bios_activates_on_host_reboot_and_bmc_firmware_on_a_bmc_reset_that_takes_the_bmc_away(server, clock):
    bmc = Bmc(server)
    assert bmc.update("http://img/bios.bin?version=2.8", [f"{INV}/BIOS"]).status_code == 202
    configure(server, images={"http://img/BMC_01.05.00.bin": "01.05.00"})  # not the file name's "BMC_01.05.00"
    assert bmc.update("http://img/BMC_01.05.00.bin", [f"{INV}/BMC"]).status_code == 202
    clock.advance(10)
    assert bmc.post("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", {"ResetType": "ForceOff"}).status_code == 204
    assert bmc.get("/redfish/v1/Systems/1").json()["PowerState"] == "Off"
    assert bmc.version("BIOS") == "BIOS Date: 10/28/2025 Ver 2.7a"
    bmc.post("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", {"ResetType": "On"})
    assert bmc.version("BIOS") == "2.8"

    assert bmc.version("BMC") == "01.04.11"
    assert bmc.post("/redfish/v1/Managers/1/Actions/Manager.Reset", {"ResetType": "GracefulRestart"}).status_code == 204
    with pytest.raises(requests.ConnectionError):
        bmc.get(f"{INV}/BMC")
    clock.advance(5)
    assert bmc.version("BMC") == "01.05.00"
    assert bmc.version("HGX_FW_BMC_0") == "HGX-22.10-1-rc67"  # another manager's firmware


def test_staged_image_waits_for_start_update_and_a_no_reset_component_activates_at_once(clock):
    with running_simulator(bmcs=1, profile="generic", clock=clock) as server:
        bmc = Bmc(server)
        bmc.update("http://img/nic-28.47.1000.bin", [f"{INV}/NIC"], Stage=True)
        bmc.update("http://img/bios.bin?version=P79+v1.50", [f"{INV}/BIOS"],
                   **{"@Redfish.OperationApplyTime": "OnStartUpdateRequest"})
        assert bmc.pending("NIC")["State"] == "Staged" and bmc.pending("BIOS")["State"] == "Staged"
        bmc.post("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", {"ResetType": "ForceRestart"})
        assert bmc.version("BIOS") == "P79 v1.45"  # a staged image ignores resets

        assert bmc.post("/redfish/v1/UpdateService/Actions/UpdateService.StartUpdate").status_code == 204
        assert bmc.version("NIC") == "nic-28.47.1000"  # activation "none": active at once
        assert bmc.pending("BIOS")["State"] == "AwaitingActivation"
        bmc.post("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", {"ResetType": "ForceRestart"})
        assert bmc.version("BIOS") == "P79 v1.50"

        bmc.update("http://img/28.48.bin", [f"{INV}/NIC"])  # not staged, no reset needed
        assert bmc.version("NIC") == "28.48"


def test_multipart_push_through_the_dmtf_redfish_client(server, clock):
    client = redfish.redfish_client(base_url=server.bmc_url("bmc-0003"), username="u", password="p")
    client.login(auth="basic")
    service = client.get("/redfish/v1/UpdateService").dict
    # A bundle: the simulator's configuration says which components it carries; no Targets updates those.
    configure(server, images={"nvfw_HGX_H100x8_250114.fwpkg": {"HGX_FW_NVSwitch_0": "96.10.73.00.01",
                                                               "HGX_FW_NVSwitch_1": "96.10.73.00.01"}})
    params = {"Targets": [], "@Redfish.OperationApplyTime": "Immediate"}
    reply = client.post(service["MultipartHttpPushUri"], headers={"Content-Type": "multipart/form-data"}, body={
        "UpdateParameters": (None, json.dumps(params), "application/json"),
        "UpdateFile": ("nvfw_HGX_H100x8_250114.fwpkg", b"\x00fwpkg" * 100, "application/octet-stream")})
    assert reply.status == 202 and reply.is_processing
    clock.advance(10)
    task = client.get(reply.task_location).dict
    assert task["TaskState"] == "Completed"
    client.post("/redfish/v1/Chassis/1/Actions/Chassis.Reset", body={"ResetType": "PowerCycle"})
    assert client.get(f"{INV}/HGX_FW_NVSwitch_1").dict["Version"] == "96.10.73.00.01"
    assert client.get(f"{INV}/HGX_FW_NVSwitch_2").dict["Version"] == "96.10.6D.00.01"
    assert server.sim.stats.as_json()["images"] == {"nvfw_HGX_H100x8_250114.fwpkg": 2}


def test_a_failing_upgrade_path_fails_deterministically_with_a_firmware_message(server, clock):
    server.sim.configure({"faults": [{"kind": "fail", "bmc": "bmc-0002", "component": "HGX_FW_GPU_SXM_*",
                                      "from_version": "96.00.89.*", "to_version": "96.00.9F.00.01"}]})
    ok, bad = Bmc(server, "bmc-0001"), Bmc(server, "bmc-0002")
    ok_task, bad_task = ok.update().headers["Location"], bad.update().headers["Location"]
    clock.advance(10)
    assert ok.get(ok_task).json()["TaskState"] == "Completed"
    failed = bad.get(bad_task).json()
    assert (failed["TaskState"], failed["TaskStatus"]) == ("Exception", "Critical")
    assert failed["Messages"][-1]["MessageId"] == "Update.1.0.ApplyFailed"
    assert bad.pending() is None
    retried = bad.update().headers["Location"]  # the same path fails again
    clock.advance(10)
    assert bad.get(retried).json()["TaskState"] == "Exception"
    other = bad.update("http://img/96.00.A0.00.01.bin").headers["Location"]
    clock.advance(10)
    assert bad.get(other).json()["TaskState"] == "Completed"


def _failing_bmcs(seed):
    with running_simulator(bmcs=200, task_seconds=0, seed=seed,
                           faults=[{"kind": "fail", "component": "HGX_FW_GPU_SXM_1", "rate": 0.3}]) as server:
        return {bmc_id for bmc_id in server.sim.bmc_ids() if Bmc(server, bmc_id).update().json()["TaskState"] == "Exception"}


def test_failure_rate_is_reproducible_with_a_seed():
    first, again, other = _failing_bmcs(1), _failing_bmcs(1), _failing_bmcs(2)
    assert first == again != other
    assert 35 <= len(first) <= 85


def test_stuck_task_stays_running_until_a_bmc_reset_aborts_it(server, clock):
    server.sim.configure({"faults": [{"kind": "stuck", "bmc": "bmc-0001"}]})
    bmc = Bmc(server)
    location = bmc.update().headers["Location"]
    clock.advance(3600)
    stuck = bmc.get(location)
    assert stuck.json()["TaskState"] == "Running" and stuck.headers["Retry-After"] == "1"
    assert bmc.update().status_code == 503  # the target is busy with the stuck task
    assert bmc.get("/redfish/v1/UpdateService").json()["HttpPushUriTargetsBusy"] is True
    bmc.post("/redfish/v1/Managers/1/Actions/Manager.Reset")
    clock.advance(5)
    aborted = bmc.get(location).json()
    assert aborted["TaskState"] == "Exception" and aborted["Messages"][-1]["MessageId"] == "TaskEvent.1.0.TaskAborted"
    assert bmc.version() == "96.00.89.00.01" and bmc.pending() is None


def test_version_does_not_change_after_activation(server, clock):
    server.sim.configure({"faults": [{"kind": "no_version_change", "component": "HGX_FW_GPU_SXM_3"}]})
    bmc = Bmc(server)
    bmc.update(targets=[GPU1, f"{INV}/HGX_FW_GPU_SXM_3"])
    clock.advance(10)
    bmc.post("/redfish/v1/Chassis/1/Actions/Chassis.Reset", {"ResetType": "PowerCycle"})
    assert bmc.version("HGX_FW_GPU_SXM_1") == "96.00.9F.00.01"
    assert bmc.version("HGX_FW_GPU_SXM_3") == "96.00.89.00.01" and bmc.pending("HGX_FW_GPU_SXM_3") is None


def test_5xx_at_a_rate_is_answered_with_retry_after_and_not_processed(server):
    server.sim.configure({"faults": [{"kind": "http_error", "method": "POST", "path": "*.SimpleUpdate", "status": 503}]})
    bmc = Bmc(server)
    reply = bmc.update()
    assert reply.status_code == 503 and reply.headers["Retry-After"] == "1"
    assert reply.json()["error"]["code"] == "Base.1.13.0.ServiceTemporarilyUnavailable"
    assert bmc.get(INV).status_code == 200
    stats = server.sim.stats.as_json()
    assert stats["update_requests"] == 0 and stats["faults"] == {"http_error": 1}


def test_timeouts_before_and_after_processing(server):
    bmc = Bmc(server)
    server.sim.configure({"faults": [{"kind": "timeout", "bmc": "bmc-0001", "path": "*.SimpleUpdate", "seconds": 2}]})
    with pytest.raises(requests.ReadTimeout):
        bmc.update(timeout=0.3)
    assert server.sim.stats.as_json()["update_requests"] == 0
    server.sim.configure({"faults": [{"kind": "timeout", "bmc": "bmc-0001", "path": "*.SimpleUpdate", "seconds": 2,
                                      "when": "after"}]})
    with pytest.raises(requests.ReadTimeout):
        bmc.update(timeout=0.3)
    assert server.sim.stats.as_json()["update_requests"] == 1  # the BMC did the work; the answer was lost
    tasks = bmc.get("/redfish/v1/TaskService/Tasks").json()
    assert tasks["Members"] == [{"@odata.id": "/redfish/v1/TaskService/Tasks/1"}]


def test_stats_count_update_requests_per_bmc_component_and_version(server, clock):
    one, two = Bmc(server, "bmc-0001"), Bmc(server, "bmc-0002")
    one.update(targets=[GPU1, f"{INV}/HGX_FW_GPU_SXM_2"])
    two.update()
    clock.advance(10)
    one.update()  # a second request for the same target and version
    stats = requests.get(server.url + "/_sim/stats", timeout=5).json()
    assert stats["update_requests"] == 4
    assert stats["updates"]["bmc-0001"] == {"HGX_FW_GPU_SXM_1": {"96.00.9F.00.01": 2},
                                            "HGX_FW_GPU_SXM_2": {"96.00.9F.00.01": 1}}
    assert stats["duplicate_updates"] == [{"bmc": "bmc-0001", "component": "HGX_FW_GPU_SXM_1",
                                           "version": "96.00.9F.00.01", "count": 2}]
    assert requests.get(server.url + "/_sim/stats?bmc=bmc-0002", timeout=5).json()["update_requests"] == 1
    requests.post(server.url + "/_sim/stats/reset", timeout=5)
    assert requests.get(server.url + "/_sim/stats", timeout=5).json()["updates"] == {}


def test_control_api_creates_bmcs_with_versions_and_rejects_bad_config(server):
    created = requests.post(server.url + "/_sim/bmcs", timeout=5, json={
        "ids": ["rack7-node3"], "profile": "hgx-h100", "versions": {"HGX_FW_GPU_SXM_1": "96.00.74.00.11"}})
    assert created.status_code == 201 and created.json()["urls"] == [server.bmc_url("rack7-node3")]
    assert Bmc(server, "rack7-node3").version() == "96.00.74.00.11"
    state = requests.get(server.url + "/_sim/bmcs/rack7-node3", timeout=5).json()
    assert state["components"]["HGX_FW_GPU_SXM_1"]["activation"] == "chassis_power_cycle"
    assert requests.post(server.url + "/_sim/config", json={"bogus": 1}, timeout=5).status_code == 400
    assert requests.post(server.url + "/_sim/config", json={"faults": [{"kind": "explode"}]}, timeout=5).status_code == 400
    for images in ({"a.bin": 5}, {"a.bin": {}}, {"a.bin": {"BMC": 1}}, ["a.bin"]):
        assert requests.post(server.url + "/_sim/config", json={"images": images}, timeout=5).status_code == 400
    assert requests.post(server.url + "/_sim/bmcs", json={"profile": "nope", "count": 1}, timeout=5).status_code == 400
    assert requests.post(server.url + "/_sim/clock/advance", json={"seconds": 1}, timeout=5).status_code == 200


def test_thousands_of_bmcs_on_their_own_ports_updated_concurrently():
    with running_simulator(bmcs=2000, task_seconds=0) as server:
        ids = server.sim.bmc_ids()
        assert len(ids) == 2000 and ids[-1] == "bmc-2000"

        def upgrade(bmc_id):
            bmc = Bmc(server, bmc_id)
            task = bmc.update().json()
            bmc.post("/redfish/v1/Chassis/1/Actions/Chassis.Reset", {"ResetType": "PowerCycle"})
            return task["TaskState"], bmc.version()

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(upgrade, ids[::5]))
        assert results == [("Completed", "96.00.9F.00.01")] * 400
        stats = server.sim.stats.as_json()
        assert stats["update_requests"] == 400 and stats["duplicate_updates"] == []


def test_standalone_process_can_be_killed_and_restarted_on_the_same_port():
    proc = SimulatorProcess(bmcs=2, task_seconds=5, extra_args=("--manual-clock",)).start()
    try:
        url = proc.url
        bmc = requests.Session()
        bmc.auth = ("u", "p")
        reply = bmc.post(proc.bmc_url("bmc-0001") + SIMPLE_UPDATE, json={"ImageURI": NEW_VBIOS, "Targets": [GPU1]},
                         timeout=5)
        proc.control.advance(5)
        assert bmc.get(proc.bmc_url("bmc-0001") + reply.headers["Location"], timeout=5).json()["TaskState"] == "Completed"
        assert proc.control.stats()["update_requests"] == 1
        bmc_url = proc.bmc_url("bmc-0001")
        assert bmc_url != f"{url}/bmc/bmc-0001" and proc.control.bmc_urls()["bmc-0001"] == bmc_url  # its own port
        proc.kill()
        with pytest.raises(requests.ConnectionError):
            requests.get(url + "/_sim/stats", timeout=2)
        proc.start()
        assert proc.url == url and proc.control.stats()["update_requests"] == 0
        assert proc.bmc_url("bmc-0001") == bmc_url and bmc.get(bmc_url + "/redfish/v1/Systems/1").status_code == 200
        assert proc.control.create_bmcs(count=1, start=3) == ["bmc-0003"]
        assert requests.get(proc.bmc_url("bmc-0003") + "/redfish/v1/", timeout=5).status_code == 200
    finally:
        proc.kill()
