"""firmware.inventory_map: Redfish FirmwareInventory members -> components, from the real sample files."""

import json
from pathlib import Path

import pytest

from firmware.inventory_map import components_from_inventory, gpu_slot
from tests.samples import SAMPLES as FIXTURES

SAMPLES = FIXTURES / "redfish"
HAPPY = SAMPLES / "lambdalabs/firmware_inventory_happypath/redfish/v1/UpdateService/FirmwareInventory"


def _members(directory: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*/index.json"))]


@pytest.mark.skipif(not HAPPY.exists(), reason="shared samples not present")
def test_lambdalabs_happypath_sample():
    found = components_from_inventory(_members(HAPPY))
    assert sorted(found) == sorted([
        ("hmc", "HGX_FW_BMC_0", "HGX-22.10-1-rc67"),
        ("bmc", "BMC", "01.04.11"),
        ("sbios", "BIOS", "BIOS Date: 10/28/2025 Ver 2.7a"),
        ("gpu_vbios", "GPU1", "96.00.A5.00.01"),
        ("erot", "HGX_FW_ERoT_BMC_0", "00.02.0182.0000_n00"),
    ])


def test_hgx_ids_and_slots():
    members = [{"Id": i, "Version": "1"} for i in (
        "HGX_FW_GPU_SXM_3", "HGX_InfoROM_GPU_SXM_3", "HGX_FW_ERoT_GPU_SXM_3", "HGX_FW_NVSwitch_0",
        "HGX_FW_ERoT_NVSwitch_0", "HGX_FW_CPLD_0", "Backup_BMC", "SS", "NIC", "PSU_1", "BF3_0")]
    assert [c for c, _, _ in components_from_inventory(members)] == [
        "gpu_vbios", "gpu_inforom_image", "erot", "nvswitch", "erot", "cpld", "nic", "psu", "dpu"]
    assert gpu_slot("HGX_FW_GPU_SXM_3") == 3
    assert gpu_slot("HGX_InfoROM_GPU_SXM_8") == 8
    assert gpu_slot("GPU1") == 1
    assert gpu_slot("BMC") is None


def test_member_without_id_or_version():
    members = [{"@odata.id": "/redfish/v1/UpdateService/FirmwareInventory/BMC", "Version": "1.0"},
               {"Id": "BIOS"}]
    assert components_from_inventory(members) == [("bmc", "BMC", "1.0")]


def test_specs_override_defaults():
    members = [{"Id": "HostFW_7", "Version": "2"}, {"Id": "BMC", "Version": "3"}]
    assert components_from_inventory(members, {"sbios": r"HostFW_\d+"}) == [
        ("sbios", "HostFW_7", "2"), ("bmc", "BMC", "3")]
