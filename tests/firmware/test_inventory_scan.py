"""Observed firmware from BMCs: ``firmware_inventory_scan`` and ``manage.py scan_firmware`` read the Redfish
FirmwareInventory of real (simulated) BMCs over HTTP and record it; one unreachable BMC never stops the others."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from firmware.services.observations import firmware_inventory_scan, inventory_scan_chunks
from inventory.models import FirmwareObservation
from tests.firmware import rollout_fleet
from tests.firmware.rollout_fleet import OLD_VBIOS
from world.bmc.testing import running_simulator

pytestmark = pytest.mark.django_db


def test_scan_records_server_and_gpu_versions_from_each_bmc() -> None:
    with running_simulator(bmcs=2, prefix="scan-") as sim:
        fleet = rollout_fleet.build(servers=3, bmc_url=lambda n: sim.bmc_url(f"scan-{n + 1:04d}"), gpus_per_server=2)
        # The third server's BMC does not exist on the simulator (404): a failure of that server only.
        result = firmware_inventory_scan(servers=fleet.servers, actor=None)
    assert result.scanned == 2
    assert set(result.failed) == {fleet.servers[2].hostname}
    first = fleet.servers[0]
    seen = dict(FirmwareObservation.objects.filter(server=first).values_list("component", "source"))
    assert {"bmc", "hmc", "sbios"} <= set(seen) and set(seen.values()) == {"redfish"}
    vbios = set(FirmwareObservation.objects.filter(gpu__server=first, component="gpu_vbios")
                .values_list("version", flat=True))
    assert vbios == {OLD_VBIOS}  # GPU_SXM_1 and GPU_SXM_2 went to the GPUs in slots 1 and 2


def test_scan_command_names_failures_and_refuses_unknown_hosts() -> None:
    with running_simulator(bmcs=1, prefix="cmd-") as sim:
        fleet = rollout_fleet.build(servers=1, bmc_url=lambda n: sim.bmc_url("cmd-0001"))
        out = StringIO()
        call_command("scan_firmware", fleet.servers[0].hostname, stdout=out)
    assert "Scanned 1 of 1 servers" in out.getvalue()
    with pytest.raises(CommandError, match="Unknown server"):
        call_command("scan_firmware", "no-such-host")


def test_scan_task_scans_a_chunk_of_servers() -> None:
    from firmware import tasks

    with running_simulator(bmcs=3, prefix="task-") as sim:
        fleet = rollout_fleet.build(servers=3, bmc_url=lambda n: sim.bmc_url(f"task-{n + 1:04d}"))
        chunks = inventory_scan_chunks(2)
        assert chunks == [[fleet.servers[0].pk, fleet.servers[1].pk], [fleet.servers[2].pk]]
        result = tasks.firmware_inventory_scan_task(chunks[0])
    assert result == {"scanned": 2, "recorded": result["recorded"], "failed": 0} and result["recorded"] > 0
    assert FirmwareObservation.objects.filter(server=fleet.servers[0], source="redfish").exists()
    assert not FirmwareObservation.objects.filter(server=fleet.servers[2], source="redfish").exists()
