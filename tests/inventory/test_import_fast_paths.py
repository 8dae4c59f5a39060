"""The import's fast paths (docs/imports.md) keep every guarantee of the plain ones: new GPUs and servers written as
plain rows audit exactly what ``gpu_create`` would, cached CSV cells still fail row by row, files parsed in threads
report in file order, XML is not decoded for sniffing, the prolog check stays linear, and the identities of a whole
file are loaded with one query."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.audit import SystemActor, diff, snapshot
from fleet.models import AuditEvent
from fleet.safexml import UnsafeXmlError, check_prolog
from inventory import imports as imports_module
from inventory.importers import parse
from inventory.imports import ImportFile, gpus_import, gpus_import_many
from inventory.models import FirmwareObservation, Gpu, Server

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
ACTOR = SystemActor("test-import")


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


# --- new rows without model instances ------------------------------------------------------------------

@pytest.mark.sqlite
@pytest.mark.django_db
def test_new_gpus_and_servers_are_audited_as_the_services_would():
    files = [ImportFile("a.xml", fixture("nvidia-smi-xml/dual_a5000-v13.xml"), "ws-a"),  # masked serial and UUID
             ImportFile("b.csv", fixture("nvidia-smi-csv/h100-8gpu-units.csv"), "ws-b")]
    result = gpus_import_many(files=files, actor=ACTOR)
    assert result.errors == [] and result.created == 10

    for gpu in Gpu.objects.select_related("server"):
        event = AuditEvent.objects.get(content_type__model="gpu", object_id=str(gpu.pk))
        assert event.object_repr == str(gpu)
        assert event.changes == {k: [None, v] for k, v in snapshot(gpu).items() if v not in (None, "")}
    for server in Server.objects.all():  # one snapshot for all new servers, then each one's id and hostname
        event = AuditEvent.objects.get(content_type__model="server", object_id=str(server.pk))
        assert (event.object_repr, event.changes) == (server.hostname, diff({}, snapshot(server)))
    # a batch mixing formats: each observation names its own file's format (the batch's "a+b" does not fit)
    assert set(FirmwareObservation.objects.values_list("gpu__server__hostname", "source").distinct()) == {
        ("ws-a", "nvidia-smi-xml"), ("ws-b", "nvidia-smi-csv")}
    masked = Gpu.objects.filter(identity_masked=True).first()
    assert masked is not None and str(masked) == masked.serial_raw


# --- parsing --------------------------------------------------------------------------------------------

def test_a_cached_csv_cell_fails_on_every_row_that_holds_it():
    content = (b"hostname, index, name, serial, pci.bus_id\n"
               b"n1, 0, NVIDIA H100, 1652923040011, 0000:GG:00.0\n"
               b"n1, 1, NVIDIA H100, 1652923040022, 0000:GG:00.0\n"
               b"n1, 2, NVIDIA H100, 1652923040033, 00000000:18:00.0\n"
               b"n1, 3, NVIDIA H100, 1652923040044, 00000000:18:00.0\n")
    result = parse(content, filename="c.csv")
    assert [(e.line, e.field) for e in result.errors] == [(2, "pci.bus_id"), (3, "pci.bus_id")]
    assert [(r.line, r.pci_bus_id, r.product_name) for r in result.records] == [
        (4, "00000000:18:00.0", "NVIDIA H100"), (5, "00000000:18:00.0", "NVIDIA H100")]


def test_xml_is_sniffed_from_its_head_and_utf8_still_checked():
    content = fixture("nvidia-smi-xml/a100-sxm4-v12.xml")
    padded = b" " * 10_000 + content.split(b"\n", 1)[1]  # more blank than the sniffed head: the whole file decides
    assert parse(padded, filename="p.xml").records[0].serial == "1650522003820"
    accented = content.replace(b"<product_brand>", "<!-- d\u00e9p\u00f4t -->".encode() + b"<product_brand>", 1)
    assert not accented.isascii() and parse(accented, filename="u.xml").errors == []
    latin1 = content.replace(b"<product_brand>", "<!-- d\xe9p\xf4t -->".encode("latin-1") + b"<product_brand>", 1)
    (error,) = parse(latin1, filename="l.xml").errors
    assert (error.field, error.message[:15]) == ("encoding", "byte 0xE9 is no")
    assert [str(e) for e in parse(b" " * 10_000 + b"\n", filename="e.xml").errors] == ["e.xml: file: the file is empty"]


def test_the_prolog_check_is_linear_and_still_names_the_line():
    comments = b"<!-- a comment -->\n" * 100_000
    started = time.process_time()
    with pytest.raises(UnsafeXmlError) as excinfo:
        check_prolog(comments + b'<!DOCTYPE nvidia_smi_log [<!ENTITY x "x">]>\n<nvidia_smi_log/>')
    assert excinfo.value.line == 100_001
    assert check_prolog(comments + b"<nvidia_smi_log/>") is None
    assert time.process_time() - started < 5  # counting lines per token took minutes here


@pytest.mark.django_db
@pytest.mark.parametrize("threads", [1, 3])
def test_files_parsed_in_threads_report_in_file_order(threads, monkeypatch, settings):
    monkeypatch.setattr(imports_module, "PARSE_THREADS", threads)
    settings.FLEET_IMPORT_MAX_BYTES = 200_000
    good, broken = fixture("nvidia-smi-xml/dual_a5000-v13.xml"), fixture("nvidia-smi-xml/v100-pcie-1card.xml")[:2000]
    big = fixture("nvidia-smi-xml/a100-sxm4-v12.xml") + b" " * 200_000
    files = [ImportFile("1.xml", broken, "n1"), ImportFile("2.xml", big, "n2"), ImportFile("3.xml", good, "bad host"),
             ImportFile("4.xml", broken, "n4"), ImportFile("5.xml", good, "n5")]

    result = gpus_import_many(files=files, actor=ACTOR)

    assert [(e.file, e.field) for e in result.errors] == [("1.xml", "XML"), ("2.xml", "file"), ("3.xml", "server"),
                                                          ("4.xml", "XML")]
    assert not Gpu.objects.exists()
    result = gpus_import_many(files=[files[4], ImportFile("6.xml", good.replace(b"0123456789012", b"1652923040099"),
                                                          "n6")], actor=ACTOR)
    assert result.errors == [] and [(r["hostname"], r["line"]) for r in result.rows] == [
        ("n5", 8), ("n5", 868), ("n6", 8), ("n6", 868)]


# --- loading --------------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_the_identities_of_a_file_are_loaded_with_one_query():
    content = fixture("nvidia-smi-csv/h100-8gpu-units.csv")
    assert gpus_import(content=content, filename="h.csv", server_hint="gpu-h100-01", actor=ACTOR).created == 8

    with CaptureQueriesContext(connection) as captured:
        result = gpus_import(content=content, filename="h.csv", server_hint="gpu-h100-01", actor=ACTOR)

    assert result.unchanged == 8
    gpu_reads = [q["sql"] for q in captured.captured_queries if q["sql"].startswith('SELECT "inventory_gpu"."id"')]
    assert len(gpu_reads) == 1
    if connection.vendor == "postgresql":  # serials, UUIDs and server ids: one array each, not one value each
        assert gpu_reads[0].count("= ANY(") == 3


def test_new_gpu_rows_start_from_constant_defaults():
    """New GPU rows start from the field defaults taken once (records.GPU_DEFAULTS): a callable default (a new
    value per row) would be shared by every GPU of an import, so the row builder must learn it first."""
    assert not [f.name for f in Gpu._meta.concrete_fields if f.has_default() and callable(f.default)]
