"""Parsers of the host agent's raw outputs (real nvme-cli, tpm2-tools and nvidia-smi shapes) into decisions.

``nvme sanitize-log -o json`` is nested under the device name; ``sstat`` is an object whose status sits under
``"status"`` (nvme-cli 2.3/2.4) or under a key that is itself the status text (newer releases), valued
``"(N) ..."``. N: 0 never sanitized, 1 completed, 2 in progress, 3 failed, 4 completed (no-deallocate). ``sprog``
is progress out of 65535. PRGD (IEEE 2883 purge) is reported by nvme-cli >= 2.11 as ``"prgd"`` in ``sstat``
where the drive supports it. Unknown keys are ignored; the status number is still found.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_STATUS = re.compile(r"^\s*\((\d+)\)")
SSTAT_TEXT = {0: "never sanitized", 1: "completed successfully", 2: "in progress", 3: "failed",
              4: "completed successfully (no-deallocate)"}


class ParseError(ValueError):
    pass


@dataclass
class SanitizeStatus:
    device: str
    sstat: int
    sprog: int
    global_erased: bool | None
    prgd: bool | None
    notices: list[str] = field(default_factory=list)
    passes: int | None = None  # sstat "no_cmplted_passes": completed passes of the most recent sanitize
    cdw10: int | None = None  # the most recent sanitize command's CDW10 (its action), as the drive reports it

    def reading(self) -> dict[str, Any]:
        """What identifies this log's most recent sanitize, to compare a reading before the run with one after."""
        return {"sstat": self.sstat, "sprog": self.sprog, "global_erased": self.global_erased,
                "passes": self.passes, "cdw10": self.cdw10}

    @property
    def done(self) -> bool:
        return self.sstat in (1, 4)

    @property
    def failed(self) -> bool:
        return self.sstat == 3

    @property
    def running(self) -> bool:
        return self.sstat == 2


def _status_number(sstat: dict[str, Any]) -> int:
    for key, value in sstat.items():
        for text in (value, key):
            if isinstance(text, str):
                match = _STATUS.match(text)
                if match:
                    return int(match.group(1))
    raise ParseError(f"no sanitize status '(N) ...' in sstat {sstat!r}")


def parse_sanitize_log(raw: str) -> SanitizeStatus:
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ParseError(f"sanitize-log output is not JSON: {exc}") from None
    if not isinstance(doc, dict) or len(doc) != 1:
        raise ParseError("sanitize-log JSON should hold one device object")
    device, body = next(iter(doc.items()))
    if not isinstance(body, dict) or "sstat" not in body:
        raise ParseError(f"sanitize-log JSON for {device} has no sstat")
    sstat = body["sstat"]
    if isinstance(sstat, int):  # the invented flat shape is not nvme-cli's: refuse rather than guess
        raise ParseError("sstat is a bare number; nvme-cli reports an object")
    known = {"sprog", "sstat", "cdw10_info", "time_over_write", "time_overwrite", "time_block_erase",
             "time_crypto_erase", "time_over_write_no_dealloc", "time_block_erase_no_dealloc",
             "time_crypto_erase_no_dealloc"}
    notices = [f"unknown field {k!r} ignored" for k in body if k not in known]
    prgd = sstat.get("prgd")
    passes = sstat.get("no_cmplted_passes")
    cdw10 = body.get("cdw10_info")
    return SanitizeStatus(device=device, sstat=_status_number(sstat), sprog=int(body.get("sprog", 0)),
                          global_erased=bool(sstat["global_erased"]) if "global_erased" in sstat else None,
                          prgd=bool(prgd) if prgd is not None else None, notices=notices,
                          passes=int(passes) if isinstance(passes, int) else None,
                          cdw10=int(cdw10) if isinstance(cdw10, int) else None)


def this_run(before: SanitizeStatus | None, progress: SanitizeStatus | None,
             after: SanitizeStatus) -> tuple[bool, str]:
    """Does the log read after the run describe a sanitize of THIS run (not an earlier one)? The agent reads
    the log before it starts the sanitize (after its token was issued: the token fetched the script), once
    right after starting it, and when it is over. Proven when the drive was seen sanitizing during the run
    (SSTAT 2, SPROG below 65535), or the log changed between the reading before and the one after (status,
    progress, global-data-erased, completed passes or the command's CDW10). Identical readings prove nothing:
    the log may describe a sanitize from before this run."""
    if progress is not None and progress.running and progress.sprog < 65535:
        return True, f"seen in progress during this run (SPROG {progress.sprog}/65535)"
    if before is None:
        return False, "no sanitize-log reading before the run: the log may describe an earlier sanitize"
    changed = sorted(k for k, v in after.reading().items() if before.reading()[k] != v)
    if changed:
        return True, "the log changed since the reading before the run (" + ", ".join(
            f"{k} {before.reading()[k]} -> {after.reading()[k]}" for k in changed) + ")"
    return False, (f"the sanitize log is the same before and after the run ({after.reading()}): not proven to be "
                   "this run's sanitize")


def parse_id_ctrl(raw: str) -> dict[str, Any]:
    """``nvme id-ctrl -o json``: flat; serial (``sn``), model (``mn``), firmware (``fr``), SANICAP, FNA."""
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ParseError(f"id-ctrl output is not JSON: {exc}") from None
    sanicap = int(doc.get("sanicap", 0))
    return {"serial": str(doc.get("sn", "")).strip(), "model": str(doc.get("mn", "")).strip(),
            "firmware": str(doc.get("fr", "")).strip(), "crypto_erase": bool(sanicap & 1),
            "block_erase": bool(sanicap & 2), "overwrite": bool(sanicap & 4),
            "format_crypto": bool(int(doc.get("fna", 0)) & 4)}


def nvme_verdict(status: SanitizeStatus, *, purge_required: bool) -> tuple[str, str]:
    """('done' | 'running' | 'failed', reason). PRGD=0 when a purge was required is a failure, not a pass."""
    if status.running:
        return "running", f"sanitize in progress ({status.sprog}/65535)"
    if status.failed:
        return "failed", "the drive reports the most recent sanitize failed (SSTAT 3)"
    if not status.done:
        return "failed", f"sanitize status {status.sstat} ({SSTAT_TEXT.get(status.sstat, 'unknown')})"
    if purge_required and status.prgd is False:
        return "failed", "sanitize completed but PRGD=0: the drive does not claim a purge (IEEE 2883)"
    return "done", f"SSTAT {status.sstat}: {SSTAT_TEXT[status.sstat]}" + (
        "; PRGD=1" if status.prgd else "")
