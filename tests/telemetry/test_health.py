"""Health flags: each RMA criterion, application XIDs never counting, error-rate and thermal outliers,
refresh and clearing; the one-click drain / RMA through the inventory service.

Telemetry goes in through the storage write path (``Store.write_samples`` and the merge: latest values,
counters, the XID gauge) and the rollups (``rollup_range``), as the exporters' data would.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction

from fleet.models import AuditEvent
from inventory.models import GpuState, GpuStateChange
from telemetry.health import evidence_text, health_evaluate, health_flag_act, poisson_tail
from telemetry.models import HealthFlag, XidEvent
from telemetry.rollup import rollup_range
from telemetry.store import SampleRow, get_store
from tests import factories

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]  # the same criteria on both backends

NOW = dt.datetime(2026, 3, 10, 12, 0, tzinfo=dt.UTC)


def sample(gpu, ts, *, temp=60, power=400.0, **fields) -> SampleRow:
    values = {"power_w": power, "throttle_mask": 0, "gpu_temp_c": temp, "mem_temp_c": temp + 5, "tlimit_c": 25,
              "sm_clock_mhz": 1980, "ecc_sbe": 0, "ecc_dbe": 0, "remap_corr": 0, "remap_unc": 0,
              "remap_failure": False, "pcie_replay": 0, "sram_threshold": False, "xid": 0}
    values.update(fields)
    return SampleRow(ts, gpu.pk, **values)


def write(rows: list[SampleRow]) -> None:
    with transaction.atomic():
        get_store().write_samples(rows)
    get_store().merge()


def xids(gpu, *numbers: int, start: dt.datetime, step=dt.timedelta(minutes=1)) -> None:
    """XIDs through the DCGM gauge: one sample per XID, the gauge changing each time."""
    write([sample(gpu, start + i * step, xid=x) for i, x in enumerate(numbers)])


def hours_of(gpus, *, hours: int, end: dt.datetime = NOW, temp=None, power=None, **fields) -> None:
    """Samples every 5 minutes for ``hours`` before ``end``, rolled up; ``temp``/``power``: {gpu: value}."""
    start = end - dt.timedelta(hours=hours)
    temp, power = temp or {}, power or {}
    write([sample(gpu, start + dt.timedelta(minutes=5 * step), temp=temp.get(gpu, 60), power=power.get(gpu, 400.0),
                  **fields)
           for step in range(hours * 12) for gpu in gpus])
    rollup_range(start=start, end=end)


@pytest.fixture
def rack_gpus():
    rack = factories.rack(factories.site("hlth"), name="hlth-r01")
    servers = [factories.server(rack, hostname=f"hlth-{n:02d}", rack_unit=2 + 8 * n) for n in range(2)]
    return [factories.gpu(server) for server in servers for _ in range(4)]


def open_flags(**filters):
    return {(f.gpu_id, f.kind): f for f in HealthFlag.objects.filter(cleared_at__isnull=True, **filters)}


def test_row_remap_failure_flag_is_an_rma_flag_that_does_not_clear_by_itself(rack_gpus):
    gpu = rack_gpus[0]
    write([sample(gpu, NOW - dt.timedelta(minutes=1), remap_unc=9, remap_corr=2, remap_failure=True)])
    result = health_evaluate(now=NOW)
    assert result["raised"] == 1
    flag = HealthFlag.objects.get(gpu=gpu)
    assert (flag.kind, flag.severity) == ("row_remap_failure", "rma")
    assert flag.evidence["remapped_rows_uncorrectable"] == 9
    assert "Row-remap failure flag set (9 uncorrectable, 2 correctable" in evidence_text(flag.kind, flag.evidence)
    # The flag reads false later (a reset, or a tool that lost it): the RMA flag stays open.
    write([sample(gpu, NOW + dt.timedelta(minutes=5), remap_failure=False)])
    result = health_evaluate(now=NOW + dt.timedelta(days=30))
    assert result["cleared"] == 0
    assert HealthFlag.objects.get(gpu=gpu).cleared_at is None
    # Sent to RMA (through drained): the flag has done its job and closes.
    flag.gpu.refresh_from_db()
    health_flag_act(flag=flag, action="drain", actor=None)
    health_flag_act(flag=flag, action="rma", actor=None)
    result = health_evaluate(now=NOW + dt.timedelta(days=31))
    assert result["cleared"] == 1


def test_sram_threshold_flag(rack_gpus):
    write([sample(rack_gpus[1], NOW - dt.timedelta(minutes=1), sram_threshold=True)])
    health_evaluate(now=NOW)
    flag = HealthFlag.objects.get(gpu=rack_gpus[1])
    assert (flag.kind, flag.severity) == ("sram_threshold", "rma")
    assert "SRAM threshold exceeded" in evidence_text(flag.kind, flag.evidence)


@pytest.mark.parametrize(("numbers", "severity", "meaning"), [
    ((64,), "rma", "row-remap failure"),
    ((79,), "drain", "GPU fell off the bus"),
    ((95,), "drain", "uncontained memory error"),
    ((74,), "drain", "NVLink error"),
    ((140,), "drain", "unrecovered ECC error escape"),
    ((48,), "drain", "double-bit ECC error"),
])
def test_each_rma_xid_raises_a_flag_with_the_xid_and_its_time(rack_gpus, numbers, severity, meaning):
    gpu = rack_gpus[2]
    at = NOW - dt.timedelta(hours=3)
    xids(gpu, *numbers, start=at)
    health_evaluate(now=NOW)
    flag = HealthFlag.objects.get(gpu=gpu)
    assert (flag.kind, flag.severity) == ("rma_xid", severity)
    assert flag.evidence["count"] == 1
    event = flag.evidence["xids"][0]
    assert (event["xid"], event["meaning"]) == (numbers[0], meaning)
    assert dt.datetime.fromisoformat(event["at"]) == at
    assert f"XID {numbers[0]} ({meaning}) at 2026-03-10 09:00" in evidence_text(flag.kind, flag.evidence)


def test_dbe_with_its_dram_detail_xid_is_an_rma_flag(rack_gpus):
    gpu = rack_gpus[3]
    xids(gpu, 48, 171, start=NOW - dt.timedelta(hours=1), step=dt.timedelta(seconds=30))
    health_evaluate(now=NOW)
    flag = HealthFlag.objects.get(gpu=gpu)
    assert flag.severity == "rma"
    dbe = next(x for x in flag.evidence["xids"] if x["xid"] == 48)
    assert dbe["detail"] == "DRAM"
    assert "XID 48 (double-bit ECC error on DRAM)" in evidence_text(flag.kind, flag.evidence)


def test_application_xids_never_count(rack_gpus):
    gpu = rack_gpus[4]
    hours_of(rack_gpus, hours=6)
    # 13, 31, 43, 45 again and again: application faults, not the board's.
    xids(gpu, *([13, 31, 43, 45] * 5), start=NOW - dt.timedelta(hours=2))
    assert XidEvent.objects.filter(gpu=gpu, hardware=False).count() == 20
    # Even a row wrongly stored as hardware is ignored by the criteria's own guard.
    XidEvent.objects.filter(gpu=gpu, xid=13).update(hardware=True)
    result = health_evaluate(now=NOW)
    assert result["candidates"] == {}
    assert not HealthFlag.objects.exists()


def test_xid_flag_refreshes_then_clears_after_the_window(rack_gpus):
    gpu = rack_gpus[5]
    xids(gpu, 79, start=NOW - dt.timedelta(days=1))
    health_evaluate(now=NOW)
    xids(gpu, 74, start=NOW + dt.timedelta(hours=1))
    result = health_evaluate(now=NOW + dt.timedelta(hours=2))
    assert (result["raised"], result["refreshed"]) == (0, 1)
    flag = HealthFlag.objects.get(gpu=gpu)
    assert flag.evidence["count"] == 2 and flag.last_seen_at == NOW + dt.timedelta(hours=2)
    assert [x["xid"] for x in flag.evidence["xids"]] == [74, 79]  # newest first
    result = health_evaluate(now=NOW + dt.timedelta(days=8))
    assert result["cleared"] == 1
    flag.refresh_from_db()
    assert flag.cleared_at == NOW + dt.timedelta(days=8)
    # A new XID later raises a new flag; the cleared one stays as history.
    xids(gpu, 79, start=NOW + dt.timedelta(days=9))
    health_evaluate(now=NOW + dt.timedelta(days=9, hours=1))
    assert HealthFlag.objects.filter(gpu=gpu).count() == 2


def test_error_rate_far_above_model_peers_is_flagged_with_the_rates(rack_gpus):
    bad, unlucky = rack_gpus[6], rack_gpus[7]
    hours_of(rack_gpus, hours=24)
    # Contained memory errors (94) and remap events (63): hardware, not RMA XIDs by themselves.
    xids(bad, 94, 63, 94, 63, 94, start=NOW - dt.timedelta(hours=5))
    xids(unlucky, 94, 63, start=NOW - dt.timedelta(hours=5))  # two events: below the minimum count
    health_evaluate(now=NOW)
    flags = open_flags(kind="error_rate")
    assert list(flags) == [(bad.pk, "error_rate")]
    evidence = flags[(bad.pk, "error_rate")].evidence
    assert evidence["events"] == 5 and evidence["xid_events"] == 5
    assert evidence["hours"] == 24 and evidence["peers"] == 7
    assert evidence["p_value"] < 1e-3
    # Peers had 2 events in 7 x 24 hours: 2/168 per hour.
    assert evidence["peer_rate_per_1000h"] == pytest.approx(2 / 168 * 1000, rel=1e-3)
    assert "5 hardware error events in 24 GPU-hours" in evidence_text("error_rate", evidence)


def test_poisson_tail():
    assert poisson_tail(0, 3.0) == 1.0
    assert poisson_tail(1, 2.0) == pytest.approx(1 - 0.1353352832, rel=1e-9)
    assert poisson_tail(3, 0.01) == pytest.approx(0.01 ** 3 / 6 * 0.99, rel=0.02)
    assert poisson_tail(5, 10.0) == pytest.approx(0.9707473119, rel=1e-9)


def test_thermal_outlier_against_rack_peers_at_similar_power(rack_gpus):
    hot, hot_but_busy = rack_gpus[0], rack_gpus[1]
    temps = {gpu: 60 + (i % 3) for i, gpu in enumerate(rack_gpus)}
    temps[hot] = 75  # same power as its peers, 14 C hotter
    temps[hot_but_busy] = 85  # hotter still, but it draws 700 W: nobody in the rack is comparable
    powers = {gpu: 400.0 + 5 * i for i, gpu in enumerate(rack_gpus)}
    powers[hot_but_busy] = 700.0
    hours_of(rack_gpus, hours=4, temp=temps, power=powers)
    health_evaluate(now=NOW)
    flags = open_flags(kind="thermal_outlier")
    assert list(flags) == [(hot.pk, "thermal_outlier")]
    flag = flags[(hot.pk, "thermal_outlier")]
    assert flag.severity == "watch"
    e = flag.evidence
    assert (e["temp_c"], e["peer_median_c"], e["delta_c"], e["peers"], e["rack"]) == (75, 61, 14, 6, "hlth-r01")
    assert e["power_w"] == 400
    assert "14 °C above the median (61 °C) of 6 GPUs in rack hlth-r01 at similar power (400 W" in \
        evidence_text(flag.kind, e)
    # It cools down: the flag clears at the next evaluation that no longer sees it.
    hours_of(rack_gpus, hours=24, end=NOW + dt.timedelta(days=1), power=powers)
    result = health_evaluate(now=NOW + dt.timedelta(days=1))
    assert result["cleared"] == 1


def test_evaluation_is_idempotent(rack_gpus):
    write([sample(rack_gpus[0], NOW, remap_failure=True)])
    xids(rack_gpus[1], 79, start=NOW - dt.timedelta(hours=1))
    first = health_evaluate(now=NOW)
    second = health_evaluate(now=NOW)
    assert first["raised"] == 2
    assert (second["raised"], second["refreshed"], second["cleared"]) == (0, 2, 0)


# --- the one-click actions --------------------------------------------------------------------------------------

def test_drain_through_the_service_is_audited_with_the_evidence_as_reason(rack_gpus, operator):
    gpu = rack_gpus[2]
    xids(gpu, 79, start=NOW - dt.timedelta(hours=1))
    health_evaluate(now=NOW)
    flag = HealthFlag.objects.get(gpu=gpu)
    health_flag_act(flag=flag, action="drain", actor=operator)
    gpu.refresh_from_db()
    assert gpu.state == GpuState.DRAINED
    change = GpuStateChange.objects.filter(gpu=gpu).latest("at")
    assert change.actor_name == operator.username
    assert change.reason.startswith(f"Health flag #{flag.pk} RMA XID (drain): XID 79 (GPU fell off the bus)")
    event = AuditEvent.objects.filter(action="transition", object_id=str(gpu.pk)).latest("id")
    assert event.changes == {"state": ["in_service", "drained"]}


def test_rma_of_an_in_service_gpu_is_refused_by_the_lifecycle(rack_gpus):
    gpu = rack_gpus[3]
    write([sample(gpu, NOW, remap_failure=True)])
    health_evaluate(now=NOW)
    flag = HealthFlag.objects.get(gpu=gpu)
    with pytest.raises(ValidationError, match="cannot go from 'in_service' to 'rma'"):
        health_flag_act(flag=flag, action="rma", actor=None)
    gpu.refresh_from_db()
    assert gpu.state == GpuState.IN_SERVICE
