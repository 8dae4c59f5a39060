"""Real-format outputs of the in-band tools (shapes from nvme-cli's own JSON printer, nvme-print-json.c
``json_sanitize_log`` / id-ctrl; see shared/design/decommission.md section 6), success and failure."""

import json


def id_ctrl(serial: str, sanicap: int = 0x3, fna: int = 0x4) -> str:
    return json.dumps({"vid": 5197, "ssvid": 5197, "sn": f"{serial:<20}", "mn": "SAMSUNG MZWLO3T8HCLS-00A07      ",
                       "fr": "OPPA4B5Q", "rab": 2, "ieee": 9528, "cmic": 0, "mdts": 9, "cntlid": 6,
                       "ver": 132096, "oacs": 95, "fna": fna, "sanicap": sanicap, "nn": 32})


def sanitize_log_old(device: str = "nvme0", status: int = 1, global_erased: int = 1, sprog: int = 65535) -> str:
    """nvme-cli 2.3/2.4 (Debian 12): the status under "status"."""
    text = {0: "(0) NVM Subsystem has never been sanitized.",
            1: "(1) Most Recent Sanitize Command Completed Successfully.",
            2: "(2) Sanitize in Progress.", 3: "(3) Most Recent Sanitize Command Failed."}[status]
    return json.dumps({device: {"sprog": sprog, "sstat": {"global_erased": global_erased, "no_cmplted_passes": 1,
                                                          "status": text},
                                "cdw10_info": 2, "time_overwrite": 4294967295, "time_block_erase": 34,
                                "time_crypto_erase": 5}})


def sanitize_log_new(device: str = "nvme0", status: int = 1, prgd: int | None = 1, extra: bool = False) -> str:
    """Newer nvme-cli: the key is the status text; PRGD where the drive reports it; an unexpected new field."""
    text = {1: "(1) Most Recent Sanitize Command Completed Successfully.", 3: "(3) Most Recent Sanitize Command "
            "Failed.", 4: "(4) Most Recent Sanitize Command Completed Successfully with No-Deallocate After "
            "Sanitize Requested."}[status]
    sstat = {"global_erased": 1, "no_cmplted_passes": 1, text.split(")")[1].strip(" ."): text}
    if prgd is not None:
        sstat["prgd"] = prgd
    body = {"sprog": 65535, "sstat": sstat, "cdw10_info": 2, "time_over_write": 4294967295,
            "time_block_erase": 34, "time_crypto_erase": 5, "time_over_write_no_dealloc": 4294967295,
            "time_block_erase_no_dealloc": 34, "time_crypto_erase_no_dealloc": 5}
    if extra:
        body["time_media_verification"] = 12
    return json.dumps({device: body})


def agent_results(serials: list[str], *, nvme_status: int = 1, tpm_rc: int = 0, apps: str = "",
                  reset_rc: int = 0, old: bool = False, before: str | None = "never",
                  progress: bool = False) -> list[dict]:
    """``before``: the sanitize log read before the run - "never" (never sanitized, global data not erased),
    "same" (identical to the log after the run: an earlier sanitize), None (no reading); ``progress``: the
    reading right after the start shows the sanitize in progress."""
    out = []
    for i, serial in enumerate(serials):
        dev = f"nvme{i}"
        log = sanitize_log_old(dev, status=nvme_status) if old else sanitize_log_new(dev, status=nvme_status)
        reading = {"step": "nvme.sanitize-log", "serial": serial, "tool": "nvme-cli", "tool_version": "2.4",
                   "command": f"nvme sanitize-log /dev/{dev} -o json", "exit_code": 0}
        if before is not None:
            earlier = sanitize_log_old(dev, status=0, global_erased=0) if before == "never" else log
            out.append({**reading, "step": "nvme.sanitize-log.before", "output": earlier})
        out += [
            {"step": "nvme.id-ctrl", "serial": serial, "tool": "nvme-cli", "tool_version": "2.4",
             "command": f"nvme id-ctrl /dev/{dev} -o json", "exit_code": 0, "output": id_ctrl(serial)},
            {"step": "nvme.sanitize", "serial": serial, "tool": "nvme-cli", "tool_version": "2.4",
             "command": f"nvme sanitize /dev/{dev} --sanact=start-crypto-erase", "exit_code": 0, "output": ""},
            {**reading, "step": "nvme.sanitize-log.progress",
             "output": sanitize_log_old(dev, status=2, global_erased=0, sprog=1310) if progress else log},
            {**reading, "output": log},
        ]
    out += [
        {"step": "tpm2_clear", "serial": "", "tool": "tpm2-tools", "tool_version": "5.4", "command": "tpm2_clear -c p",
         "exit_code": tpm_rc, "output": "" if tpm_rc == 0 else "ERROR: Esys_Clear(0x9A2) - tpm:warn(2.0): authorizations for objects subject to DA protection are not allowed at this time because the TPM is in DA lockout mode\n"},
        {"step": "nvidia-smi.compute-apps", "serial": "", "tool": "nvidia-smi", "tool_version": "580.105.08",
         "command": "nvidia-smi --query-compute-apps=pid --format=csv,noheader", "exit_code": 0, "output": apps},
        {"step": "nvidia-smi.reset", "serial": "", "tool": "nvidia-smi", "tool_version": "580.105.08",
         "command": "nvidia-smi -r", "exit_code": reset_rc,
         "output": "GPU 00000000:18:00.0 was successfully reset.\nAll done.\n" if reset_rc == 0 else
                   "Unable to reset GPU 00000000:18:00.0 because it's being used by some other process.\n"},
    ]
    return out
