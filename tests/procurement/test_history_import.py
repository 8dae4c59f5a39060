"""import_history: GPUs with their state history at the CSV's dates, all or nothing, per-row errors with line
numbers, re-import changes nothing; the forecast as of a past date reads only rows before it."""

import datetime as dt

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.audit import SYSTEM
from inventory.models import Gpu, GpuStateChange
from procurement.models import Failure, GpuAsset
from procurement.services import forecast, history
from tests import factories

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]  # the forecast reads history on both backends

HEADER = "serial,model,site,in_service_at,failed_at,removed_at,cause,batch\n"
GOOD = HEADER + (
    "H1,NVIDIA H100 80GB HBM3,fra1,2024-01-10,,,,L1\n"
    "H2,NVIDIA H100 80GB HBM3,fra1,2024-01-10,2024-06-01,,hbm,L1\n"
    "H3,NVIDIA H100 80GB HBM3,fra1,2024-01-10,2024-07-01,2024-07-20,off_bus,L2\n"
)


@pytest.fixture
def known():
    factories.gpu_model()
    factories.site("fra1")


def test_rows_become_gpus_with_their_history(known):
    result = history.history_import(text=GOOD, actor=SYSTEM)
    assert result.ok and result.created == 3 and result.failures == 2
    states = dict(Gpu.objects.filter(serial__in=["H1", "H2", "H3"]).values_list("serial", "state"))
    assert states == {"H1": "in_service", "H2": "rma", "H3": "disposed"}
    h3 = list(GpuStateChange.objects.filter(gpu__serial="H3").order_by("at").values_list("to_state", "at"))
    assert [s for s, _ in h3] == ["in_service", "rma", "disposed"]
    assert [at.date() for _, at in h3] == [dt.date(2024, 1, 10), dt.date(2024, 7, 1), dt.date(2024, 7, 20)]
    assert Failure.objects.get(gpu__serial="H2").cause == "hbm"
    assert GpuAsset.objects.get(gpu__serial="H3").batch == "L2"
    again = history.history_import(text=GOOD, actor=SYSTEM)
    assert again.ok and again.created == 0 and again.unchanged == 3
    assert Gpu.objects.count() == 3


def test_bad_rows_are_reported_by_line_and_nothing_is_written(known):
    bad = HEADER + (
        "B1,NVIDIA H100 80GB HBM3,fra1,2024-01-10,,,,\n"
        "B2,NVIDIA H100 80GB HBM3,fra1,2024-13-01,,,,\n"
        "B3,NVIDIA H100 80GB HBM3,fra1,2024-02-01,2024-01-01,,gpu,\n"
        "B4,Unknown GPU,nowhere,2024-02-01,,,,\n"
        "B5,NVIDIA H100 80GB HBM3,fra1,2024-02-01,2024-03-01,,gpu,\n"
        "B1,NVIDIA H100 80GB HBM3,fra1,2024-01-10,,,,\n"
    )
    result = history.history_import(text=bad, actor=SYSTEM)
    assert not result.ok
    text = "\n".join(result.errors)
    assert "line 3: in_service_at: '2024-13-01' is not a date" in text
    assert "line 4: failed_at: 2024-01-01 is before in_service_at 2024-02-01." in text
    assert "line 5: model: unknown model 'Unknown GPU'" in text and "line 5: site: unknown site 'nowhere'" in text
    assert "line 7: serial: B1 is also on line 2." in text
    assert not Gpu.objects.exists() and not GpuAsset.objects.exists()


def test_create_missing_and_the_command(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text(GOOD)
    with pytest.raises(CommandError) as err:
        call_command("import_history", str(path))
    assert "line 2: model: unknown model" in str(err.value)
    assert not Gpu.objects.exists()
    call_command("import_history", str(path), "--create-missing")
    assert Gpu.objects.count() == 3


def test_a_broken_header_names_the_columns(known):
    result = history.history_import(text="serial,model\nX,Y\n", actor=SYSTEM)
    assert result.errors[0].startswith("line 1: header: missing column(s) site, in_service_at")


def test_as_of_never_reads_later_rows(known):
    history.history_import(text=GOOD, actor=SYSTEM)
    as_of = dt.date(2024, 6, 15)
    before = forecast.history_load(as_of=as_of)
    history.history_import(text=HEADER + "L1,NVIDIA H100 80GB HBM3,fra1,2024-06-20,2024-06-25,,gpu,L9\n"
                           "L2,NVIDIA H100 80GB HBM3,fra1,2024-01-10,2024-06-16,,gpu,L1\n", actor=SYSTEM)
    with CaptureQueriesContext(connection) as queries:
        after = forecast.history_load(as_of=as_of)
    assert all("'2024-06-15'" in q["sql"] for q in queries.captured_queries)
    assert list(after.fail_day) == list(before.fail_day) == [(dt.date(2024, 6, 1) - dt.date(1970, 1, 1)).days]
    assert len(after.start) == 4  # L2 was in service before as_of; its failure after it is not read
    assert sorted(after.end)[-3:] == [2 ** 40] * 3  # H1, H3 (fails later) and L2 in the fleet as of that date
    r1 = forecast.forecast_compute(as_of=as_of, lead_days=90, actor=SYSTEM)
    fleet = r1.forecasts.get(scope="model")
    assert fleet.failures == 1 and fleet.installed == 3


# The synonym table's promise, written out here (docs/procurement.md): label as the world writes it -> class.
WORLD = [("DBE", "hbm", None), ("double-bit ECC", "hbm", None), ("SBE", "hbm", None), ("OTB", "off_bus", None),
         ("off the bus", "off_bus", None), ("Fell off the bus", "off_bus", None), ("XID 48", "hbm", 48),
         ("Xid63", "hbm", 63), ("64", "hbm", 64), ("xid-79", "off_bus", 79), ("XID 94", "hbm", 94),
         ("95", "hbm", 95), ("Thermal", "thermal", None), ("POWER", "power", None), ("NVLink", "nvlink", None),
         ("PCIe", "off_bus", None), ("HBM", "hbm", None), ("memory", "hbm", None)]


def test_a_history_written_with_dbe_and_otb_imports_whole_with_the_mapping_in_its_notice(known):
    rows = [HEADER.strip()]
    for i in range(30):
        cause = "DBE" if i % 2 else "OTB"
        rows.append(f"W{i},NVIDIA H100 80GB HBM3,fra1,2023-05-01,2024-{1 + i % 12:02d}-03,,{cause},L1")
    result = history.history_import(text="\n".join(rows) + "\n", actor=SYSTEM)
    assert result.ok, result.errors
    assert result.created == 30 and result.failures == 30
    assert dict(Failure.objects.values_list("gpu__serial", "cause").filter(gpu__serial__in=["W0", "W1"])) == {
        "W0": "off_bus", "W1": "hbm"}
    assert "DBE -> hbm (15)" in result.notice and "OTB -> off_bus (15)" in result.notice
    assert Failure.objects.get(gpu__serial="W1").evidence == "imported history: cause 'DBE'"


@pytest.mark.parametrize(("label", "cls", "xid"), WORLD)
def test_each_label_of_the_synonym_table_maps_to_its_class(label, cls, xid):
    assert history.cause_class(label) == (cls, xid)


def test_unknown_labels_are_kept_verbatim_as_other_and_counted(known):
    text = HEADER + ("U1,NVIDIA H100 80GB HBM3,fra1,2024-01-10,2024-03-01,,melted connector,L1\n"
                     "U2,NVIDIA H100 80GB HBM3,fra1,2024-01-10,2024-03-02,,melted connector,L1\n"
                     "U3,NVIDIA H100 80GB HBM3,fra1,2024-01-10,2024-03-03,,Xid 13,L1\n"
                     "U4,NVIDIA H100 80GB HBM3,fra1,2024-01-10,2024-03-04,,DBE,L1\n")
    result = history.history_import(text=text, actor=SYSTEM)
    assert result.ok and result.created == 4
    assert result.unknown_causes == {"melted connector": 2, "Xid 13": 1}
    assert "3 failure(s) with 2 unknown cause label(s)" in result.notice
    assert "'melted connector' (2)" in result.notice and "DBE -> hbm (1)" in result.notice
    u1 = Failure.objects.get(gpu__serial="U1")
    assert (u1.cause, u1.evidence) == ("other", "imported history: cause 'melted connector'")


def test_dates_accept_iso_timestamps_with_offsets(known):
    text = HEADER + ("T1,NVIDIA H100 80GB HBM3,fra1,2024-01-10T08:00:00+02:00,2024-06-01T23:30:00-05:00,,OTB,L1\n"
                     "T2,NVIDIA H100 80GB HBM3,fra1,2024-01-10T00:30:00+02:00,2024-06-01T10:00:00Z,,,L1\n"
                     "T3,NVIDIA H100 80GB HBM3,fra1,2024-01-10 12:00:00,,,,L1\n")
    result = history.history_import(text=text, actor=SYSTEM)
    assert result.ok, result.errors
    # The UTC date of each instant: 23:30 at -05:00 is 04:30 UTC the next day; 00:30 at +02:00 is the day before.
    assert Failure.objects.get(gpu__serial="T1").failed_on == dt.date(2024, 6, 2)
    assert GpuAsset.objects.get(gpu__serial="T2").in_service_on == dt.date(2024, 1, 9)
    assert GpuAsset.objects.get(gpu__serial="T3").in_service_on == dt.date(2024, 1, 10)
    bad = history.history_import(text=HEADER + "T4,NVIDIA H100 80GB HBM3,fra1,10/01/2024,,,,\n", actor=SYSTEM)
    assert bad.errors == ["line 2: in_service_at: '10/01/2024' is not a date (YYYY-MM-DD or an ISO timestamp)."]


def test_the_command_prints_the_notice(known, tmp_path, capsys):
    path = tmp_path / "h.csv"
    path.write_text(HEADER + "C1,NVIDIA H100 80GB HBM3,fra1,2024-01-10,2024-03-01,,OTB,L1\n")
    call_command("import_history", str(path))
    assert "Notice: causes mapped: OTB -> off_bus (1)." in capsys.readouterr().out
