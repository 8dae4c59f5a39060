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
        "B5,NVIDIA H100 80GB HBM3,fra1,2024-02-01,2024-03-01,,melted,\n"
        "B1,NVIDIA H100 80GB HBM3,fra1,2024-01-10,,,,\n"
    )
    result = history.history_import(text=bad, actor=SYSTEM)
    assert not result.ok
    text = "\n".join(result.errors)
    assert "line 3: in_service_at: '2024-13-01' is not a date" in text
    assert "line 4: failed_at: 2024-01-01 is before in_service_at 2024-02-01." in text
    assert "line 5: model: unknown model 'Unknown GPU'" in text and "line 5: site: unknown site 'nowhere'" in text
    assert "line 6: cause: 'melted' is not a cause" in text
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
