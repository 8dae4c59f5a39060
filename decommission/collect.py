"""Inventoried, from the BMC: every data-bearing medium Redfish reports, by serial, before any wipe. Standard
places (DMTF schemas) below the system, chassis and managers found through their collections (no hard-coded
``Systems/1``): Storage/Drives, the managers' LogServices (the first manager is the BMC, the others HMCs), Bios,
Chassis NetworkAdapters (DPU), Chassis TrustedComponents (TPM). A resource the BMC does not have (404) is simply not there; an unreachable BMC
raises (the request waits for it)."""

from __future__ import annotations

from typing import Any

from fleet.redfish import BmcError, ErrorKind, RedfishSession

ROOT = "/redfish/v1"


def _first(session: RedfishSession, collection: str) -> str:
    members = session.members(f"{ROOT}/{collection}")
    if not members:
        raise BmcError(f"GET {ROOT}/{collection}: no member", kind=ErrorKind.DEFINITE, status=404, method="GET",
                       path=f"{ROOT}/{collection}")
    return members[0]


def _optional(session: RedfishSession, path: str) -> dict[str, Any] | None:
    try:
        return session.get(path)
    except BmcError as exc:
        if exc.kind == ErrorKind.DEFINITE and exc.status == 404:
            return None
        raise


def collect_media(session: RedfishSession, *, label: str) -> list[dict[str, Any]]:
    """What this BMC reports; ``label`` names the server for media that carry no serial of their own."""
    found: list[dict[str, Any]] = []
    system, chassis = _first(session, "Systems"), _first(session, "Chassis")
    managers = session.members(f"{ROOT}/Managers")
    storage = _optional(session, f"{system}/Storage")
    for member in (storage or {}).get("Members", []):
        controller = session.get(_path(member["@odata.id"]))
        for link in controller.get("Drives", []):
            drive = session.get(_path(link["@odata.id"]))
            found.append({"media_type": "nvme", "serial": drive.get("SerialNumber", ""),
                          "manufacturer": drive.get("Manufacturer", ""), "model": drive.get("Model", ""),
                          "source": "redfish",
                          "target_uri": _path(drive["@odata.id"]) if "#Drive.SecureErase" in drive.get("Actions", {})
                          else ""})
    for index, manager in enumerate(managers):
        media_type = "bmc_flash" if index == 0 else "hmc_flash"
        log = _optional(session, f"{manager}/LogServices/Log")
        if log is not None:
            found.append({"media_type": media_type, "serial": f"{label}/{manager.rsplit('/', 1)[1]}",
                          "manufacturer": "BMC", "model": "Manager flash (logs, accounts, certificates)",
                          "source": "redfish", "target_uri": manager})
    bios = _optional(session, f"{system}/Bios")
    if bios is not None:
        found.append({"media_type": "uefi_nvram", "serial": f"{label}/UEFI", "manufacturer": "UEFI",
                      "model": "UEFI NVRAM", "source": "redfish", "target_uri": f"{system}/Bios"})
    dpu = _optional(session, f"{chassis}/NetworkAdapters/DPU_0")
    if dpu is not None:
        found.append({"media_type": "dpu", "serial": dpu.get("SerialNumber", ""), "model": dpu.get("Model", ""),
                      "manufacturer": dpu.get("Manufacturer", ""), "source": "redfish",
                      "target_uri": f"{chassis}/NetworkAdapters/DPU_0"})
    tpm = _optional(session, f"{chassis}/TrustedComponents/TPM_0")
    if tpm is not None:
        found.append({"media_type": "tpm", "serial": tpm.get("SerialNumber", ""), "model": tpm.get("Model", ""),
                      "manufacturer": tpm.get("Manufacturer", ""), "source": "redfish",
                      "target_uri": f"{chassis}/TrustedComponents/TPM_0"})
    return found


def _path(odata_id: str) -> str:
    """``/bmc/<id>/redfish/v1/...`` (the simulator) or ``/redfish/v1/...`` -> ``/redfish/v1/...``."""
    return odata_id[odata_id.index("/redfish/v1"):] if "/redfish/v1" in odata_id else odata_id
