"""Platform profiles: which firmware components a virtual BMC has, their initial versions and how each activates.

The HGX H100 profile follows the shape and Ids of the lambdalabs ``firmware_inventory_happypath`` sample
(NVIDIA HMC ``HGX_FW_*`` members next to a Supermicro host BMC's ``BMC`` and ``BIOS``). Only
HGX_FW_BMC_0, HGX_FW_ERoT_BMC_0, BMC and BIOS carry the sample's versions and SoftwareIds; the other versions and
SoftwareIds are placeholders of the right form. The activation kinds follow the activation matrix in
design/rollouts.md section 1.7.
"""

from dataclasses import dataclass, field

NONE = "none"  # active as soon as the update task completes
BMC_RESET = "bmc_reset"  # Managers/<id>/Actions/Manager.Reset
HOST_REBOOT = "host_reboot"  # Systems/<id>/Actions/ComputerSystem.Reset (a restart, or On after Off)
CHASSIS_POWER_CYCLE = "chassis_power_cycle"  # Chassis/<id>/Actions/Chassis.Reset ResetType=PowerCycle
AC_POWER_CYCLE = "ac_power_cycle"  # Chassis/<id>/Actions/Chassis.Reset ResetType=FullPowerCycle
ACTIVATIONS = (NONE, BMC_RESET, HOST_REBOOT, CHASSIS_POWER_CYCLE, AC_POWER_CYCLE)


@dataclass(frozen=True)
class ComponentSpec:
    id: str
    name: str
    version: str
    activation: str
    related_item: str
    software_id: str = ""
    manufacturer: str = "NVIDIA"
    description: str = ""
    odata_type: str = "#SoftwareInventory.v1_4_0.SoftwareInventory"
    updateable: bool = True
    manager: str = ""  # for BMC_RESET: the manager whose reset activates it


@dataclass(frozen=True)
class Profile:
    name: str
    manufacturer: str
    model: str
    systems: tuple[str, ...]
    chassis: tuple[str, ...]
    managers: tuple[str, ...]
    components: tuple[ComponentSpec, ...] = field(default=())


def _hgx_h100() -> Profile:
    components = [
        ComponentSpec("HGX_FW_BMC_0", "Software Inventory", "HGX-22.10-1-rc67", BMC_RESET,
                      "/redfish/v1/Chassis/HGX_BMC_0", "0x0010", description="BMC image", manager="HGX_BMC_0"),
        ComponentSpec("HGX_FW_ERoT_BMC_0", "Software Inventory", "00.02.0182.0000_n00", AC_POWER_CYCLE,
                      "/redfish/v1/Chassis/HGX_ERoT_BMC_0", "0xFF00", description="Other image"),
    ]
    for n in range(1, 9):
        components += [
            ComponentSpec(f"HGX_FW_GPU_SXM_{n}", "Software Inventory", "96.00.89.00.01", CHASSIS_POWER_CYCLE,
                          f"/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_SXM_{n}", "0x0300",
                          description="GPU image"),
            ComponentSpec(f"HGX_InfoROM_GPU_SXM_{n}", "Software Inventory", "G520.0200.00.05", CHASSIS_POWER_CYCLE,
                          f"/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_SXM_{n}", "0x0301",
                          description="InfoROM image"),
            ComponentSpec(f"HGX_FW_ERoT_GPU_SXM_{n}", "Software Inventory", "00.02.0182.0000_n04", AC_POWER_CYCLE,
                          f"/redfish/v1/Chassis/HGX_ERoT_GPU_SXM_{n}", "0xFF00", description="Other image"),
        ]
    for n in range(4):
        components += [
            ComponentSpec(f"HGX_FW_NVSwitch_{n}", "Software Inventory", "96.10.6D.00.01", CHASSIS_POWER_CYCLE,
                          f"/redfish/v1/Fabrics/HGX_NVLinkFabric_0/Switches/NVSwitch_{n}", "0x0400",
                          description="NVSwitch image"),
            ComponentSpec(f"HGX_FW_ERoT_NVSwitch_{n}", "Software Inventory", "00.02.0182.0000_n04", AC_POWER_CYCLE,
                          f"/redfish/v1/Chassis/HGX_ERoT_NVSwitch_{n}", "0xFF00", description="Other image"),
        ]
    components += [
        ComponentSpec("HGX_FW_CPLD_0", "Software Inventory", "0.1C", AC_POWER_CYCLE,
                      "/redfish/v1/Chassis/HGX_Chassis_0", "0x0500", description="CPLD image"),
        ComponentSpec("BMC", "BMC", "01.04.11", BMC_RESET, "/redfish/v1/Managers/1", "",
                      manufacturer="Supermicro", odata_type="#SoftwareInventory.v1_11_0.SoftwareInventory", manager="1"),
        ComponentSpec("BIOS", "BIOS", "BIOS Date: 10/28/2025 Ver 2.7a", HOST_REBOOT, "/redfish/v1/Systems/1/Bios", "",
                      manufacturer="Supermicro", odata_type="#SoftwareInventory.v1_11_0.SoftwareInventory"),
    ]
    return Profile("hgx-h100", "Supermicro", "SYS-821GE-TNHR (HGX H100 8-GPU)", systems=("1",), chassis=("1",),
                   managers=("1", "HGX_BMC_0"), components=tuple(components))


def _generic() -> Profile:
    components = (
        ComponentSpec("BMC", "BMC", "1.45.455b66-rev4", BMC_RESET, "/redfish/v1/Managers/1", "BMC-FW",
                      manufacturer="Contoso", odata_type="#SoftwareInventory.v1_13_0.SoftwareInventory", manager="1"),
        ComponentSpec("BIOS", "BIOS", "P79 v1.45", HOST_REBOOT, "/redfish/v1/Systems/1/Bios", "BIOS-FW",
                      manufacturer="Contoso", odata_type="#SoftwareInventory.v1_13_0.SoftwareInventory"),
        ComponentSpec("NIC", "NIC", "28.46.3048", NONE, "/redfish/v1/Chassis/1/NetworkAdapters/NIC", "NIC-FW",
                      manufacturer="Contoso", odata_type="#SoftwareInventory.v1_13_0.SoftwareInventory"),
    )
    return Profile("generic", "Contoso", "3500", systems=("1",), chassis=("1",), managers=("1",),
                   components=components)


PROFILES: dict[str, Profile] = {p.name: p for p in (_hgx_h100(), _generic())}
