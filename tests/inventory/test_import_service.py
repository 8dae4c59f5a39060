"""The import service (``inventory.imports.gpus_import``) and the ``import_gpus`` command."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Count

from fleet.audit import SystemActor, audit_source, snapshot
from fleet.models import AuditEvent
from inventory.importers import gpu_csv_rows
from inventory.imports import gpus_import
from inventory.models import (
    FirmwareObservation,
    Gpu,
    GpuModel,
    GpuMove,
    GpuState,
    GpuStateChange,
    MoveKind,
    Server,
)
from tests import factories

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
ACTOR = SystemActor("test-import")

pytestmark = pytest.mark.django_db


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def run(content: bytes, filename: str = "file", **kwargs):
    kwargs.setdefault("actor", ACTOR)
    return gpus_import(content=content, filename=filename, **kwargs)


def counts() -> dict[str, int]:
    return {model.__name__: model.objects.count()
            for model in (Gpu, Server, GpuModel, GpuMove, GpuStateChange, FirmwareObservation, AuditEvent)}


def export(queryset=None) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(gpu_csv_rows(queryset if queryset is not None else Gpu.objects.order_by("id")))
    return buffer.getvalue().encode()


# --- simple paths (also on SQLite) ---------------------------------------------------------------

@pytest.mark.sqlite
def test_xml_import_creates_gpu_in_a_new_unplaced_server():
    result = run(fixture("nvidia-smi-xml/a100-sxm4-v12.xml"), "a100.xml", server_hint="Node-A100")

    assert result.errors == [] and result.applied
    assert (result.created, result.updated, result.moved, result.unchanged) == (1, 0, 0, 0)
    assert result.servers_created == ["node-a100"]
    assert result.models_created == ["NVIDIA A100-SXM4-80GB"]
    gpu = Gpu.objects.select_related("server", "model").get()
    assert gpu.server.hostname == "node-a100" and gpu.server.rack is None
    assert (gpu.serial, gpu.uuid, gpu.identity_masked) == ("1650522003820", "GPU-513536b6-7d19-9063-b049-1e69664bb298",
                                                           False)
    # New hardware starts received (burn-in before service), even in a server (issue 21).
    assert (gpu.state, gpu.pci_bus_id, gpu.module_id, gpu.minor_number) == (GpuState.RECEIVED, "00000000:01:00.0",
                                                                            4, 1)
    assert (gpu.vbios_version, gpu.inforom_image, gpu.driver_version) == ("92.00.36.00.02", "G506.0212.00.01",
                                                                          "535.54.03")
    assert (gpu.model.sku, gpu.model.architecture, gpu.model.memory_gib) == ("A100-SXM4-80GB", "Ampere", 80)
    assert sorted(FirmwareObservation.objects.filter(gpu=gpu).values_list("component", "version")) == [
        ("driver", "535.54.03"), ("gpu_gsp", "535.54.03"), ("gpu_inforom_ecc", "6.16"), ("gpu_inforom_image",
         "G506.0212.00.01"), ("gpu_inforom_oem", "2.0"), ("gpu_vbios", "92.00.36.00.02")]
    assert GpuMove.objects.get(gpu=gpu).kind == MoveKind.INSTALL
    assert GpuStateChange.objects.get(gpu=gpu).to_state == GpuState.RECEIVED
    assert sorted(AuditEvent.objects.values_list("action", "actor_name")) == [("create", "test-import")] * 3
    created = AuditEvent.objects.get(object_id=str(gpu.pk), content_type__model="gpu")
    assert created.changes == {k: [None, v] for k, v in snapshot(gpu).items() if v not in (None, "")}  # as gpu_create


@pytest.mark.sqlite
def test_reimport_changes_nothing():
    content = fixture("nvidia-smi-xml/dual_a5000-v13.xml")
    run(content, "dual.xml", server_hint="ws-01")
    before = counts()
    updated_at = list(Gpu.objects.order_by("id").values_list("updated_at", flat=True))

    result = run(content, "dual.xml", server_hint="ws-01")

    assert result.errors == [] and result.applied
    assert (result.created, result.updated, result.moved, result.unchanged) == (0, 0, 0, 2)
    assert {row["action"] for row in result.rows} == {"unchanged"}
    assert result.servers_created == [] and result.models_created == []
    assert counts() == before
    assert list(Gpu.objects.order_by("id").values_list("updated_at", flat=True)) == updated_at


@pytest.mark.sqlite
def test_command_prints_the_summary_and_fails_cleanly(tmp_path):
    out = io.StringIO()
    call_command("import_gpus", str(FIXTURES / "nvidia-smi-csv/h100-8gpu-units.csv"), "--server", "gpu-h100-01",
                 stdout=out)
    assert "Imported 8 created, 0 updated, 0 moved, 0 unchanged" in out.getvalue()
    assert "New servers needing a rack position: gpu-h100-01." in out.getvalue()
    assert AuditEvent.objects.filter(source="cli", actor_name__startswith="cli:").count() == 10  # 8 GPUs, server, model

    bad = tmp_path / "broken.xml"
    bad.write_bytes(fixture("nvidia-smi-xml/tesla-t4.xml")[:3000])
    before = counts()
    with pytest.raises(CommandError) as excinfo:
        call_command("import_gpus", str(bad), stdout=io.StringIO())
    assert f"{bad}:" in str(excinfo.value) and ": XML: not well-formed XML" in str(excinfo.value)
    assert counts() == before


# --- formats ------------------------------------------------------------------------------------

def test_every_real_sample_imports_and_reimports_unchanged():
    samples = sorted((FIXTURES / "nvidia-smi-xml").glob("*.xml"))
    for index, path in enumerate(samples):
        result = run(path.read_bytes(), path.name, server_hint=f"host-{index}")
        assert result.errors == [], path.name
    assert Gpu.objects.count() == 10  # dual_a5000 holds two
    assert Gpu.objects.filter(identity_masked=True).count() == 6  # t4, a10g, rtx-4000, 2x a5000, pro-6000
    before = counts()
    for index, path in enumerate(samples):
        assert run(path.read_bytes(), path.name, server_hint=f"host-{index}").unchanged >= 1
    assert counts() == before


def test_xml_without_server_places_nothing_and_keeps_placement():
    result = run(fixture("nvidia-smi-xml/v100-pcie-1card.xml"), "v100.xml")
    gpu = Gpu.objects.get()
    assert (result.created, gpu.server, gpu.pci_bus_id, gpu.module_id, gpu.state) == (1, None, "", None,
                                                                                      GpuState.RECEIVED)

    run(fixture("nvidia-smi-xml/v100-pcie-1card.xml"), "v100.xml", server_hint="gpu-07")
    again = run(fixture("nvidia-smi-xml/v100-pcie-1card.xml"), "v100.xml")  # no server: placement kept
    gpu.refresh_from_db()
    assert again.unchanged == 1 and gpu.server.hostname == "gpu-07" and gpu.pci_bus_id == "00000000:21:01.0"


def test_masked_gpu_without_a_server_is_an_error():
    result = run(fixture("nvidia-smi-xml/dual_a5000-v13.xml"), "dual.xml")
    assert [str(e) for e in result.errors] == [
        f"dual.xml:{line}: serial: no identity: the serial and UUID are masked or absent and the GPU has no server "
        "slot (give the server's hostname, e.g. --server)" for line in (8, 868)]
    assert Gpu.objects.count() == 0


def test_nvidia_smi_csv_with_hostname_column_and_na():
    result = run(fixture("nvidia-smi-csv/a100-4gpu-nounits-na.csv"), "a100.csv")

    assert result.errors == [] and result.created == 4
    assert result.servers_created == ["gpu-node-017"]
    na_serial = Gpu.objects.get(uuid="GPU-b9f8e7d6-c5b4-4a39-8271-60f5e4d3c2b8")
    assert (na_serial.serial, na_serial.serial_raw, na_serial.identity_masked) == (None, "", False)
    assert sorted(Gpu.objects.values_list("module_id", flat=True)) == [1, 2, 3, 4]
    assert GpuModel.objects.get(name="NVIDIA A100-SXM4-40GB").memory_gib == 40


def test_fleet_csv_round_trip_changes_nothing():
    rack = factories.rack()
    server = factories.server(rack, hostname="gpu-b01-n01")
    for _ in range(3):
        factories.gpu(server, warranty_end="2029-12-31", vbios_version="96.00.74.00.1A")
    factories.gpu(asset_tag="AT-7", state="spare")
    factories.gpu(server, serial=None, serial_raw="REDACTED", uuid=None, uuid_raw="GPU-00000000-0000-0000-0000-"
                  "000000000000", identity_masked=True)
    before = counts()

    result = run(export(), "export.csv")

    assert result.errors == [] and result.fmt == "csv"
    assert (result.created, result.updated, result.moved, result.unchanged) == (0, 0, 0, 5)
    assert {k: v for k, v in counts().items() if k != "FirmwareObservation"} == {
        k: v for k, v in before.items() if k != "FirmwareObservation"}


def test_fleet_csv_import_creates_and_updates():
    result = run(fixture("fleet-csv/small-fleet.csv"), "fleet.csv")
    assert result.errors == [] and result.created == 3
    spare = Gpu.objects.get(serial="1652923040033")
    assert (spare.state, spare.server, spare.asset_tag, str(spare.warranty_end)) == ("spare", None, "AT-000103",
                                                                                    "2029-03-31")
    content = fixture("fleet-csv/small-fleet.csv").replace(b"2029-03-31,spare", b"2030-06-30,spare")
    result = run(content, "fleet.csv")
    assert (result.updated, result.unchanged) == (1, 2)
    assert result.rows[2]["changes"] == {"warranty_end": ["2029-03-31", "2030-06-30"]}
    event = AuditEvent.objects.filter(action="update").get()
    assert event.changes == {"warranty_end": ["2029-03-31", "2030-06-30"]}


def test_fleet_csv_never_changes_a_state():
    run(fixture("fleet-csv/small-fleet.csv"), "fleet.csv")
    before = counts()
    content = fixture("fleet-csv/small-fleet.csv").replace(b",spare,", b",rma,")
    (error,) = run(content, "fleet.csv").errors
    assert str(error).startswith("fleet.csv:4: state: GPU 1652923040033 is spare in Fleet, the file says rma")
    assert counts() == before


# --- identities, moves, slots ----------------------------------------------------------------------

def test_two_masked_gpus_are_never_merged():
    run(fixture("nvidia-smi-xml/dual_a5000-v13.xml"), "dual.xml", server_hint="ws-01")
    # pro-6000 reports the same anonymised serial and UUID as the first A5000
    result = run(fixture("nvidia-smi-xml/pro-6000-maxq-blackwell-v13.xml"), "pro.xml", server_hint="ws-02")

    assert (result.created, result.moved) == (1, 0)
    gpus = list(Gpu.objects.order_by("id"))
    assert len(gpus) == 3 and all(g.identity_masked and g.serial is None and g.uuid is None for g in gpus)
    assert [g.serial_raw for g in gpus] == ["0123456789012", "1234567890123", "0123456789012"]
    assert GpuMove.objects.filter(kind=MoveKind.MOVE).count() == 0


def test_gpu_reported_in_another_server_is_moved():
    content = fixture("nvidia-smi-xml/quadro-p2000-v12.xml")
    run(content, "p2000.xml", server_hint="ws-01")
    events = AuditEvent.objects.count()

    with audit_source("api"):
        result = run(content, "p2000.xml", server_hint="ws-02")

    assert (result.moved, result.created, result.updated) == (1, 0, 0)
    assert result.rows[0]["changes"] == {"server": ["ws-01", "ws-02"]}
    move = GpuMove.objects.get(kind=MoveKind.MOVE)
    assert (move.from_server.hostname, move.to_server.hostname, move.to_pci_bus_id) == ("ws-01", "ws-02",
                                                                                        "00000000:17:00.0")
    new_events = AuditEvent.objects.order_by("id")[events:]
    assert [(e.action, e.source) for e in new_events] == [("create", "api"), ("move", "api")]  # server ws-02, move
    gpu = Gpu.objects.get()
    assert gpu.server.hostname == "ws-02" and gpu.state == GpuState.RECEIVED  # the state it was created in


def test_gpu_in_the_way_is_moved_out_first():
    rack = factories.rack()
    server = factories.server(rack, hostname="gpu-node-017")
    squatter = factories.gpu(server, pci_bus_id="00000000:07:00.0")

    result = run(fixture("nvidia-smi-csv/a100-4gpu-nounits-na.csv"), "a100.csv")

    assert result.errors == [] and (result.created, result.moved) == (4, 1)
    squatter.refresh_from_db()
    assert (squatter.server, squatter.pci_bus_id, squatter.rack) == (None, "", None)
    assert GpuMove.objects.get(gpu=squatter, kind=MoveKind.REMOVE).from_pci_bus_id == "00000000:07:00.0"
    newcomer = Gpu.objects.get(pci_bus_id="00000000:07:00.0")
    assert newcomer.rack == rack and newcomer.site == rack.site  # denormalised placement follows the server


def test_gpus_swapping_slots_in_one_file():
    content = fixture("nvidia-smi-csv/h100-8gpu-units.csv")
    run(content, "h100.csv", server_hint="gpu-h100-01")
    swapped = (content.replace(b"00000000:18:00.0", b"SWAP").replace(b"00000000:2A:00.0", b"00000000:18:00.0")
               .replace(b"SWAP", b"00000000:2A:00.0"))

    result = run(swapped, "h100.csv", server_hint="gpu-h100-01")

    assert result.errors == [] and (result.moved, result.unchanged) == (2, 6)
    assert Gpu.objects.get(serial="1652923034721").pci_bus_id == "00000000:2A:00.0"
    assert Gpu.objects.get(serial="1652923034988").pci_bus_id == "00000000:18:00.0"


def test_masked_gpu_is_matched_by_its_slot():
    content = fixture("nvidia-smi-xml/rtx-4000-sff-ada-v13.xml").replace(
        b"GPU-37037c3f-65c8-ec4d-24a9-420204ad8026", b"GPU-00000000-0000-0000-0000-000000000000")
    run(content, "ada.xml", server_hint="ws-03")
    result = run(content.replace(b"95.04.53.00.01", b"95.04.60.00.02"), "ada.xml", server_hint="ws-03")

    assert (result.created, result.updated) == (0, 1)
    gpu = Gpu.objects.get()
    assert gpu.vbios_version == "95.04.60.00.02"
    assert sorted(FirmwareObservation.objects.filter(gpu=gpu, component="gpu_vbios").values_list("version",
                                                                                                 flat=True)) == [
        "95.04.53.00.01", "95.04.60.00.02"]


def test_serial_and_uuid_of_two_different_gpus_is_an_error():
    factories.gpu(serial="1650522003820")
    factories.gpu(uuid="GPU-513536b6-7d19-9063-b049-1e69664bb298")
    before = counts()

    (error,) = run(fixture("nvidia-smi-xml/a100-sxm4-v12.xml"), "a100.xml").errors

    assert error.line == 8 and error.field == "uuid" and "1650522003820 is serial of GPU" in error.message
    assert counts() == before


def test_duplicate_serial_in_one_file():
    content = fixture("nvidia-smi-csv/h100-8gpu-units.csv").replace(b"1652923034988", b"1652923034721")
    (error,) = run(content, "h100.csv").errors
    assert str(error) == "h100.csv:3: serial: 1652923034721 is also on line 2"


# --- hostile input: an error naming file, line and field, and nothing written -----------------------

@pytest.mark.parametrize(("content", "expected"), [
    (b'<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log [<!ENTITY a "a"><!ENTITY b "&a;&a;">]>\n<nvidia_smi_log/>',
     "evil:2: DOCTYPE: the DOCTYPE has an internal subset"),
    (b'<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n'
     b"<nvidia_smi_log><gpu><serial>&x;</serial></gpu></nvidia_smi_log>",
     "evil:2: DOCTYPE: the DOCTYPE has an internal subset"),
    (b"<nvidia_smi_log><gpu id='00000000:01:00.0'><serial>1</serial>", "evil:1: XML: not well-formed XML"),
    ("name,serial\nA100,1\n".encode("utf-16"), "evil:1: encoding: the file is UTF-16"),
    (b"name, serial, Colour Code\nA100, 1, red\n", "evil:1: header: the first line is not an nvidia-smi header"),
    (b"serial,model,module_id,hostname\n1652923040011,H100,x1,n1\n",
     "evil:2: module_id: 'x1' is not a whole number"),
    (b"serial,model,pci_bus_id,hostname\n1652923040011,H100,0000:GG:00.0,n1\n",
     "evil:2: pci_bus_id: not a PCI bus id: '0000:GG:00.0'"),
    (b"serial,model,hostname\n1652923040011,H100,not a host\n", "evil:2: hostname: 'not a host' is not a hostname"),
], ids=["billion-laughs", "xxe", "truncated", "utf-16", "unknown-column", "module-id", "bus-id", "hostname"])
def test_hostile_files_write_nothing(content, expected):
    factories.gpu()
    before = counts()

    result = run(content, "evil", server_hint="ws-01")

    assert not result.applied
    assert str(result.errors[0]).startswith(expected)
    assert counts() == before


def test_oversized_file_is_refused(settings):
    settings.FLEET_IMPORT_MAX_BYTES = 1000
    content = fixture("nvidia-smi-xml/a100-sxm4-v12.xml")

    (error,) = run(content, "a100.xml").errors

    assert str(error) == f"a100.xml: file: {len(content):,} bytes is larger than the import limit of 1,000 bytes"
    assert Gpu.objects.count() == 0

    with pytest.raises(CommandError, match="larger than the import limit"):
        call_command("import_gpus", str(FIXTURES / "nvidia-smi-xml/a100-sxm4-v12.xml"), stdout=io.StringIO())


def test_dry_run_previews_and_writes_nothing():
    result = run(fixture("nvidia-smi-csv/h100-8gpu-units.csv"), "h100.csv", server_hint="gpu-h100-01", dry_run=True)

    assert result.errors == [] and not result.applied
    assert result.created == 8 and result.servers_created == ["gpu-h100-01"]
    assert result.rows[0] == {"line": 2, "identity": "1652923034721", "action": "create", "hostname": "gpu-h100-01",
                              "pci_bus_id": "00000000:18:00.0",
                              "changes": {"model": [None, "NVIDIA H100 80GB HBM3"], "state": [None, "received"]}}
    assert all(n == 0 for n in counts().values())


def test_command_dry_run_and_verbose_rows():
    out = io.StringIO()
    call_command("import_gpus", str(FIXTURES / "fleet-csv/small-fleet.csv"), "--dry-run", "--format", "csv",
                 verbosity=2, stdout=out)
    assert "Dry run, nothing written: would have 3 created" in out.getvalue()
    assert "line 2: create    1652923040011" in out.getvalue()
    assert Gpu.objects.count() == 0


def test_model_change_and_real_serial_replacing_a_mask():
    content = fixture("nvidia-smi-xml/tesla-t4.xml")
    run(content, "t4.xml", server_hint="vm-01")
    t4 = Gpu.objects.get()
    assert (t4.serial, t4.serial_raw, t4.identity_masked) == (None, "0000000000000", True)

    # the same board seen from the host: real serial, and the model catalogue name differs
    host_view = content.replace(b"<serial>0000000000000</serial>", b"<serial>1321519023452</serial>").replace(
        b"<product_name>Tesla T4</product_name>", b"<product_name>NVIDIA T4</product_name>")
    result = run(host_view, "t4-host.xml", server_hint="vm-01")

    assert (result.updated, result.models_created) == (1, ["NVIDIA T4"])
    assert result.rows[0]["changes"] == {"serial": [None, "1321519023452"], "serial_raw": ["0000000000000", ""],
                                         "identity_masked": [True, False], "model": ["Tesla T4", "NVIDIA T4"]}
    t4.refresh_from_db()
    assert (t4.serial, t4.identity_masked, t4.model.name) == ("1321519023452", False, "NVIDIA T4")
    event = AuditEvent.objects.filter(action="update").get()
    assert event.changes["model_id"] == [GpuModel.objects.get(name="Tesla T4").pk, t4.model_id]

    # and a later masked report of the same board (matched by UUID) does not erase the real serial
    assert run(content.replace(b"Tesla T4", b"NVIDIA T4"), "t4.xml", server_hint="vm-01").unchanged == 1


@pytest.mark.django_db
def test_directory_of_per_host_files_imports_together_with_servers_from_file_names(tmp_path, capsys):
    """`nvidia-smi -q -x > $(hostname).xml` on every host, then one import of the directory."""
    (tmp_path / "gpu-a5000-07.xml").write_bytes(fixture("nvidia-smi-xml/dual_a5000-v13.xml"))
    (tmp_path / "gpu-v100-02.xml").write_bytes(fixture("nvidia-smi-xml/v100-pcie-1card.xml"))
    call_command("import_gpus", str(tmp_path), "--server-from-filename")
    assert "3 created" in capsys.readouterr().out
    by_host = dict(Gpu.objects.values_list("server__hostname").annotate(n=Count("id")).order_by())
    assert by_host == {"gpu-a5000-07": 2, "gpu-v100-02": 1}
    assert Server.objects.filter(hostname__in=by_host, rack__isnull=True).count() == 2
    call_command("import_gpus", str(tmp_path), "--server-from-filename")
    assert "0 created, 0 updated, 0 moved, 3 unchanged" in capsys.readouterr().out


@pytest.mark.django_db
def test_an_error_in_one_file_of_a_batch_writes_nothing_and_names_that_file(tmp_path):
    good, bad = tmp_path / "node-1.xml", tmp_path / "node-2.xml"
    good.write_bytes(fixture("nvidia-smi-xml/dual_a5000-v13.xml"))
    bad.write_bytes(fixture("nvidia-smi-xml/v100-pcie-1card.xml")[:2000])
    with pytest.raises(CommandError) as excinfo:
        call_command("import_gpus", str(good), str(bad), "--server-from-filename")
    assert f"{bad}:" in str(excinfo.value) and "not well-formed" in str(excinfo.value)
    assert not Gpu.objects.exists() and not Server.objects.exists() and not AuditEvent.objects.exists()
    with pytest.raises(CommandError, match="--server-from-filename"):
        call_command("import_gpus", str(good), str(bad), "--server", "node-1")


def test_command_prints_a_notice_for_columns_of_newer_drivers(tmp_path):
    path = tmp_path / "b200.csv"
    path.write_text("name, serial, uuid, pci.bus_id, dramencryption.mode.current, edpp_multiplier\n"
                    "NVIDIA B200, 1653024000123, GPU-3f9a2c1e-8b4d-4e7a-9c21-6d5f0a8b7e77, 00000000:18:00.0, "
                    "Disabled, [N/A]\n")
    out, err = io.StringIO(), io.StringIO()

    call_command("import_gpus", str(path), "--server", "node-b200", stdout=out, stderr=err)

    assert "Imported 1 created" in out.getvalue()
    assert "notice:" in err.getvalue() and "dramencryption.mode.current, edpp_multiplier" in err.getvalue()


def test_new_gpus_start_in_the_state_the_importer_picks_and_it_is_recorded():
    result = run(fixture("nvidia-smi-csv/h100-8gpu-units.csv"), "h100.csv", server_hint="gpu-h100-01",
                 new_state=GpuState.IN_SERVICE)
    assert result.errors == [] and result.applied and result.new_state == "in_service"
    assert set(Gpu.objects.values_list("state", flat=True)) == {GpuState.IN_SERVICE}
    change = GpuStateChange.objects.order_by("id").first()
    assert change.to_state == "in_service" and "picked by the importer" in change.reason


def test_an_import_refuses_a_new_state_gpus_may_not_start_in():
    result = run(fixture("nvidia-smi-csv/h100-8gpu-units.csv"), "h100.csv", server_hint="gpu-h100-01",
                 new_state=GpuState.DISPOSED)
    assert not result.applied and result.errors[0].field == "new_state"
    assert not Gpu.objects.exists()
