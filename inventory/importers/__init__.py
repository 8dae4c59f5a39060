"""Parsers for the files operators import GPUs from; they read bytes and never touch the database.

- ``nvidia-smi -q -x`` XML (:mod:`.nvsmi_xml`), drivers 418 to 595;
- ``nvidia-smi --query-gpu=... --format=csv[,nounits]`` (:mod:`.nvsmi_csv`);
- Fleet's own CSV (:mod:`.fleet_csv`), which is also the GPU list's export (:func:`gpu_csv_rows`).

:func:`parse` checks the encoding, detects the format (``fmt="auto"``) and dispatches. The service
that writes what was parsed is ``inventory.imports.gpus_import``.
"""

from __future__ import annotations

import csv
import io

from inventory.importers.base import (
    FLEET_CSV,
    FORMATS,
    NVIDIA_SMI_CSV,
    NVIDIA_SMI_XML,
    GpuRecord,
    ImportError_,
    ParseResult,
    check_utf8,
)
from inventory.importers.fleet_csv import FLEET_CSV_COLUMNS, gpu_csv_rows, is_fleet_header, parse_fleet_csv
from inventory.importers.nvsmi_csv import check_header, parse_nvidia_smi_csv
from inventory.importers.nvsmi_xml import parse_nvidia_smi_xml

__all__ = [
    "FLEET_CSV", "FLEET_CSV_COLUMNS", "FORMATS", "NVIDIA_SMI_CSV", "NVIDIA_SMI_XML", "GpuRecord", "ImportError_",
    "ParseResult", "gpu_csv_rows", "parse", "parse_fleet_csv", "parse_nvidia_smi_csv", "parse_nvidia_smi_xml",
    "sniff_format",
]


def sniff_format(text: str) -> str | None:
    """``nvidia-smi-xml`` when the text starts like XML; for CSV the header names decide. ``None``: unknown."""
    head = text.lstrip()
    if head.startswith("<"):
        return NVIDIA_SMI_XML
    first_line = next(csv.reader(io.StringIO(head[:65536])), [])
    names = [cell.strip().lower() for cell in first_line]
    if is_fleet_header(names) or {"model", "asset_tag", "state", "warranty_end"} & set(names):
        return FLEET_CSV  # Fleet's own columns (nvidia-smi has none of them): its parser names a bad one
    smi_names, refusal = check_header(first_line)
    if smi_names and refusal is None:
        return NVIDIA_SMI_CSV
    if any("." in name for name in smi_names) or {"name", "index", "pci.bus_id"} & set(smi_names):
        return NVIDIA_SMI_CSV  # nvidia-smi's, with a cell that is not a field name: its parser says so
    return None


# What is decoded of a file to tell XML from CSV (CSV is decoded whole anyway; XML is parsed from the bytes).
_HEAD_BYTES = 4096


def parse(content: bytes, *, filename: str, fmt: str = "auto") -> ParseResult:
    """Check the encoding (UTF-8 only; a BOM is dropped), detect the format if ``fmt="auto"``, and parse.

    XML is never decoded into text (a 64 MB file would be copied twice for nothing): the parser reads the bytes.
    """
    content, error = check_utf8(content, filename)
    if error is not None:
        return ParseResult(fmt=fmt, errors=[error])
    head = content[:_HEAD_BYTES].decode("utf-8", "ignore")  # may end inside a character: it is cut off
    text: str | None = None
    if not head.strip():  # blank so far: the whole file decides
        text = content.decode("utf-8")
        if not text.strip():
            return ParseResult(fmt=fmt, errors=[ImportError_(filename, None, "file", "the file is empty")])
    if fmt == "auto":
        if head.lstrip().startswith("<"):
            detected: str | None = NVIDIA_SMI_XML
        else:
            text = content.decode("utf-8") if text is None else text
            detected = sniff_format(text)
        if detected is None:
            return ParseResult(fmt=fmt, errors=[ImportError_(
                filename, 1, "format", "cannot tell the format: not XML, and the first line is neither an "
                "nvidia-smi CSV header nor a Fleet CSV header; choose the format explicitly")])
        fmt = detected
    if fmt == NVIDIA_SMI_XML:
        return parse_nvidia_smi_xml(content, filename=filename)
    text = content.decode("utf-8") if text is None else text
    if fmt == NVIDIA_SMI_CSV:
        return parse_nvidia_smi_csv(text, filename=filename)
    if fmt == FLEET_CSV:
        return parse_fleet_csv(text, filename=filename)
    return ParseResult(fmt=fmt, errors=[ImportError_(filename, None, "format",
                                                     f"unknown format {fmt!r} (one of auto, {', '.join(FORMATS)})")])
