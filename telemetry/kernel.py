"""XID events from the kernel log (``dmesg``, ``dmesg -T``, ``journalctl -k``).

``NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, <message>`` (older drivers omit ``pid``
and ``name``; a process the driver cannot name is ``pid='<unknown>', name=<unknown>``). The same log has
``NVRM: GPU at PCI:0000:9b:00: GPU-<uuid>`` lines: they give each XID its GPU's UUID, whether they come
before the XID (the usual case, at driver load) or after it. Example: ``shared/samples/kernel-log/``.
"""

from __future__ import annotations

import re

from inventory.identity import normalize_pci_bus_id, normalize_uuid
from telemetry.sample import ParsedBatch, XidLine

_XID = re.compile(
    r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)\): (?P<xid>\d+)"
    r"(?:, pid=(?P<pid>\d+|'?<unknown>'?))?(?:, name=(?P<name>[^,]*))?(?:, (?P<message>.*?))?\s*$")
_GPU_AT = re.compile(r"NVRM: GPU at PCI:(?P<pci>[0-9a-fA-F:.]+): (?P<uuid>GPU-[0-9a-fA-F-]+)")
_DMESG_TS = re.compile(r"^\s*\[\s*(?P<ts>[^\]]*)\]\s*")  # [Sun Feb 23 16:24:18 2025] or [ 1234.567890]
# journalctl -k: "Feb 23 16:24:18 node-7 kernel: ..." or with -o short-iso "2025-02-23T16:24:18+0000 node-7 ..."
_JOURNAL = re.compile(r"^(?P<ts>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\S+)\s+(?P<host>\S+)\s+kernel:\s*")
UNPARSED_XID = "unparsed_xid"  # an "NVRM: Xid" line this parser could not read: counted in ``rejected``


def _pci(raw: str) -> str | None:
    try:
        return normalize_pci_bus_id(raw)
    except ValueError:
        return None


def parse_kernel_log(text: str, *, host: str | None) -> ParsedBatch:
    """Every ``NVRM: Xid`` line as an :class:`XidLine`, UUIDs filled in from ``NVRM: GPU at`` lines.

    ``host`` names the machine the log came from; without it, journald's own hostname field is used.
    """
    batch = ParsedBatch(samples=[], xids=[])
    gpu_at: dict[str, list[tuple[int, str]]] = {}  # pci -> [(line_no, uuid)] in log order
    lines = text.splitlines()
    batch.lines = len(lines)
    default_host = (host or "").strip().lower() or None
    for line_no, line in enumerate(lines, 1):
        if "NVRM: " not in line:
            continue
        ts_text, line_host = "", default_host
        if (prefix := _DMESG_TS.match(line)) is not None:
            ts_text = prefix.group("ts").strip()
        elif (journal := _JOURNAL.match(line)) is not None:
            ts_text = journal.group("ts")
            line_host = default_host or journal.group("host").lower()
        if (at := _GPU_AT.search(line)) is not None:
            pci, uuid = _pci(at.group("pci")), normalize_uuid(at.group("uuid"))
            if pci and uuid:
                gpu_at.setdefault(pci, []).append((line_no, uuid))
            continue
        if "NVRM: Xid" not in line:
            continue
        match = _XID.search(line)
        pci = _pci(match.group("pci")) if match else None
        if match is None or pci is None:
            batch.rejected[UNPARSED_XID] += 1
            continue
        pid = match.group("pid")
        batch.xids.append(XidLine(
            host=line_host, pci_bus_id=pci, uuid=None, xid=int(match.group("xid")),
            pid=int(pid) if pid and pid.isdigit() else None,
            process=(match.group("name") or "").strip().strip("'").replace("<unknown>", ""),
            message=(match.group("message") or "").strip(), ts_text=ts_text, line_no=line_no))
    for xid in batch.xids:
        sightings = gpu_at.get(xid.pci_bus_id)
        if sightings:
            before = [uuid for line_no, uuid in sightings if line_no < xid.line_no]
            xid.uuid = before[-1] if before else sightings[0][1]
    return batch
