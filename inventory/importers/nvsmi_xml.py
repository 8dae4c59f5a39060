"""``nvidia-smi -q -x`` output (drivers 418 to 595): one :class:`GpuRecord` per ``<gpu>`` element.

The document is read with Fleet's one hardened XML reader (:mod:`fleet.safexml`): no DTD is loaded, no
entity is expanded, no network is used, and a DOCTYPE with an internal subset is refused before parsing
and again after it (the real files carry only ``<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">``,
or no DOCTYPE).
``attached_gpus`` is not trusted (trimmed files say 4 and hold one ``<gpu>``); the elements are counted.
Field mapping and driver quirks: ``shared/design/telemetry-formats.md`` §3 and §5.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from lxml import etree

from fleet import safexml
from inventory.identity import normalize_pci_bus_id
from inventory.importers.base import (
    FW_DRIVER,
    FW_GSP,
    FW_INFOROM_ECC,
    FW_INFOROM_IMAGE,
    FW_INFOROM_OEM,
    FW_INFOROM_PWR,
    FW_VBIOS,
    NVIDIA_SMI_XML,
    GpuRecord,
    ImportError_,
    ParseResult,
    RecordError,
    clean,
    parse_int,
)

ROOT_TAG = "nvidia_smi_log"
_FEED_BYTES = 1 << 20

FIELDS = {
    "serial": "serial", "uuid": "uuid", "product_name": "product_name", "architecture": "product_architecture",
    "memory_mib": "fb_memory_usage/total", "board_part_number": "board_part_number",
    "pci_bus_id": "pci/pci_bus_id", "minor_number": "minor_number", "module_id": "platformInfo/module_id",
    "hostname": "server",
    FW_VBIOS: "vbios_version", FW_INFOROM_IMAGE: "inforom_version/img_version",
    FW_INFOROM_OEM: "inforom_version/oem_object", FW_INFOROM_ECC: "inforom_version/ecc_object",
    FW_INFOROM_PWR: "inforom_version/pwr_object", FW_GSP: "gsp_firmware_version", FW_DRIVER: "driver_version",
}
# (part number from gpu_part_number, module id from gpu_module_id) -> field names for error messages
_FIELD_NAMES = {
    (legacy_part, legacy_module): {**FIELDS, **({"board_part_number": "gpu_part_number"} if legacy_part else {}),
                                   **({"module_id": "gpu_module_id"} if legacy_module else {})}
    for legacy_part in (False, True) for legacy_module in (False, True)
}
_INFOROM = (("img_version", FW_INFOROM_IMAGE), ("oem_object", FW_INFOROM_OEM), ("ecc_object", FW_INFOROM_ECC),
            ("pwr_object", FW_INFOROM_PWR))
_INFOROM_TAGS = tuple(tag for tag, _component in _INFOROM)
_ZERO_PART = re.compile(r"^[0\-]+$")  # a10g's masked ``000-00000-0000-000``

# The children of <gpu> that are read (a v13 <gpu> has about 100): lxml's tag matcher picks them in C, so
# no Python object is made for the others.
_WANTED = ("serial", "uuid", "product_name", "product_architecture", "board_part_number", "gpu_part_number",
           "fb_memory_usage", "minor_number", "gpu_module_id", "platformInfo", "pci", "vbios_version",
           "inforom_version", "gsp_firmware_version")


def _text(element: etree._Element | None) -> str | None:
    return None if element is None else clean(element.text)


def _child(element: etree._Element | None, tag: str) -> etree._Element | None:
    """The first child ``tag`` of ``element`` (``element.find(tag)`` without the path machinery)."""
    return None if element is None else next(element.iterchildren(tag), None)


def _record(gpu: etree._Element, driver: str | None, filename: str, errors: list[ImportError_]) -> GpuRecord:
    children = {child.tag: child for child in gpu.iterchildren(*_WANTED)}
    legacy = "board_part_number" not in children  # <= 515: gpu_part_number holds the board part number
    record = GpuRecord(line=gpu.sourceline or 0, fields=_FIELD_NAMES[legacy, "gpu_module_id" in children])
    record.set_serial(_text(children.get("serial")))
    record.set_uuid(_text(children.get("uuid")))
    record.product_name = _text(children.get("product_name"))
    record.architecture = _text(children.get("product_architecture"))
    part = _text(children.get("gpu_part_number" if legacy else "board_part_number"))
    record.board_part_number = None if part is None or _ZERO_PART.match(part) else part
    try:
        record.memory_mib = parse_int(_text(_child(children.get("fb_memory_usage"), "total")), FIELDS["memory_mib"],
                                      maximum=2**31 - 1)
        record.minor_number = parse_int(_text(children.get("minor_number")), FIELDS["minor_number"])
        if "gpu_module_id" in children:
            record.module_id = parse_int(_text(children["gpu_module_id"]), "gpu_module_id")
        elif (platform := children.get("platformInfo")) is not None:
            record.module_id = parse_int(_text(_child(platform, "module_id")), FIELDS["module_id"])
        bus = _text(_child(children.get("pci"), "pci_bus_id"))
        try:
            record.pci_bus_id = normalize_pci_bus_id(bus or gpu.get("id")) or None
        except ValueError as exc:
            raise RecordError(FIELDS["pci_bus_id"], str(exc)) from None
    except RecordError as exc:
        errors.append(ImportError_(filename, record.line, exc.field, exc.message))
    firmware = record.firmware
    if (vbios := _text(children.get("vbios_version"))) is not None:
        firmware[FW_VBIOS] = vbios
    if (inforom := children.get("inforom_version")) is not None:
        versions = {child.tag: child for child in reversed(list(inforom.iterchildren(*_INFOROM_TAGS)))}
        for tag, component in _INFOROM:
            if (version := _text(versions.get(tag))) is not None:
                firmware[component] = version
    if (gsp := _text(children.get("gsp_firmware_version"))) is not None:
        firmware[FW_GSP] = gsp
    if driver is not None:
        firmware[FW_DRIVER] = driver
    return record


# Below this size (one host's output is 0.1-1 MB) a document is parsed in one call, about twice as fast
# as the pull parser (an 8-GPU v13 file: 1.6 ms against 3.4 ms); above it, it is streamed so a 64 MB
# file never becomes one tree in memory.
WHOLE_DOCUMENT_BYTES = 8 << 20


def parse_nvidia_smi_xml(content: bytes, *, filename: str) -> ParseResult:
    """Parse ``nvidia-smi -q -x`` bytes (UTF-8, already checked): in one call when small, else streaming."""
    result = ParseResult(fmt=NVIDIA_SMI_XML)
    try:
        doctype = safexml.check_prolog(content)
        if len(content) <= WHOLE_DOCUMENT_BYTES:
            root = etree.fromstring(content, safexml.parser())
            driver = clean(root.findtext("driver_version"))
            records = [_record(gpu, driver, filename, result.errors) for gpu in root.iterchildren("gpu")]
        else:
            root, driver, records = _stream(content, filename, result.errors)
        safexml.check_tree(root, doctype)
    except safexml.UnsafeXmlError as exc:
        result.errors.append(ImportError_(filename, exc.line, "DOCTYPE", exc.message))
        return result
    except etree.XMLSyntaxError as exc:
        result.errors.append(ImportError_(filename, exc.lineno or None, "XML", f"not well-formed XML: {exc.msg}"))
        return result
    if root.tag != ROOT_TAG:
        result.errors.append(ImportError_(filename, root.sourceline, "XML", f"not nvidia-smi -q -x output: the root "
                                                                         f"element is <{root.tag}>, not <{ROOT_TAG}>"))
        return result
    if driver is not None:  # a driver_version after the <gpu> elements (never seen, but legal)
        for record in records:
            record.firmware.setdefault(FW_DRIVER, driver)
    if not records and not result.errors:
        result.errors.append(ImportError_(filename, None, "gpu", "the file holds no <gpu> element"))
    result.records = records
    return result


def _stream(content: bytes, filename: str,
            errors: list[ImportError_]) -> tuple[etree._Element, str | None, list[GpuRecord]]:
    """Parse a large document piece by piece: each ``<gpu>`` is read, then freed."""
    driver: str | None = None
    records: list[GpuRecord] = []

    def take(events: Iterator[tuple[str, etree._Element]]) -> None:
        nonlocal driver
        for _event, element in events:
            parent = element.getparent()
            if parent is None or parent.getparent() is not None:
                continue  # only children of the root element
            if element.tag == "driver_version":
                driver = clean(element.text)
                continue
            records.append(_record(element, driver, filename, errors))
            element.clear(keep_tail=True)
            while element.getprevious() is not None:
                del parent[0]

    parser = safexml.pull_parser(events=("end",), tag=("gpu", "driver_version"))
    for start in range(0, len(content), _FEED_BYTES):
        parser.feed(content[start:start + _FEED_BYTES])
        take(parser.read_events())
    root = parser.close()
    take(parser.read_events())
    return root, driver, records
