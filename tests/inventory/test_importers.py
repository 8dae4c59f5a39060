"""Parsers: every real nvidia-smi XML sample, nvidia-smi CSV with and without units, Fleet CSV, hostile files."""

from __future__ import annotations

import codecs
import csv
import io
from pathlib import Path

import pytest

from inventory.identity import normalize_serial, normalize_uuid
from inventory.importers import (
    FLEET_CSV,
    FLEET_CSV_COLUMNS,
    NVIDIA_SMI_CSV,
    NVIDIA_SMI_XML,
    gpu_csv_rows,
    parse,
    sniff_format,
)
from tests import factories

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
XML = FIXTURES / "nvidia-smi-xml"


def read(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


# Expected values read from the files themselves (see tests/fixtures/SOURCES.md).
# serial/uuid: the identity after normalisation (None when masked or absent), *_raw: as reported.
SAMPLES = {
    "a100-sxm4-v12.xml": [dict(
        product_name="NVIDIA A100-SXM4-80GB", architecture="Ampere", serial="1650522003820",
        serial_raw="1650522003820", uuid="GPU-513536b6-7d19-9063-b049-1e69664bb298", pci_bus_id="00000000:01:00.0",
        minor_number=1, module_id=4, board_part_number="692-2G506-0212-002", memory_mib=81920,
        firmware={"gpu_vbios": "92.00.36.00.02", "gpu_inforom_image": "G506.0212.00.01", "gpu_inforom_oem": "2.0",
                  "gpu_inforom_ecc": "6.16", "gpu_gsp": "535.54.03", "driver": "535.54.03"})],
    "tesla-t4.xml": [dict(
        product_name="Tesla T4", architecture="Turing", serial=None, serial_raw="0000000000000",
        uuid="GPU-d37e67a5-91dd-3774-a5cb-99096249601a", pci_bus_id="00000000:00:1E.0", minor_number=0, module_id=0,
        board_part_number="900-2G183-0000-001", memory_mib=15360,
        firmware={"gpu_vbios": "90.04.84.00.06", "gpu_inforom_image": "G183.0200.00.02", "gpu_inforom_oem": "1.1",
                  "gpu_inforom_ecc": "5.0", "gpu_gsp": "515.105.01", "driver": "515.105.01"})],
    "a10g.xml": [dict(
        product_name="NVIDIA A10G", architecture="Ampere", serial=None, serial_raw="0000000000000",
        uuid="GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94", pci_bus_id="00000000:00:1E.0", minor_number=0, module_id=0,
        board_part_number=None, memory_mib=23028,  # gpu_part_number is masked 000-00000-0000-000
        firmware={"gpu_vbios": "94.02.75.00.01", "gpu_inforom_image": "G133.0210.00.04", "gpu_inforom_oem": "2.0",
                  "gpu_inforom_ecc": "6.16", "gpu_gsp": "515.105.01", "driver": "515.105.01"})],
    "quadro-p2000-v12.xml": [dict(
        product_name="Quadro P2000", architecture="Pascal", serial="0322218049033", serial_raw="0322218049033",
        uuid="GPU-396caaed-39ca-3199-2e68-717cdb786ec6", pci_bus_id="00000000:17:00.0", minor_number=0, module_id=1,
        board_part_number="900-5G410-0100-000", memory_mib=5120,
        firmware={"gpu_vbios": "86.06.3F.00.30", "gpu_inforom_image": "G410.0502.00.02", "gpu_inforom_oem": "1.1",
                  "driver": "525.125.06"})],
    "rtx-4000-sff-ada-v13.xml": [dict(
        product_name="NVIDIA RTX 4000 SFF Ada Generation", architecture="Ada Lovelace", serial=None,
        serial_raw="REDACTED", uuid="GPU-37037c3f-65c8-ec4d-24a9-420204ad8026", pci_bus_id="00000000:06:00.0",
        minor_number=0, module_id=1, board_part_number="900-5G192-1770-000", memory_mib=20475,
        firmware={"gpu_vbios": "95.04.53.00.01", "gpu_inforom_image": "G192.0550.00.02", "gpu_inforom_oem": "2.1",
                  "gpu_inforom_ecc": "6.16", "gpu_gsp": "595.84", "driver": "595.84"})],
    "gtx-1660-ti.xml": [dict(
        product_name="Graphics Device", architecture=None, serial=None, serial_raw=None,
        uuid="GPU-304a277d-3545-63b8-3a36-dfde3c992989", pci_bus_id="00000000:43:00.0", minor_number=0,
        module_id=None, board_part_number=None, memory_mib=5912,
        firmware={"gpu_vbios": "90.16.25.00.4C", "gpu_inforom_image": "G001.0000.02.04", "gpu_inforom_oem": "1.1",
                  "driver": "418.43"})],
    "dual_a5000-v13.xml": [
        dict(product_name="NVIDIA RTX A5000", architecture="Ampere", serial=None, serial_raw="0123456789012",
             uuid=None, uuid_raw="GPU-12345678-aaaa-bbbb-cccc-0123456789ab", pci_bus_id="00000000:81:00.0",
             minor_number=1, module_id=1, board_part_number="900-5G132-1700-000", memory_mib=24564,
             firmware={"gpu_vbios": "94.02.6D.00.0D", "gpu_inforom_image": "G132.0500.00.01",
                       "gpu_inforom_oem": "2.0", "gpu_inforom_ecc": "6.16", "gpu_gsp": "590.44.01",
                       "driver": "590.44.01"}),
        dict(product_name="NVIDIA RTX A5000", serial=None, serial_raw="1234567890123", uuid=None,
             uuid_raw="GPU-12345678-aaaa-bbbb-cccc-0123456789cd", pci_bus_id="00000000:C1:00.0", minor_number=0,
             module_id=1, memory_mib=24564),
    ],
    "pro-6000-maxq-blackwell-v13.xml": [dict(
        product_name="NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", architecture="Blackwell",
        serial=None, serial_raw="0123456789012", uuid=None, uuid_raw="GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
        pci_bus_id="00000000:61:00.0", minor_number=0, module_id=1, board_part_number="900-5G153-2200-000",
        memory_mib=97887,
        firmware={"gpu_vbios": "98.02.6A.00.03", "gpu_inforom_image": "G153.0520.00.02", "gpu_inforom_oem": "2.1",
                  "gpu_inforom_ecc": "7.16", "gpu_gsp": "590.44.01", "driver": "590.44.01"})],
    "v100-pcie-1card.xml": [dict(
        product_name="Tesla V100-PCIE-32GB", architecture=None, serial="0324418086185",
        uuid="GPU-e77ce5d8-8b63-c936-3c1b-839d45bcd0f2", pci_bus_id="00000000:21:01.0", minor_number=0,
        module_id=None, board_part_number="900-2G500-0010-000", memory_mib=32510,
        firmware={"gpu_vbios": "88.00.48.00.02", "gpu_inforom_image": "G500.0202.00.02", "gpu_inforom_oem": "1.1",
                  "gpu_inforom_ecc": "5.0", "driver": "460.39"})],
}


@pytest.fixture(params=["whole", "streamed"])
def xml_path(request, monkeypatch):
    """Run an XML test through both parse paths: one call (small files) and the streaming pull parser."""
    from inventory.importers import nvsmi_xml

    if request.param == "streamed":
        monkeypatch.setattr(nvsmi_xml, "WHOLE_DOCUMENT_BYTES", 0)
    return request.param


def test_every_sample_file_is_covered():
    assert sorted(p.name for p in XML.glob("*.xml")) == sorted(SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
@pytest.mark.usefixtures("xml_path")
def test_real_nvidia_smi_xml_samples(name):
    result = parse((XML / name).read_bytes(), filename=name)

    assert result.errors == []
    assert result.fmt == NVIDIA_SMI_XML
    assert len(result.records) == len(SAMPLES[name])
    for record, expected in zip(result.records, SAMPLES[name], strict=True):
        for attr, value in expected.items():
            assert getattr(record, attr) == value, (name, attr)


@pytest.mark.usefixtures("xml_path")
def test_attached_gpus_is_not_trusted():
    content = (XML / "a100-sxm4-v12.xml").read_bytes()
    assert b"<attached_gpus>4</attached_gpus>" in content
    assert len(parse(content, filename="a100.xml").records) == 1


def test_mig_instances_do_not_replace_the_board_memory():
    # a100 holds four <mig_device> with <fb_memory_usage><total>19968 MiB; the board has 81920 MiB
    (record,) = parse((XML / "a100-sxm4-v12.xml").read_bytes(), filename="a100.xml").records
    assert record.memory_mib == 81920


def test_masked_identities_are_flagged_not_identities():
    t4 = parse((XML / "tesla-t4.xml").read_bytes(), filename="t4.xml").records[0]
    gtx = parse((XML / "gtx-1660-ti.xml").read_bytes(), filename="gtx.xml").records[0]
    assert (t4.serial, t4.serial_masked, t4.uuid_masked) == (None, True, False)
    assert (gtx.serial, gtx.serial_masked) == (None, False)  # N/A: absent, not masked
    assert normalize_serial("0000000000000") is None
    assert normalize_serial("1650522003820") == "1650522003820"
    assert normalize_uuid("GPU-00000000-0000-0000-0000-000000000000") is None
    assert normalize_uuid("GPU-00000000-1111-2222-3333-444455556666") is None
    assert normalize_uuid("513536B6-7D19-9063-B049-1E69664BB298") == "GPU-513536b6-7d19-9063-b049-1e69664bb298"


# --- nvidia-smi --query-gpu CSV ------------------------------------------------------------------

def test_nvidia_smi_csv_with_units_and_telemetry_columns():
    result = parse(read("nvidia-smi-csv/h100-8gpu-units.csv"), filename="h100.csv")

    assert result.errors == []
    assert result.fmt == NVIDIA_SMI_CSV
    assert len(result.records) == 8
    first, last = result.records[0], result.records[-1]
    assert first.line == 2
    assert first.product_name == "NVIDIA H100 80GB HBM3"
    assert first.serial == "1652923034721"
    assert first.uuid == "GPU-3f9a2c1e-8b4d-4e7a-9c21-6d5f0a8b7e12"
    assert first.pci_bus_id == "00000000:18:00.0"
    assert first.minor_number == 0
    assert first.memory_mib == 81559
    assert first.firmware == {"gpu_vbios": "96.00.74.00.1A", "driver": "535.183.01",
                              "gpu_inforom_image": "G520.0200.00.05", "gpu_inforom_oem": "2.1",
                              "gpu_inforom_ecc": "7.16"}  # inforom.pwr [N/A]: absent
    assert (last.pci_bus_id, last.minor_number) == ("00000000:DB:00.0", 7)
    assert first.hostname is None


def test_nvidia_smi_csv_nounits_with_na_values_and_hostname():
    result = parse(read("nvidia-smi-csv/a100-4gpu-nounits-na.csv"), filename="a100.csv")

    assert result.errors == []
    records = result.records
    assert [r.module_id for r in records] == [2, 4, 1, 3]
    assert {r.hostname for r in records} == {"gpu-node-017"}
    assert records[0].memory_mib == 40960
    assert (records[2].serial, records[2].serial_raw) == (None, None)  # [N/A]
    assert "gpu_inforom_ecc" not in records[3].firmware  # [Not Supported]


# A driver 590-610 query: fields every release adds, next to the ones Fleet imports.
NEW_DRIVER_HEADER = ("index, name, serial, uuid, pci.bus_id, driver_version, kmd_version, vbios_version, "
                     "gsp.mode.current, gsp.mode.default, dramencryption.mode.current, "
                     "module.power.draw.average [W], edpp_multiplier, gpu.base.clocks.sm [MHz], bbx.time_run, "
                     "memory.total [MiB], temperature.gpu")
NEW_DRIVER_ROW = ("0, NVIDIA B200, 1653024000011, GPU-3f9a2c1e-8b4d-4e7a-9c21-6d5f0a8b7e12, 00000000:18:00.0, "
                  "610.12, 610.12, 97.00.52.00.01, Enabled, Enabled, Disabled, 812.34 W, [N/A], 1965 MHz, "
                  "123456, 183359 MiB, 31")


def test_nvidia_smi_csv_fields_of_newer_drivers_are_ignored_with_a_notice():
    content = f"{NEW_DRIVER_HEADER}\n{NEW_DRIVER_ROW}\n".encode()
    result = parse(content, filename="b200.csv")  # detected as nvidia-smi CSV despite the new names

    assert result.errors == []
    assert result.fmt == NVIDIA_SMI_CSV
    [record] = result.records
    assert (record.serial, record.memory_mib, record.firmware["driver"]) == ("1653024000011", 183359, "610.12")
    [notice] = result.notices
    assert (notice.file, notice.line, notice.field) == ("b200.csv", 1, "header")
    for name in ("kmd_version", "gsp.mode.current", "dramencryption.mode.current", "module.power.draw.average [W]",
                 "edpp_multiplier", "gpu.base.clocks.sm [MHz]", "bbx.time_run", "temperature.gpu"):
        assert name in notice.message


def test_nvidia_smi_csv_typo_in_a_field_name_is_a_notice_not_a_refusal():
    content = b"name, serial, uuid, temprature.gpu, pci.bus_id\nNVIDIA H100, 1, GPU-x, 30, 00000000:18:00.0\n"
    result = parse(content, filename="typo.csv", fmt=NVIDIA_SMI_CSV)

    assert result.errors == []
    assert len(result.records) == 1
    assert "temprature.gpu" in result.notices[0].message


@pytest.mark.parametrize("header", [
    "Serial Number, UUID",  # a spreadsheet's header
    "colour, size",  # looks like field names, none of them nvidia-smi's
    "name, serial, memory.total [MiB",  # a malformed column Fleet needs
])
def test_nvidia_smi_csv_header_that_is_not_nvidia_smis_is_refused(header):
    result = parse(f"{header}\nA, B, C\n".encode(), filename="other.csv", fmt=NVIDIA_SMI_CSV)

    assert result.records == []
    assert [(e.line, e.field) for e in result.errors] == [(1, "header")]
    assert "not an nvidia-smi header" in result.errors[0].message


def test_nvidia_smi_csv_bad_value_in_a_column_fleet_imports_is_still_an_error():
    content = f"{NEW_DRIVER_HEADER}\n{NEW_DRIVER_ROW.replace('183359 MiB', 'lots')}\n".encode()
    result = parse(content, filename="b200.csv")

    assert [str(e) for e in result.errors] == ["b200.csv:2: memory.total [MiB]: 'lots' is not a whole number"]


def test_nvidia_smi_csv_without_header_is_refused():
    content = b"NVIDIA H100 80GB HBM3, 1652923034721, GPU-3f9a2c1e-8b4d-4e7a-9c21-6d5f0a8b7e12\n"
    result = parse(content, filename="noheader.csv", fmt=NVIDIA_SMI_CSV)
    assert "not an nvidia-smi header" in str(result.errors[0])


def test_nvidia_smi_csv_bad_values_name_line_and_column():
    content = (b"name, serial, pci.bus_id, platform.module_id\n"
               b"NVIDIA H100, 1652923034721, 00000000:18:00.0, 1\n"
               b"NVIDIA H100, 1652923034988, 0000:zz:00.0, two\n")
    result = parse(content, filename="bad.csv")

    assert sorted(str(e) for e in result.errors) == [
        "bad.csv:3: pci.bus_id: not a PCI bus id: '0000:zz:00.0'",
        "bad.csv:3: platform.module_id: 'two' is not a whole number",
    ]


# --- format detection and encodings ---------------------------------------------------------------

def test_sniff_format():
    assert sniff_format('<?xml version="1.0" ?>\n<nvidia_smi_log>') == NVIDIA_SMI_XML
    assert sniff_format("<nvidia_smi_log>") == NVIDIA_SMI_XML
    assert sniff_format("index, name, memory.total [MiB]\n0, x, 1 MiB\n") == NVIDIA_SMI_CSV
    assert sniff_format("serial,uuid,model,state\n") == FLEET_CSV
    assert sniff_format("hello,world\n") is None


def test_empty_and_unrecognisable_files():
    assert [str(e) for e in parse(b" \n", filename="e.csv").errors] == ["e.csv: file: the file is empty"]
    (error,) = parse(b"hello,world\n1,2\n", filename="w.csv").errors
    assert str(error).startswith("w.csv:1: format: cannot tell the format")


def test_windows_line_endings():
    content = read("nvidia-smi-csv/a100-4gpu-nounits-na.csv").replace(b"\n", b"\r\n")
    result = parse(content, filename="win.csv")
    assert result.errors == [] and result.records[-1].hostname == "gpu-node-017"


def test_utf8_bom_is_accepted():
    content = codecs.BOM_UTF8 + read("nvidia-smi-csv/h100-8gpu-units.csv")
    result = parse(content, filename="bom.csv")
    assert result.errors == [] and len(result.records) == 8


def test_utf16_is_refused_with_a_clear_error():
    content = read("nvidia-smi-csv/h100-8gpu-units.csv").decode().encode("utf-16")
    (error,) = parse(content, filename="ps.csv").errors
    assert str(error).startswith("ps.csv:1: encoding: the file is UTF-16")


def test_latin1_is_refused_naming_the_line():
    content = "serial,model,hostname\n1652923040011,NVIDIA H100,n\n1652923040022,Carte graphique \xe9,n\n"
    (error,) = parse(content.encode("latin-1"), filename="l1.csv").errors
    assert str(error) == ("l1.csv:3: encoding: byte 0xE9 is not UTF-8 (Latin-1 or Windows-1252 text?); "
                          "save the file as UTF-8")


# --- hostile and broken XML ---------------------------------------------------------------------

@pytest.mark.usefixtures("xml_path")
def test_truncated_xml_names_the_line():
    content = (XML / "tesla-t4.xml").read_bytes()[:5000]
    (error,) = parse(content, filename="t4.xml").errors
    assert error.file == "t4.xml" and error.field == "XML" and error.line and error.line > 100
    assert "not well-formed" in error.message


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE nvidia_smi_log [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol9 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
]>
<nvidia_smi_log><gpu id="00000000:01:00.0"><product_name>&lol9;</product_name></gpu></nvidia_smi_log>
"""
XXE = b"""<?xml version="1.0"?>
<!DOCTYPE nvidia_smi_log [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<nvidia_smi_log><gpu id="00000000:01:00.0"><serial>&xxe;</serial></gpu></nvidia_smi_log>
"""
INTERNAL_SUBSET = b"""<?xml version="1.0"?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd" [<!ELEMENT nvidia_smi_log ANY>]>
<nvidia_smi_log/>
"""
# A comment before the DOCTYPE holding something that looks like an element: the old check took the comment's
# "<gpu>" for the first element and never looked at the DOCTYPE after it.
COMMENT_FIRST = b"""<?xml version="1.0"?>
<!-- <gpu> --><!DOCTYPE nvidia_smi_log [<!ENTITY x "expanded">]>
<nvidia_smi_log><gpu id="00000000:01:00.0"><serial>&x;</serial></gpu></nvidia_smi_log>
"""
ATTLIST_ONLY = b"""<?xml version="1.0"?>
<!DOCTYPE nvidia_smi_log [<!ATTLIST gpu id CDATA "00000000:01:00.0">]>
<nvidia_smi_log><gpu><serial>1</serial></gpu></nvidia_smi_log>
"""


@pytest.mark.parametrize("content", [BILLION_LAUGHS, XXE, INTERNAL_SUBSET, COMMENT_FIRST, ATTLIST_ONLY],
                         ids=["billion-laughs", "xxe", "subset", "comment-before-doctype", "attlist"])
@pytest.mark.usefixtures("xml_path")
def test_dtd_internal_subsets_and_entities_are_refused(content):
    result = parse(content, filename="evil.xml")

    assert result.records == []
    (error,) = result.errors
    assert (error.file, error.line, error.field) == ("evil.xml", 2, "DOCTYPE")
    assert "refused" in error.message
    assert "root:" not in str(error)


def test_the_second_layer_refuses_a_doctype_the_prolog_check_missed():
    """Each layer of fleet.safexml on its own: a DOCTYPE the parser saw and the prolog check did not is refused."""
    from lxml import etree

    from fleet import safexml

    root = etree.fromstring(COMMENT_FIRST, safexml.parser())
    assert root.getroottree().docinfo.internalDTD is not None  # the parser did see it...
    assert "expanded" not in etree.tostring(root).decode()  # ...and expanded nothing
    with pytest.raises(safexml.UnsafeXmlError, match="did not see"):
        safexml.check_tree(root, None)  # as if the first layer had been fooled


@pytest.mark.usefixtures("xml_path")
def test_external_dtd_is_accepted_but_never_loaded():
    content = (XML / "tesla-t4.xml").read_bytes().replace(b'SYSTEM "nvsmi_device_v11.dtd"',
                                                          b'SYSTEM "file:///etc/passwd"')
    result = parse(content, filename="t4.xml")
    assert result.errors == [] and result.records[0].product_name == "Tesla T4"


@pytest.mark.usefixtures("xml_path")
def test_xml_that_is_not_nvidia_smi_is_refused():
    (error,) = parse(b"<?xml version='1.0'?><html><gpu/></html>", filename="x.xml").errors
    assert "root element is <html>" in error.message


@pytest.mark.usefixtures("xml_path")
def test_xml_bad_values_name_the_element():
    content = (XML / "a100-sxm4-v12.xml").read_bytes().replace(b"<gpu_module_id>4<", b"<gpu_module_id>four<")
    (error,) = parse(content, filename="a100.xml").errors
    assert str(error) == "a100.xml:8: gpu_module_id: 'four' is not a whole number"


# --- Fleet CSV ---------------------------------------------------------------------------------

def test_fleet_csv_parses_every_column():
    result = parse(read("fleet-csv/small-fleet.csv"), filename="fleet.csv")

    assert result.errors == [] and result.fmt == FLEET_CSV
    first, spare = result.records[0], result.records[2]
    assert (first.serial, first.product_name, first.asset_tag, str(first.warranty_end)) == (
        "1652923040011", "NVIDIA H100 80GB HBM3", "AT-000101", "2029-03-31")
    assert (first.hostname, first.module_id, first.pci_bus_id, first.state) == (
        "gpu-b07-r12-n03", 1, "00000000:18:00.0", "in_service")
    assert first.firmware == {"gpu_vbios": "96.00.74.00.1A", "gpu_inforom_image": "G520.0200.00.05",
                              "driver": "535.183.01"}
    assert (spare.uuid, spare.hostname, spare.state, spare.firmware) == (None, None, "spare",
                                                                        {"gpu_vbios": "96.00.74.00.1A"})


def test_fleet_csv_bad_values():
    content = (b"serial,model,warranty_end,state,hostname,pci_bus_id,module_id,colour\n")
    (error,) = parse(content, filename="f.csv", fmt=FLEET_CSV).errors
    assert str(error).startswith("f.csv:1: colour: unknown column")

    content = (b"serial,model,warranty_end,state,hostname,pci_bus_id\n"
               b"1652923040011,NVIDIA H100,2029-02-30,in_service,n1,00000000:18:00.0\n"
               b"1652923040022,NVIDIA H100,,broken,n1,00000000:2A:00.0\n"
               b"1652923040033,NVIDIA H100,,,,00000000:3A:00.0\n")
    assert [str(e) for e in parse(content, filename="f.csv").errors] == [
        "f.csv:2: warranty_end: '2029-02-30' is not a date (YYYY-MM-DD)",
        "f.csv:3: state: unknown state 'broken' (one of ordered, received, burn_in, burn_in_failed, in_service, drained, rma, "
        "spare, decommissioning, sanitized, disposed)",
        "f.csv:4: hostname: a PCI bus id or module id needs a hostname",
    ]


@pytest.mark.django_db
def test_gpu_csv_rows_exports_the_fleet_columns(django_assert_max_num_queries):
    server = factories.server(hostname="node-export")
    gpu = factories.gpu(server, asset_tag="=HYPERLINK(1)", warranty_end="2030-01-31", vbios_version="96.00.74.00.1A")
    factories.gpu(serial_raw="REDACTED", serial=None, identity_masked=True)

    with django_assert_max_num_queries(1):
        rows = list(gpu_csv_rows(type(gpu).objects.order_by("id")))

    assert rows[0] == list(FLEET_CSV_COLUMNS)
    exported = dict(zip(FLEET_CSV_COLUMNS, rows[1], strict=True))
    assert exported["serial"] == gpu.serial
    assert exported["asset_tag"] == "'=HYPERLINK(1)"  # a spreadsheet must not run it
    assert (exported["hostname"], exported["warranty_end"], exported["state"]) == ("node-export", "2030-01-31",
                                                                                    "in_service")
    assert rows[2][0] == "REDACTED"
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    parsed = parse(buffer.getvalue().encode(), filename="export.csv")
    assert parsed.errors == [] and parsed.records[0].asset_tag == "=HYPERLINK(1)"


def test_a_fleet_csv_with_a_misspelt_column_is_still_read_as_fleet_csv():
    """Detection: Fleet's own columns decide before nvidia-smi's liberal header rule could take the file."""
    result = parse(b"serial,model,colour\n1652923040011,NVIDIA H100 80GB HBM3,red\n", filename="f.csv")
    assert result.fmt == FLEET_CSV
    assert str(result.errors[0]).startswith("f.csv:1: colour: unknown column")
