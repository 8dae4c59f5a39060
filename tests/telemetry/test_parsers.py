"""Telemetry parsers (no database): every real sample read with the values in the files, the Prometheus
text format's edge cases (cross-checked with prometheus_client), DCGM sentinels and MIG rollup, XIDs."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from telemetry import prom
from telemetry.dcgm import (
    FIELDS,
    THROTTLE_HW_MASK,
    parse_dcgm,
    throttle_reason_names,
)
from telemetry.kernel import parse_kernel_log
from telemetry.parse import parse_telemetry
from telemetry.sample import TelemetryParseError
from tests.samples import SAMPLES
from world import dcgm_exporter as synth

FIXTURES = SAMPLES
NOW = datetime(2026, 7, 14, 12, 0, tzinfo=UTC)


def shared_sample(relative: str) -> str:
    return (SAMPLES / relative).read_text()


def parse_xml(name: str):
    return parse_telemetry((FIXTURES / "nvidia-smi-xml" / name).read_bytes(), fmt="nvidia-smi-xml",
                           host="Node-7", now=NOW, filename=name)


# ---- nvidia-smi -q -x: the values in each file -----------------------------------------------------

# Read from the files: temperature/gpu_temp, memory_temp, gpu_temp_tlimit; the power element of that
# driver; clocks/sm_clock; the "Active" throttle reasons; ECC volatile totals; remapped_rows; replay_counter.
XML_EXPECTED = {
    "a100-sxm4-v12.xml": [dict(  # 535: gpu_power_readings/power_draw; remapped_rows N/A (MIG)
        uuid="GPU-513536b6-7d19-9063-b049-1e69664bb298", pci_bus_id="00000000:01:00.0", gpu_temp_c=27.0,
        mem_temp_c=44.0, tlimit_c=None, power_w=67.03, sm_clock_mhz=1275.0, throttle_mask=0, ecc_sbe=0, ecc_dbe=0,
        remap_corr=None, remap_unc=None, remap_failure=None, pcie_replay=0, sram_threshold_exceeded=None)],
    "tesla-t4.xml": [dict(  # 515: power_readings, clocks_throttle_reasons
        uuid="GPU-d37e67a5-91dd-3774-a5cb-99096249601a", pci_bus_id="00000000:00:1E.0", gpu_temp_c=40.0,
        mem_temp_c=None, power_w=26.78, sm_clock_mhz=585.0, throttle_mask=0, ecc_sbe=0, ecc_dbe=0,
        remap_corr=None, pcie_replay=0)],
    "a10g.xml": [dict(  # gpu_idle Active; remapped_rows with children
        uuid="GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94", pci_bus_id="00000000:00:1E.0", gpu_temp_c=17.0,
        mem_temp_c=None, power_w=25.58, sm_clock_mhz=210.0, throttle_mask=0x1, ecc_sbe=0, ecc_dbe=0,
        remap_corr=0, remap_unc=0, remap_failure=False, pcie_replay=0)],
    "quadro-p2000-v12.xml": [dict(  # 525 with the old single_bit/double_bit layout, totals N/A
        uuid="GPU-396caaed-39ca-3199-2e68-717cdb786ec6", pci_bus_id="00000000:17:00.0", gpu_temp_c=34.0,
        tlimit_c=None, power_w=4.61, sm_clock_mhz=139.0, throttle_mask=0x1, ecc_sbe=None, ecc_dbe=None,
        remap_corr=None, pcie_replay=0)],
    "rtx-4000-sff-ada-v13.xml": [dict(  # 595: average_power_draw, T.Limit headroom 49 C
        uuid="GPU-37037c3f-65c8-ec4d-24a9-420204ad8026", pci_bus_id="00000000:06:00.0", gpu_temp_c=38.0,
        mem_temp_c=None, tlimit_c=49.0, power_w=8.81, sm_clock_mhz=210.0, throttle_mask=0x1, ecc_sbe=None,
        ecc_dbe=None, remap_corr=0, remap_unc=0, remap_failure=False, pcie_replay=0, sram_threshold_exceeded=None)],
    "gtx-1660-ti.xml": [dict(  # 418, no DOCTYPE
        uuid="GPU-304a277d-3545-63b8-3a36-dfde3c992989", pci_bus_id="00000000:43:00.0", gpu_temp_c=40.0,
        power_w=8.93, sm_clock_mhz=300.0, throttle_mask=0x1, ecc_sbe=None, ecc_dbe=None, pcie_replay=0)],
    "dual_a5000-v13.xml": [  # anonymised UUIDs (GPU-12345678-...) are not identities: keyed by PCI
        dict(uuid=None, pci_bus_id="00000000:81:00.0", gpu_temp_c=13.0, power_w=6.41, sm_clock_mhz=210.0,
             throttle_mask=0x1, remap_corr=0, remap_failure=False),
        dict(uuid=None, pci_bus_id="00000000:C1:00.0", gpu_temp_c=15.0, power_w=13.60, sm_clock_mhz=210.0,
             throttle_mask=0x1, remap_corr=0, remap_failure=False)],
    "pro-6000-maxq-blackwell-v13.xml": [dict(
        uuid=None, pci_bus_id="00000000:61:00.0", gpu_temp_c=24.0, tlimit_c=68.0, power_w=3.97,
        sm_clock_mhz=180.0, throttle_mask=0, remap_corr=0, remap_unc=0, pcie_replay=0)],
    "v100-pcie-1card.xml": [dict(  # under load; Volta single_bit/double_bit totals 0
        uuid="GPU-e77ce5d8-8b63-c936-3c1b-839d45bcd0f2", pci_bus_id="00000000:21:01.0", gpu_temp_c=66.0,
        mem_temp_c=65.0, power_w=170.16, sm_clock_mhz=1380.0, throttle_mask=0, ecc_sbe=0, ecc_dbe=0,
        remap_corr=None, pcie_replay=0)],
}


def test_every_xml_fixture_is_covered():
    assert {path.name for path in (FIXTURES / "nvidia-smi-xml").glob("*.xml")} == set(XML_EXPECTED)


@pytest.mark.parametrize("name", sorted(XML_EXPECTED))
def test_nvidia_smi_xml_samples(name):
    batch = parse_xml(name)
    assert len(batch.samples) == len(XML_EXPECTED[name])
    for sample, expected in zip(batch.samples, XML_EXPECTED[name], strict=True):
        assert sample.host == "node-7"
        assert sample.ts is None  # the XML timestamp has no zone
        for field, value in expected.items():
            assert getattr(sample, field) == value, field
    assert not batch.rejected


def xml_with(name: str, old: str, new: str) -> bytes:
    content = (FIXTURES / "nvidia-smi-xml" / name).read_bytes()
    assert old.encode() in content
    return content.replace(old.encode(), new.encode(), 1)


def test_xml_throttle_bits_ecc_sums_and_bad_values():
    content = xml_with("rtx-4000-sff-ada-v13.xml",
                       "<clocks_event_reason_hw_thermal_slowdown>Not Active</clocks_event_reason_hw_thermal_slowdown>",
                       "<clocks_event_reason_hw_thermal_slowdown>Active</clocks_event_reason_hw_thermal_slowdown>")
    content = content.replace(b"<sram_correctable>N/A</sram_correctable>", b"<sram_correctable>3</sram_correctable>", 1)
    content = content.replace(b"<dram_correctable>N/A</dram_correctable>", b"<dram_correctable>4</dram_correctable>", 1)
    content = content.replace(b"<sram_uncorrectable_secded>N/A</sram_uncorrectable_secded>",
                              b"<sram_uncorrectable_secded>1</sram_uncorrectable_secded>", 1)
    content = content.replace(b"<gpu_temp>38 C</gpu_temp>", b"<gpu_temp>900 C</gpu_temp>")
    content = content.replace(b"<sram_threshold_exceeded>N/A</sram_threshold_exceeded>",
                              b"<sram_threshold_exceeded>Yes</sram_threshold_exceeded>")
    content = content.replace(b"<sm_clock>210 MHz</sm_clock>", b"<sm_clock>fast</sm_clock>", 1)
    batch = parse_telemetry(content, fmt="nvidia-smi-xml", host=None, now=NOW, filename="x.xml")
    sample = batch.samples[0]
    assert sample.throttle_mask == 0x1 | 0x40
    assert throttle_reason_names(sample.throttle_mask) == ["idle", "HW thermal"]
    assert sample.throttle_mask & THROTTLE_HW_MASK == 0x40
    assert (sample.ecc_sbe, sample.ecc_dbe) == (7, 1)  # sram + dram; parity N/A, secded 1
    assert sample.sram_threshold_exceeded is True
    assert sample.gpu_temp_c is None and sample.sm_clock_mhz is None and sample.host is None
    assert batch.rejected == {"out_of_range": 1, "unparseable": 1}


def test_xml_legacy_power_and_throttle_layouts():
    """525: power_readings/power_draw, clocks_throttle_reasons (quadro-p2000-v12.xml)."""
    content = xml_with("quadro-p2000-v12.xml",
                       "<clocks_throttle_reason_sw_power_cap>Not Active</clocks_throttle_reason_sw_power_cap>",
                       "<clocks_throttle_reason_sw_power_cap>Active</clocks_throttle_reason_sw_power_cap>")
    sample = parse_telemetry(content, fmt="nvidia-smi-xml", host="h", now=NOW, filename="x.xml").samples[0]
    assert sample.throttle_mask == 0x1 | 0x4 and sample.power_w == 4.61


@pytest.mark.parametrize("content, reason", [
    (b"<nvidia_smi_log><gpu>", "syntax"),
    (b"<other/>", "syntax"),
    (b'<!DOCTYPE x [<!ENTITY a "b">]><nvidia_smi_log/>', "unsafe_xml"),
    (b'<!-- <a> --><!DOCTYPE nvidia_smi_log [<!ENTITY a "b">]><nvidia_smi_log/>', "unsafe_xml"),
    (b'<!DOCTYPE nvidia_smi_log [<!ATTLIST gpu id CDATA "x">]><nvidia_smi_log/>', "unsafe_xml"),
])
def test_xml_bad_documents_are_refused(content, reason):
    with pytest.raises(TelemetryParseError) as error:
        parse_telemetry(content, fmt="nvidia-smi-xml", host="h", now=NOW, filename="x.xml")
    assert error.value.reason == reason


# ---- nvidia-smi --query-gpu CSV ----------------------------------------------------------------------


def test_nvidia_smi_csv_nounits_with_placeholders():
    content = (FIXTURES / "nvidia-smi-csv" / "a100-4gpu-nounits-na.csv").read_bytes()
    batch = parse_telemetry(content, fmt="nvidia-smi-csv", host="ignored-when-a-column-says", now=NOW,
                            filename="a.csv")
    assert batch.lines == 5
    assert [(s.uuid, s.host, s.pci_bus_id, s.gpu_temp_c, s.mem_temp_c, s.power_w, s.throttle_mask)
            for s in batch.samples] == [
        ("GPU-6a1b9c3e-2d4f-4e8a-b7c5-0f9e8d7c6b51", "gpu-node-017", "00000000:07:00.0", 29.0, 31.0, 54.10, 1),
        ("GPU-0e5d4c3b-7a2f-4b19-8c6d-e1f0a9b8c742", "gpu-node-017", "00000000:0F:00.0", 30.0, 32.0, 55.72, 1),
        ("GPU-b9f8e7d6-c5b4-4a39-8271-60f5e4d3c2b8", "gpu-node-017", "00000000:47:00.0", 28.0, None, 53.98, 1),
        ("GPU-41c2d3e4-f5a6-4b7c-9d8e-0a1b2c3d4e5f", "gpu-node-017", "00000000:4E:00.0", 29.0, 30.0, 56.31, 1),
    ]
    assert not batch.rejected


def test_nvidia_smi_csv_with_units():
    content = (FIXTURES / "nvidia-smi-csv" / "h100-8gpu-units.csv").read_bytes()
    batch = parse_telemetry(content, fmt="nvidia-smi-csv", host="H100-A", now=NOW, filename="h.csv")
    assert len(batch.samples) == 8
    first = batch.samples[0]
    assert (first.uuid, first.host, first.gpu_temp_c, first.power_w) == (
        "GPU-3f9a2c1e-8b4d-4e7a-9c21-6d5f0a8b7e12", "h100-a", 31.0, 71.23)
    assert batch.samples[1].power_w == 69.85 and batch.samples[3].gpu_temp_c == 32.0


def test_nvidia_smi_csv_health_columns_and_errors():
    text = ("uuid, clocks.current.sm [MHz], clocks_throttle_reasons.active, ecc.errors.corrected.volatile.total, "
            "remapped_rows.correctable, remapped_rows.failure, temperature.gpu.tlimit, power.draw.instant [W]\n"
            "GPU-3f9a2c1e-8b4d-4e7a-9c21-6d5f0a8b7e12, 1980 MHz, 0x0000000000000044, 12, 2, No, -3, 701.5 W\n")
    sample = parse_telemetry(text, fmt="nvidia-smi-csv", host="h", now=NOW, filename="c.csv").samples[0]
    assert (sample.sm_clock_mhz, sample.throttle_mask, sample.ecc_sbe, sample.remap_corr, sample.remap_failure,
            sample.tlimit_c, sample.power_w) == (1980.0, 0x44, 12, 2, False, -3.0, 701.5)
    with pytest.raises(TelemetryParseError) as error:
        parse_telemetry(text + "GPU-3f9a2c1e-8b4d-4e7a-9c21-6d5f0a8b7e12, 1\n", fmt="nvidia-smi-csv", host="h",
                        now=NOW, filename="c.csv")
    assert error.value.line_no == 3
    with pytest.raises(TelemetryParseError, match="neither a uuid nor a pci.bus_id"):
        parse_telemetry("temperature.gpu\n40\n", fmt="nvidia-smi-csv", host="h", now=NOW, filename="c.csv")


# ---- dcgm-exporter ---------------------------------------------------------------------------------

# From h100-8gpu-scrape.prom: (UUID, pci_bus_id, DCGM_FI_DEV_GPU_TEMP, DCGM_FI_DEV_POWER_USAGE), gpu 0..7.
H100_SCRAPE = [
    ("GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005", "00000000:53:00.0", 30.0, 113.611),
    ("GPU-bc5610b9-79c8-fedd-8899-07539c7f868a", "00000000:64:00.0", 29.0, 68.347),
    ("GPU-fbc2c554-4d37-8938-0032-f923bad0f716", "00000000:75:00.0", 26.0, 65.709),
    ("GPU-a65a773d-52bb-bcc1-a8ee-f78c3faa2e2d", "00000000:86:00.0", 29.0, 67.316),
    ("GPU-82e45d1b-1618-559f-144c-eab51545030b", "00000000:97:00.0", 28.0, 68.717),
    ("GPU-39e28159-8c62-ee71-64db-b748edd61e15", "00000000:A8:00.0", 26.0, 65.742),
    ("GPU-e64d69ca-b4b3-59b2-e78c-94f26c4db365", "00000000:B9:00.0", 28.0, 67.328),
    ("GPU-04d228d3-3b5a-3534-f5cf-969706647d56", "00000000:CA:00.0", 26.0, 66.997),
]


def test_dcgm_h100_scrape():
    text = shared_sample("dcgm-exporter/h100-8gpu-scrape.prom")
    batch = parse_telemetry(text.encode(), fmt="prometheus", host=None, now=NOW, filename="h100.prom")
    assert batch.lines == 30 and not batch.rejected and not batch.xids
    assert [(s.uuid, s.pci_bus_id, s.gpu_temp_c, s.power_w) for s in batch.samples] == H100_SCRAPE
    assert {s.host for s in batch.samples} == {"gpu-node-1"}
    assert all(s.ts is None and s.mem_temp_c is None for s in batch.samples)  # no timestamps, no MEMORY_TEMP series
    first = prom.parse(text)[0]
    assert first[1]["pod"] == "vllm-agg-0-vllmdecodeworker-s65j5" and first[1]["pod_uid"] == ""


def families_as_series(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(sample.name, sample.labels, sample.value)
            for family in text_string_to_metric_families(text) for sample in family.samples]


def same_series(ours, theirs):
    assert len(ours) == len(theirs)
    for (name, labels, value, _ts), (their_name, their_labels, their_value) in zip(ours, theirs, strict=True):
        assert name in (their_name, their_name.removesuffix("_total"))  # prometheus_client names counters *_total
        assert labels == their_labels
        assert value == their_value or (math.isnan(value) and math.isnan(their_value))


def test_fast_parser_agrees_with_prometheus_client_on_the_scrape():
    text = shared_sample("dcgm-exporter/h100-8gpu-scrape.prom")
    same_series(prom.parse(text), families_as_series(text))


def test_fast_parser_agrees_with_prometheus_client_on_synthetic_text():
    gpus = synth.synthetic_gpus(40, seed=3, per_host=8)
    text = synth.dcgm_text_for(gpus, seed=3, health_fields=True)
    ours = prom.parse(text)
    assert len(ours) == 40 * (len(synth.DEFAULT_COUNTERS) + len(synth.HEALTH_COUNTERS))
    same_series(ours, families_as_series(text))


def default_counters() -> tuple[set[str], set[str]]:
    """(enabled, commented-out) DCGM fields of default-counters.csv."""
    enabled, commented = set(), set()
    for line in shared_sample("dcgm-exporter/default-counters.csv").splitlines():
        row = line.lstrip("# ").split(",")
        if len(row) == 3 and row[0].strip().startswith("DCGM_"):
            (commented if line.startswith("#") else enabled).add(row[0].strip())
    return enabled, commented


def test_default_counters_fields_are_recognised():
    enabled, commented = default_counters()
    mapped = {"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
              "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
              "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE"}
    opt_in = {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
              "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"}
    assert mapped <= enabled and opt_in <= commented
    assert mapped | opt_in <= set(FIELDS)
    assert (enabled | commented) & set(FIELDS) == mapped | opt_in
    # The generator writes exactly the enabled metrics (the label-only DCGM_FI_DRIVER_VERSION is a label).
    assert {metric for metric, _kind, _help in synth.DEFAULT_COUNTERS} == enabled - {"DCGM_FI_DRIVER_VERSION"}


def test_synthetic_text_maps_to_one_sample_per_gpu():
    gpus = synth.synthetic_gpus(24, seed=5)
    batch = parse_dcgm(synth.dcgm_text_for(gpus, seed=5, health_fields=True), now=NOW)
    assert [(s.uuid, s.host, s.pci_bus_id) for s in batch.samples] == [gpu[:3] for gpu in gpus]
    assert not batch.rejected
    for sample in batch.samples:
        assert 20 <= sample.gpu_temp_c <= 110 and 60 <= sample.power_w <= 700
        assert sample.sm_clock_mhz in (345.0, 1980.0) and sample.throttle_mask is not None
        assert sample.tlimit_c is not None and sample.ecc_dbe == 0 and sample.xid is not None


LABELS = 'gpu="0",UUID="GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005",pci_bus_id="00000000:53:00.0",Hostname="Node-1"'


def scrape(**values: str) -> str:
    return "".join(f"DCGM_FI_DEV_{name}{{{LABELS}}} {value}\n" for name, value in values.items())


def test_dcgm_sentinels_nan_inf_and_bounds_drop_the_field_only():
    batch = parse_dcgm(scrape(GPU_TEMP="31", MEMORY_TEMP="9223372036854775794", POWER_USAGE="140737488355328.000000",
                              SM_CLOCK="2147483632", PCIE_REPLAY_COUNTER="NaN", ECC_SBE_VOL_TOTAL="-1",
                              ECC_DBE_VOL_TOTAL="+Inf", CORRECTABLE_REMAPPED_ROWS="3",
                              UNCORRECTABLE_REMAPPED_ROWS="4611686018427387905", GPU_TEMP_LIMIT="-250"), now=NOW)
    (sample,) = batch.samples
    assert sample.gpu_temp_c == 31.0 and sample.remap_corr == 3 and sample.host == "node-1"
    assert sample.mem_temp_c is sample.power_w is sample.sm_clock_mhz is sample.pcie_replay is None
    assert sample.ecc_sbe is sample.ecc_dbe is sample.remap_unc is sample.tlimit_c is None
    assert batch.rejected == {"sentinel": 3, "nan": 1, "negative": 1, "inf": 1, "out_of_range": 2}


def test_dcgm_sentinel_keeps_its_exact_integer_value():
    (series,) = prom.parse('DCGM_FI_DEV_MEMORY_TEMP{gpu="0"} 9223372036854775794\n')
    assert series[2] == 9223372036854775794 and isinstance(series[2], int)


def test_dcgm_fallbacks_instant_power_agg_ecc_old_throttle_name():
    batch = parse_dcgm(scrape(POWER_USAGE="9223372036854775792", POWER_USAGE_INSTANT="402.5",
                              ECC_SBE_AGG_TOTAL="12", ECC_DBE_AGG_TOTAL="1", CLOCK_THROTTLE_REASONS="72",
                              ROW_REMAP_FAILURE="1", GPU_TEMP_LIMIT="-2"), now=NOW)
    (sample,) = batch.samples
    assert (sample.power_w, sample.ecc_sbe, sample.ecc_dbe, sample.throttle_mask) == (402.5, 12, 1, 72)
    assert sample.remap_failure is True and sample.tlimit_c == -2.0
    assert throttle_reason_names(72) == ["HW slowdown", "HW thermal"]
    assert batch.rejected == {"sentinel": 1}


def test_dcgm_xid_is_the_last_xid_gauge_and_err_code_wins():
    (sample,) = parse_dcgm(scrape(XID_ERRORS="79"), now=NOW).samples
    assert sample.xid == 79
    text = f'DCGM_FI_DEV_XID_ERRORS{{{LABELS},err_code="119",err_msg="GSP RPC timeout"}} 119\n'
    (sample,) = parse_dcgm(text, now=NOW).samples
    assert sample.xid == 119
    (sample,) = parse_dcgm(scrape(XID_ERRORS="0"), now=NOW).samples
    assert sample.xid == 0


def test_dcgm_timestamps_and_future_timestamps():
    past = int((NOW - timedelta(seconds=30)).timestamp() * 1000)
    future = int((NOW + timedelta(minutes=6)).timestamp() * 1000)
    text = (f'DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 40 {past}\n'
            f'DCGM_FI_DEV_GPU_TEMP{{gpu="1",UUID="GPU-bc5610b9-79c8-fedd-8899-07539c7f868a"}} 41 {future}\n')
    first, second = parse_dcgm(text, now=NOW).samples
    assert first.ts == NOW - timedelta(seconds=30) and first.gpu_temp_c == 40.0
    assert second.ts is None and second.gpu_temp_c == 41.0
    assert parse_dcgm(text, now=NOW).rejected == {"future_timestamp": 1}


def test_dcgm_mig_series_roll_up_to_the_parent_gpu():
    parent = 'gpu="0",UUID="GPU-513536b6-7d19-9063-b049-1e69664bb298",pci_bus_id="00000000:01:00.0",Hostname="a100"'
    text = "".join([
        f'DCGM_FI_DEV_GPU_TEMP{{{parent},GPU_I_PROFILE="1g.10gb",GPU_I_ID="3"}} 27\n',
        f'DCGM_FI_DEV_GPU_TEMP{{{parent},GPU_I_PROFILE="1g.10gb",GPU_I_ID="4"}} 27\n',
        f'DCGM_FI_DEV_XID_ERRORS{{{parent},GPU_I_PROFILE="1g.10gb",GPU_I_ID="3"}} 0\n',
        f'DCGM_FI_DEV_XID_ERRORS{{{parent},GPU_I_PROFILE="1g.10gb",GPU_I_ID="4"}} 43\n',
        f'DCGM_FI_DEV_POWER_USAGE{{{parent}}} 67.030000\n',
        f'DCGM_FI_DEV_SM_CLOCK{{{parent},GPU_I_PROFILE="1g.10gb",GPU_I_ID="3"}} 1275\n',
    ])
    (sample,) = parse_dcgm(text, now=NOW).samples
    assert (sample.uuid, sample.host, sample.pci_bus_id) == (
        "GPU-513536b6-7d19-9063-b049-1e69664bb298", "a100", "00000000:01:00.0")
    assert (sample.gpu_temp_c, sample.power_w, sample.sm_clock_mhz, sample.xid) == (27.0, 67.03, 1275.0, 43)


def test_dcgm_without_uuid_keys_on_host_and_pci():
    text = ('DCGM_FI_DEV_GPU_TEMP{gpu="0",pci_bus_id="0000:53:00.0"} 30\n'
            'DCGM_FI_DEV_POWER_USAGE{gpu="0",pci_bus_id="00000000:53:00.0"} 70\n'
            'DCGM_FI_DEV_GPU_TEMP{gpu="1"} 31\n')
    batch = parse_dcgm(text, now=NOW, default_host="Old-Exporter")
    (sample,) = batch.samples
    assert (sample.uuid, sample.host, sample.pci_bus_id, sample.gpu_temp_c, sample.power_w) == (
        None, "old-exporter", "00000000:53:00.0", 30.0, 70.0)
    assert batch.rejected == {"no_identity": 1}


def test_unknown_metrics_are_ignored():
    batch = parse_dcgm(scrape(GPU_TEMP="30", FB_USED="100", SOMETHING_NEW="1"), now=NOW)
    assert len(batch.samples) == 1 and not batch.rejected


def test_throttle_reason_names():
    assert throttle_reason_names(None) == [] and throttle_reason_names(0) == []
    assert throttle_reason_names(0x1FF) == ["idle", "app clocks", "SW power cap", "HW slowdown", "sync boost",
                                            "SW thermal", "HW thermal", "HW power brake", "display clocks"]
    assert throttle_reason_names(0x204) == ["SW power cap", "0x200"]
    assert THROTTLE_HW_MASK == 0xEC


# ---- Prometheus text format edge cases -------------------------------------------------------------

EDGE = (
    "# HELP plain_metric\n"  # empty HELP
    "# HELP documented Some help with \\\\ and \\n escapes\n"
    "# TYPE documented counter\n"
    "# a free comment { with braces }\n"
    "\n"
    "plain_metric 1\n"
    "documented{path=\"C:\\\\dir\",quote=\"say \\\"hi\\\"\",nl=\"a\\nb\",} 2 1700000000000\n"
    "   \n"
    "spaced{a=\"1\", b=\"2\"}\t3  \n"
    "brace{a=\"}\"} -4\n"
    "special{k=\"x\"} NaN\n"
    "special{k=\"y\"} +Inf\n"
    "special{k=\"z\"} -Inf\n"
    "special{k=\"e\"} 1.5e-3 -1\n"
    "empty{} 0\n"
    "last_without_newline{a=\"\"} 42"
)


def test_prometheus_edge_cases():
    parsed = prom.parse(EDGE)
    assert parsed[:2] == [
        ("plain_metric", {}, 1.0, None),
        ("documented", {"path": "C:\\dir", "quote": 'say "hi"', "nl": "a\nb"}, 2.0, 1700000000000),
    ]
    assert parsed[2:4] == [("spaced", {"a": "1", "b": "2"}, 3.0, None), ("brace", {"a": "}"}, -4.0, None)]
    assert math.isnan(parsed[4][2])
    assert parsed[5:] == [("special", {"k": "y"}, math.inf, None), ("special", {"k": "z"}, -math.inf, None),
                          ("special", {"k": "e"}, 0.0015, -1), ("empty", {}, 0.0, None),
                          ("last_without_newline", {"a": ""}, 42.0, None)]
    same_series(parsed, families_as_series(EDGE + "\n"))


def test_iter_series_yields_raw_label_text_once_per_distinct_text():
    text = 'a{x="1"} 1\nb{x="1"} 2\nc{x="2"} 3\n'
    series = list(prom.iter_series(text))
    assert [(name, raw, value) for name, raw, value, _ in series] == [
        ("a", 'x="1"', 1.0), ("b", 'x="1"', 2.0), ("c", 'x="2"', 3.0)]
    assert series[0][1] is series[1][1]  # one shared str per distinct label text
    assert prom.parse_labels('x="1",y="a\\"b"') == {"x": "1", "y": 'a"b'} and prom.parse_labels("") == {}


@pytest.mark.parametrize("text, line_no, reason", [
    ("ok 1\nbad line here\n", 2, "syntax"),
    ("ok 1\nm{a=\"1\" 2\n", 2, "syntax"),  # unterminated label set
    ("m{a=\"1\"} 2\nm{a=\"1\"} two\n", 2, "syntax"),
    ("m{a=\"1\"} 1_000\n", 1, "syntax"),
    ("m{a=\"1\",a=\"2\"} 1\n", 1, "syntax"),
    ("m{1a=\"1\"} 1\n", 1, "syntax"),
    ("m{a=1} 1\n", 1, "syntax"),
    ("m{a=\"1\"} 1 2 3\n", 1, "syntax"),
    ("m{a=\"1\"}\n", 1, "syntax"),
    ("\n\n# TYPE m sometimes\n", 3, "syntax"),
    ("# HELP\n", 1, "syntax"),
    ("ok 1\nm{a=\"" + "x" * 1025 + "\"} 1\n", 2, "label_too_long"),
    ("m{a=\"1\"} 1\n" * 3 + "m{a=\"1\"} 1 x\n", 4, "syntax"),
])
def test_prometheus_syntax_errors_reject_the_body_with_the_line_number(text, line_no, reason):
    with pytest.raises(TelemetryParseError) as error:
        list(prom.iter_series(text))
    assert (error.value.line_no, error.value.reason) == (line_no, reason)
    with pytest.raises(TelemetryParseError):
        parse_dcgm(text, now=NOW)


def test_gigantic_label_values():
    text = 'm{a="' + "x" * 1024 + '"} 1\n'
    assert prom.parse(text)[0][1]["a"] == "x" * 1024
    with pytest.raises(TelemetryParseError) as error:
        prom.parse('m{a="' + "\\\\" * 600 + "y" * 500 + '"} 1\n')  # 1100 characters once unescaped
    assert error.value.reason == "label_too_long"
    with pytest.raises(TelemetryParseError) as error:
        prom.parse('m{a="' + "x" * 5_000_000 + '"} 1\n')
    assert (error.value.reason, error.value.line_no) == ("label_too_long", 1)


def test_errors_late_in_a_large_body_carry_the_right_line_number():
    gpus = synth.synthetic_gpus(2000, seed=9)
    text = synth.dcgm_text_for(gpus, seed=9)  # more than one 1 MiB chunk
    lines = text.count("\n")
    with pytest.raises(TelemetryParseError) as error:
        parse_dcgm(text + "DCGM_FI_DEV_GPU_TEMP{oops} 1\n", now=NOW)
    assert error.value.line_no == lines + 1


# ---- kernel log --------------------------------------------------------------------------------------


def test_kernel_log_xid_119_sample():
    text = shared_sample("kernel-log/dmesg-with-xid-119.log")
    batch = parse_telemetry(text.encode(), fmt="kernel-log", host="XE9680-1", now=NOW, filename="dmesg.log")
    assert batch.lines == 43 and not batch.samples and not batch.rejected
    assert [(x.line_no, x.xid, x.pid, x.process, x.ts_text) for x in batch.xids] == [
        (3, 119, 2024380, "nvidia-smi", "Sun Feb 23 16:24:18 2025"),
        (38, 119, 2024380, "nvidia-smi", "Sun Feb 23 16:24:24 2025"),
        (40, 119, 2024380, "nvidia-smi", "Sun Feb 23 16:24:30 2025"),
        (42, 119, 1263500, "cache_mgr_main", "Sun Feb 23 16:27:12 2025"),
        (43, 119, 1240590, "gpud", "Sun Feb 23 16:30:13 2025"),
    ]
    assert {(x.host, x.pci_bus_id, x.uuid) for x in batch.xids} == {
        ("xe9680-1", "00000000:9B:00.0", "GPU-509665ad-b600-ac93-3616-d754b23d636d")}
    assert batch.xids[0].message == ("Timeout after 6s of waiting for RPC response from GPU4 GSP! "
                                     "Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).")


def test_kernel_log_other_forms_and_uuid_after_the_xid():
    text = (
        "Feb 23 16:24:18 node-7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.\n"
        "[ 1234.567890] NVRM: Xid (PCI:0000:86:00): 13, Graphics SM Warp Exception on (GPC 1, TPC 0)\n"
        "[ 1234.600000] NVRM: Xid (PCI:0000:86:00): 31, pid=4242, Ch 00000010, intr 10000000\n"
        "[ 1234.700000] NVRM: Xid (PCI:zzzz): 31, garbage\n"
        "[    2.000000] NVRM: GPU at PCI:0000:86:00: GPU-82e45d1b-1618-559f-144c-eab51545030b\n"
    )
    batch = parse_kernel_log(text, host=None)
    first, second, third = batch.xids
    assert (first.host, first.pci_bus_id, first.xid, first.pid, first.process, first.ts_text) == (
        "node-7", "00000000:3B:00.0", 79, None, "", "Feb 23 16:24:18")
    assert first.message == "GPU has fallen off the bus." and first.uuid is None
    assert (second.xid, second.pid, second.process, second.message, second.uuid) == (
        13, None, "", "Graphics SM Warp Exception on (GPC 1, TPC 0)", "GPU-82e45d1b-1618-559f-144c-eab51545030b")
    assert (third.xid, third.pid, third.message, third.ts_text) == (31, 4242, "Ch 00000010, intr 10000000",
                                                                    "1234.600000")
    assert batch.rejected == {"unparsed_xid": 1}


# ---- parse_telemetry: the body as a whole ------------------------------------------------------------


def test_body_too_large_and_not_text(settings):
    settings.FLEET_TELEMETRY_MAX_BYTES = 100
    with pytest.raises(TelemetryParseError) as error:
        parse_telemetry(b"x 1\n" * 26, fmt="prometheus", host=None, now=NOW, filename="big.prom")
    assert error.value.reason == "body_too_large"
    with pytest.raises(TelemetryParseError) as error:
        parse_telemetry(b"m 1\n\xff\xfe 2\n", fmt="prometheus", host=None, now=NOW, filename="latin1.prom")
    assert (error.value.reason, error.value.line_no) == ("not_text", 2)
    with pytest.raises(TelemetryParseError) as error:
        parse_telemetry(b"m 1\n", fmt="graphite", host=None, now=NOW, filename="x")  # type: ignore[arg-type]
    assert error.value.reason == "unknown_format"
