"""What every importer returns: one :class:`GpuRecord` per GPU in the file, or errors that name the
file, the line (or CSV row) and the field. Parsers never touch the database.
"""

from __future__ import annotations

import codecs
import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from inventory.identity import is_absent, normalize_serial, normalize_uuid

NVIDIA_SMI_XML = "nvidia-smi-xml"
NVIDIA_SMI_CSV = "nvidia-smi-csv"
FLEET_CSV = "csv"
FORMATS = (NVIDIA_SMI_XML, NVIDIA_SMI_CSV, FLEET_CSV)

# Firmware components (``inventory.models.FirmwareComponent`` values) that importers report.
FW_VBIOS = "gpu_vbios"
FW_INFOROM_IMAGE = "gpu_inforom_image"
FW_INFOROM_OEM = "gpu_inforom_oem"
FW_INFOROM_ECC = "gpu_inforom_ecc"
FW_INFOROM_PWR = "gpu_inforom_pwr"
FW_GSP = "gpu_gsp"
FW_DRIVER = "driver"


@dataclass(frozen=True)
class ImportError_:  # noqa: N801 - the trailing underscore keeps Python's ImportError unshadowed
    """One problem with an import file. ``line`` is the XML line or CSV line; ``None`` for the file."""

    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"

    def as_dict(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "field": self.field, "message": self.message}


@dataclass(slots=True)
class GpuRecord:
    """One GPU as a file reports it. ``None`` means "not in the file": the importer keeps what Fleet has.

    ``serial``/``uuid`` are identities (normalised, ``None`` when absent or masked); ``serial_raw`` /
    ``uuid_raw`` are the values as reported (``None`` when absent). ``fields`` maps these attribute
    names to the file's own names (``pci/pci_bus_id``, ``memory.total``) for error messages.
    """

    line: int
    fields: Mapping[str, str] = field(repr=False)
    serial: str | None = None
    serial_raw: str | None = None
    uuid: str | None = None
    uuid_raw: str | None = None
    product_name: str | None = None
    architecture: str | None = None
    memory_mib: int | None = None
    board_part_number: str | None = None
    asset_tag: str | None = None
    warranty_end: dt.date | None = None
    state: str | None = None
    hostname: str | None = None
    pci_bus_id: str | None = None
    minor_number: int | None = None
    module_id: int | None = None
    firmware: dict[str, str] = field(default_factory=dict)
    source: str | None = None  # the file it came from, when several files are imported together
    fmt: str | None = None  # that file's format (a batch may mix them)

    @property
    def serial_masked(self) -> bool:
        return self.serial is None and self.serial_raw is not None

    @property
    def uuid_masked(self) -> bool:
        return self.uuid is None and self.uuid_raw is not None

    def field_name(self, name: str) -> str:
        return self.fields.get(name, name)

    def set_serial(self, raw: str | None) -> None:
        self.serial_raw = None if is_absent(raw) else raw.strip()  # type: ignore[union-attr]
        self.serial = normalize_serial(self.serial_raw)

    def set_uuid(self, raw: str | None) -> None:
        self.uuid_raw = None if is_absent(raw) else raw.strip()  # type: ignore[union-attr]
        self.uuid = normalize_uuid(self.uuid_raw)


@dataclass
class ParseResult:
    fmt: str
    records: list[GpuRecord] = field(default_factory=list)
    errors: list[ImportError_] = field(default_factory=list)
    # What was read past without harm (columns a newer driver added): shown with the preview, never an error.
    notices: list[ImportError_] = field(default_factory=list)


class RecordError(ValueError):
    """A bad value in one record; the parser turns it into an :class:`ImportError_`."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name
        self.message = message


def clean(value: str | None) -> str | None:
    """The value stripped, or ``None`` for nvidia-smi's "no value" placeholders and empty strings."""
    if value is None:
        return None
    value = value.strip()
    return None if is_absent(value) else value


_LEADING_INT = re.compile(r"^\s*(\d+)(?:\s*[A-Za-z]+)?\s*$")
SMALLINT_MAX = 32767


def parse_int(value: str | None, field_name: str, *, maximum: int = SMALLINT_MAX) -> int | None:
    """``'4'`` or ``'81559 MiB'`` as an int; placeholders as ``None``; anything else a RecordError."""
    value = clean(value)
    if value is None:
        return None
    match = _LEADING_INT.match(value)
    if not match:
        raise RecordError(field_name, f"{value!r} is not a whole number")
    number = int(match.group(1))
    if number > maximum:
        raise RecordError(field_name, f"{number} is larger than {maximum}")
    return number


_UTF16_32_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def decode_utf8(content: bytes, filename: str) -> tuple[bytes, str | None, ImportError_ | None]:
    """Check the file is UTF-8 (a UTF-8 BOM is dropped). Returns (bytes without BOM, text, error)."""
    content, error = check_utf8(content, filename)
    return content, None if error is not None else content.decode("utf-8"), error


def check_utf8(content: bytes, filename: str) -> tuple[bytes, ImportError_ | None]:
    """:func:`decode_utf8` without making the text (XML is parsed from the bytes): (bytes without BOM, error).
    ASCII, which is what nvidia-smi writes, is recognised without decoding."""
    if content.startswith(codecs.BOM_UTF8):
        content = content[len(codecs.BOM_UTF8):]
    if content.startswith(_UTF16_32_BOMS) or b"\x00" in content[:4096]:
        return content, ImportError_(filename, 1, "encoding", "the file is UTF-16 or UTF-32, not UTF-8; "
                                     "save it as UTF-8 (PowerShell: use Out-File -Encoding utf8)")
    if content.isascii():
        return content, None
    try:
        content.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = content.count(b"\n", 0, exc.start) + 1
        byte = content[exc.start]
        return content, ImportError_(filename, line, "encoding", f"byte 0x{byte:02X} is not UTF-8 (Latin-1 or "
                                     "Windows-1252 text?); save the file as UTF-8")
    return content, None
