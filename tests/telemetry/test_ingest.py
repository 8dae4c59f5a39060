"""Telemetry ingest end to end: every shared sample into the database, unknown GPUs, hostile input, the CLI,
scraping real HTTP endpoints (a good, a failing and a hanging one)."""

from __future__ import annotations

import datetime as dt
import io
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from fleet import dispatch
from telemetry import demo, partitions, services, tasks
from telemetry.models import GpuLatest, IngestKind, IngestSource, XidEvent
from telemetry.sample import TelemetryParseError
from tests import factories
from tests.samples import SAMPLES
from world.dcgm_exporter import dcgm_text_for

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_caches():
    services.identity_cache_clear()
    partitions.partitions_forget()


def sample(relative: str) -> bytes:
    return (SAMPLES / relative).read_bytes()


def raw_count() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM telemetry_sample")
        return cursor.fetchone()[0]


def source(name: str = "test", **fields) -> IngestSource:
    return services.ingest_source_create(actor=None, name=name, kind=fields.pop("kind", IngestKind.FILE), **fields)


# (file, host, [(uuid or None when masked, PCI bus id, gpu temp, memory temp, T.Limit, power W, SM clock)]),
# numbers read from the files.
XML_SAMPLES = [
    ("a100-sxm4-v12.xml", [("GPU-513536b6-7d19-9063-b049-1e69664bb298", "00000000:01:00.0", 27, 44, None, 67.03, 1275)]),
    ("a10g.xml", [("GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94", "00000000:00:1E.0", 17, None, None, 25.58, 210)]),
    ("dual_a5000-v13.xml", [(None, "00000000:81:00.0", 13, None, None, 6.41, 210),
                            (None, "00000000:C1:00.0", 15, None, None, 13.6, 210)]),
    ("gtx-1660-ti.xml", [("GPU-304a277d-3545-63b8-3a36-dfde3c992989", "00000000:43:00.0", 40, None, None, 8.93, 300)]),
    ("pro-6000-maxq-blackwell-v13.xml", [(None, "00000000:61:00.0", 24, None, 68, 3.97, 180)]),
    ("quadro-p2000-v12.xml", [("GPU-396caaed-39ca-3199-2e68-717cdb786ec6", "00000000:17:00.0", 34, None, None, 4.61,
                               139)]),
    ("rtx-4000-sff-ada-v13.xml", [("GPU-37037c3f-65c8-ec4d-24a9-420204ad8026", "00000000:06:00.0", 38, None, 49, 8.81,
                                   210)]),
    ("tesla-t4.xml", [("GPU-d37e67a5-91dd-3774-a5cb-99096249601a", "00000000:00:1E.0", 40, None, None, 26.78, 585)]),
    ("v100-pcie-1card.xml", [("GPU-e77ce5d8-8b63-c936-3c1b-839d45bcd0f2", "00000000:21:01.0", 66, 65, None, 170.16,
                              1380)]),
]


@pytest.mark.sqlite
@pytest.mark.parametrize(("filename", "expected"), XML_SAMPLES, ids=[name for name, _ in XML_SAMPLES])
def test_every_nvidia_smi_xml_sample_is_stored_with_its_values(filename, expected):
    server = factories.server(hostname="gpu-host-1")
    gpus = [factories.gpu(server, uuid=uuid, pci_bus_id=bus) for uuid, bus, *_ in expected]
    result = services.telemetry_ingest(source=source(), content=sample(f"nvidia-smi-xml/{filename}"),
                                       fmt="nvidia-smi-xml", host="gpu-host-1")
    assert (result.samples, result.unknown) == (len(expected), 0)
    services.telemetry_merge()
    assert raw_count() == len(expected)
    for gpu, (_, _, temp, mem, tlimit, power, clock) in zip(gpus, expected, strict=True):
        latest = GpuLatest.objects.get(gpu=gpu)
        assert (latest.gpu_temp_c, latest.mem_temp_c, latest.tlimit_c, latest.sm_clock_mhz) == (temp, mem, tlimit, clock)
        assert latest.power_w == pytest.approx(power, rel=1e-6)


@pytest.mark.sqlite
def test_dcgm_exporter_sample_is_stored_by_uuid():
    text = sample("dcgm-exporter/h100-8gpu-scrape.prom")
    server = factories.server(hostname="gpu-node-1")
    uuids = sorted({line.split('UUID="')[1].split('"')[0] for line in text.decode().splitlines() if 'UUID="' in line})
    assert len(uuids) == 8
    gpus = {uuid: factories.gpu(server, uuid=uuid) for uuid in uuids}
    result = services.telemetry_ingest(source=source("dcgm"), content=text, fmt="prometheus")
    services.telemetry_merge()
    assert (result.samples, result.unknown) == (8, 0)
    first = GpuLatest.objects.get(gpu=gpus["GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005"])  # gpu="0"
    assert (first.gpu_temp_c, first.power_w) == (30, pytest.approx(113.611, rel=1e-6))
    last = GpuLatest.objects.get(gpu=gpus["GPU-04d228d3-3b5a-3534-f5cf-969706647d56"])  # gpu="7"
    assert (last.gpu_temp_c, last.power_w) == (26, pytest.approx(66.997, rel=1e-6))
    assert IngestSource.objects.get(name="dcgm").samples_total == 8


@pytest.mark.sqlite
def test_kernel_log_xids_are_events_once():
    server = factories.server(hostname="xe9680-1")
    gpu = factories.gpu(server, uuid="GPU-509665ad-b600-ac93-3616-d754b23d636d", pci_bus_id="00000000:9B:00.0")
    text = sample("kernel-log/dmesg-with-xid-119.log")
    result = services.telemetry_ingest(source=source(), content=text, fmt="kernel-log", host="xe9680-1")
    assert (result.xid_events, result.unknown, result.samples) == (5, 0, 0)
    events = list(XidEvent.objects.filter(gpu=gpu).order_by("at", "id"))
    assert [e.xid for e in events] == [119] * 5
    assert all(e.hardware and e.source == "kernel" for e in events)
    assert events[0].at == dt.datetime(2025, 2, 23, 16, 24, 18, tzinfo=dt.UTC)
    assert (events[0].pid, events[0].process) == (2024380, "nvidia-smi")
    assert events[-1].at == dt.datetime(2025, 2, 23, 16, 30, 13, tzinfo=dt.UTC)
    assert (events[-1].pid, events[-1].process) == (1240590, "gpud")
    again = services.telemetry_ingest(source=source("again"), content=text, fmt="kernel-log", host="xe9680-1")
    assert again.xid_events == 0
    assert XidEvent.objects.count() == 5


@pytest.mark.sqlite
def test_kernel_log_maps_by_host_and_bus_without_uuid():
    server = factories.server(hostname="xe9680-2")
    gpu = factories.gpu(server, uuid=None, pci_bus_id="00000000:9B:00.0")
    text = sample("kernel-log/dmesg-with-xid-119.log").replace(b"GPU-509665ad-b600-ac93-3616-d754b23d636d", b"")
    result = services.telemetry_ingest(source=None, content=text, fmt="kernel-log", host="xe9680-2")
    assert result.xid_events == 5
    assert XidEvent.objects.filter(gpu=gpu).count() == 5


@pytest.mark.sqlite
def test_unknown_gpus_are_counted_per_source_never_written():
    server = factories.server(hostname="node-00001")
    known = factories.gpu(server)
    text = dcgm_text_for([(known.uuid, "node-00001", known.pci_bus_id, "NVIDIA H100 80GB HBM3"),
                          ("GPU-0f0e0d0c-1111-2222-3333-444455556666", "node-00099", "00000000:18:00.0", "NVIDIA H100")],
                         seed=1)
    src = source("rack-7", kind=IngestKind.PUSH)
    result = services.telemetry_ingest(source=src, content=text, fmt="prometheus")
    assert (result.samples, result.unknown) == (1, 1)
    assert result.unknown_examples == ["GPU-0f0e0d0c-1111-2222-3333-444455556666"]
    services.telemetry_ingest(source=src, content=text, fmt="prometheus")
    src.refresh_from_db()
    services.telemetry_merge()
    assert (src.last_unknown, src.unknown_total, src.samples_total) == (1, 2, 2)
    assert src.unknown_examples == ["GPU-0f0e0d0c-1111-2222-3333-444455556666"]
    assert raw_count() == 2


@pytest.mark.sqlite
def test_a_new_gpu_is_known_from_its_first_batch():
    server = factories.server(hostname="node-00002")
    first = factories.gpu(server)
    line = 'DCGM_FI_DEV_GPU_TEMP{{UUID="{}",Hostname="node-00002"}} 41\n'
    assert services.telemetry_ingest(source=None, content=line.format(first.uuid), fmt="prometheus").samples == 1
    second = factories.gpu(server)  # created after the identity cache was loaded
    assert services.telemetry_ingest(source=None, content=line.format(second.uuid), fmt="prometheus").samples == 1


@pytest.mark.sqlite
@pytest.mark.parametrize("body", [b"garbage line without a value\n", b"\xff\xfe not utf-8",
                                  b'DCGM_FI_DEV_GPU_TEMP{UUID="x} 1\n'])
def test_hostile_input_is_refused_whole_and_recorded(body):
    server = factories.server(hostname="node-00003")
    gpu = factories.gpu(server)
    good = f'DCGM_FI_DEV_GPU_TEMP{{UUID="{gpu.uuid}"}} 41\n'.encode()
    src = source("hostile")
    with pytest.raises(TelemetryParseError):
        services.telemetry_ingest(source=src, content=good + body, fmt="prometheus")
    assert raw_count() == 0
    src.refresh_from_db()
    assert src.last_error and src.last_ok_at is None


@pytest.mark.sqlite
def test_values_out_of_range_are_dropped_and_counted():
    server = factories.server(hostname="node-00004")
    gpu = factories.gpu(server)
    body = (f'DCGM_FI_DEV_GPU_TEMP{{UUID="{gpu.uuid}"}} NaN\n'
            f'DCGM_FI_DEV_MEMORY_TEMP{{UUID="{gpu.uuid}"}} 9223372036854775794\n'
            f'DCGM_FI_DEV_POWER_USAGE{{UUID="{gpu.uuid}"}} 250.5\n')
    result = services.telemetry_ingest(source=None, content=body, fmt="prometheus")
    assert result.samples == 1
    services.telemetry_merge()
    assert result.rejected == {"nan": 1, "sentinel": 1}
    latest = GpuLatest.objects.get(gpu=gpu)
    assert (latest.gpu_temp_c, latest.mem_temp_c, latest.power_w) == (None, None, 250.5)


def test_too_old_samples_are_counted_not_written():
    server = factories.server(hostname="node-00005")
    gpu = factories.gpu(server)
    old_ms = int((timezone.now() - dt.timedelta(days=30)).timestamp() * 1000)
    body = f'DCGM_FI_DEV_GPU_TEMP{{UUID="{gpu.uuid}"}} 41 {old_ms}\n'
    result = services.telemetry_ingest(source=None, content=body, fmt="prometheus")
    assert (result.samples, result.rejected["too_old"]) == (0, 1)


# --- command line -------------------------------------------------------------------------------------------

@pytest.mark.sqlite
def test_cli_ingests_files_and_reports(tmp_path):
    server = factories.server(hostname="gpu-node-1")
    text = sample("dcgm-exporter/h100-8gpu-scrape.prom")
    factories.gpu(server, uuid="GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005")
    path = tmp_path / "scrape.prom"
    path.write_bytes(text)
    out = io.StringIO()
    call_command("ingest_telemetry", str(path), "--format", "prometheus", "--source", "files", stdout=out)
    assert "1 samples, 0 new XID events, 7 unknown GPUs" in out.getvalue()
    assert IngestSource.objects.get(name="files").kind == IngestKind.FILE


@pytest.mark.sqlite
def test_cli_fails_clearly_on_a_bad_file(tmp_path):
    bad = tmp_path / "bad.prom"
    bad.write_text("# TYPE x gauge\nx{a=\"1\" 2\n")
    err = io.StringIO()
    with pytest.raises(CommandError, match="1 of 1 files were not ingested"):
        call_command("ingest_telemetry", str(bad), "--format", "prometheus", stderr=err)
    assert "bad.prom: nothing written: line 2:" in err.getvalue()
    with pytest.raises(CommandError):
        call_command("ingest_telemetry", str(tmp_path / "missing.prom"), "--format", "prometheus",
                     stderr=io.StringIO())


# --- scraping real HTTP endpoints -----------------------------------------------------------------------------

@pytest.fixture
def exporter():
    """A local HTTP server: /good serves dcgm text for ``exporter.gpus``, /fail answers 500, /hang never answers
    in time."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            if self.path == "/fail":
                self.send_error(500, "exporter broke")
                return
            if self.path == "/hang":
                time.sleep(3)
            body = dcgm_text_for(server.gpus, seed=2).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.gpus = []
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    server.shutdown()
    server.server_close()


def test_scrape_a_failing_and_a_hanging_endpoint_do_not_block_a_good_one(exporter):
    node = factories.server(hostname="node-00010")
    gpus = [factories.gpu(node) for _ in range(2)]
    exporter.gpus = [(g.uuid, "node-00010", g.pci_bus_id, "NVIDIA H100 80GB HBM3") for g in gpus]
    hang = source("hang", kind=IngestKind.SCRAPE, url=f"{exporter.url}/hang", timeout_s=0.5)
    fail = source("fail", kind=IngestKind.SCRAPE, url=f"{exporter.url}/fail")
    good = source("good", kind=IngestKind.SCRAPE, url=f"{exporter.url}/metrics")
    claimed = services.scrape_claim(now=timezone.now(), limit=10)
    assert sorted(claimed) == sorted([hang.pk, fail.pk, good.pk])
    started = time.monotonic()
    assert tasks.telemetry_scrape_many_task(claimed) == 2  # what the worker runs: one task for the group
    assert time.monotonic() - started < 3
    services.telemetry_merge()
    for src in (hang, fail, good):
        src.refresh_from_db()
    assert good.last_error == "" and good.last_samples == 2 and good.last_ok_at is not None
    assert "500" in fail.last_error and fail.last_ok_at is None
    assert "timed out" in hang.last_error.lower() and hang.last_ok_at is None
    assert GpuLatest.objects.filter(gpu__in=gpus).count() == 2
    assert {s.scrape_in_flight_until for s in (hang, fail, good)} == {None}
    # Not due again until its interval has passed.
    assert services.scrape_claim(now=timezone.now(), limit=10) == []


def test_scrape_claims_respect_the_concurrency_cap():
    for n in range(5):
        source(f"s{n}", kind=IngestKind.SCRAPE, url=f"http://127.0.0.1:9/{n}")
    now = timezone.now()
    first = services.scrape_claim(now=now, limit=3)
    assert len(first) == 3
    assert services.scrape_claim(now=now, limit=3) == []  # three still in flight
    assert len(services.scrape_claim(now=now + dt.timedelta(minutes=5), limit=3)) == 3  # claims expired
    IngestSource.objects.filter(name="s0").update(enabled=False)


def test_scrape_beat_task_sends_the_claimed_sources_in_groups(monkeypatch, django_capture_on_commit_callbacks):
    sent = []
    monkeypatch.setattr(dispatch, "send", lambda name, group: sent.append(group)
                        if name == "telemetry.tasks.telemetry_scrape_many_task" else None)
    monkeypatch.setattr(services, "SCRAPE_GROUP", 2)
    ids = [source(f"b{n}", kind=IngestKind.SCRAPE, url=f"http://127.0.0.1:9/{n}").pk for n in range(5)]
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.telemetry_scrape_task() == 5
    assert [len(group) for group in sent] == [2, 2, 1]
    assert sorted(i for group in sent for i in group) == sorted(ids)


def test_demo_backfill_writes_history_and_registers_the_exporter(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    rack = factories.rack()
    servers = [factories.server(rack, rack_unit=2 + 8 * i) for i in range(2)]
    for server in servers:
        for _ in range(2):
            factories.gpu(server)
    now = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
    done = demo.telemetry_demo_backfill(hours=2, now=now)
    assert done == {"gpus": 4, "samples": 4 * 24, "steps": 24}
    from telemetry.models import Rollup5m, RollupGroup5m

    assert Rollup5m.objects.count() == 4 * 24
    assert RollupGroup5m.objects.filter(level="rack", group_id=rack.pk).count() == 24
    assert IngestSource.objects.get(name="demo-exporter").url == "http://127.0.0.1:9400/metrics"
    listed = (tmp_path / "demo-exporter-gpus.csv").read_text().splitlines()  # the demo exporter's GPU list
    assert sorted(line.split(",")[0] for line in listed) == sorted(
        g.uuid for server in servers for g in server.gpus.all())


# --- many bodies, one write ---------------------------------------------------------------------------------------

@pytest.mark.sqlite
def test_many_bodies_one_write_a_bad_body_is_refused_alone():
    """Bodies from three sources in one call: the one that does not parse is refused whole and its error is
    recorded on its own source; the other two are written (one write) and recorded as ok."""
    nodes = [factories.server(hostname=f"node-0002{n}") for n in range(3)]
    gpus = [[factories.gpu(node) for _ in range(2)] for node in nodes]
    bodies = [dcgm_text_for([(g.uuid, node.hostname, g.pci_bus_id, "NVIDIA H100 80GB HBM3") for g in node_gpus],
                            seed=n).encode() for n, (node, node_gpus) in enumerate(zip(nodes, gpus, strict=True))]
    bodies[1] = bodies[1] + b"not a sample line\n"  # a parse error after good lines: nothing of it is written
    sources = [source(f"node-{n}", kind=IngestKind.SCRAPE, url=f"http://node-{n}:9400/metrics") for n in range(3)]
    outcomes = services.telemetry_ingest_many(items=[services.IngestItem(src, body) for src, body in
                                                     zip(sources, bodies, strict=True)])
    assert [type(outcome).__name__ for outcome in outcomes] == ["IngestResult", "TelemetryParseError", "IngestResult"]
    assert outcomes[0].samples == outcomes[2].samples == 2
    services.telemetry_merge()
    assert raw_count() == 4
    assert set(GpuLatest.objects.values_list("gpu_id", flat=True)) == {g.pk for g in gpus[0] + gpus[2]}
    for src in sources:
        src.refresh_from_db()
    assert (sources[0].last_samples, sources[0].last_error, sources[2].samples_total) == (2, "", 2)
    assert sources[1].last_error.startswith("syntax: line") and sources[1].last_ok_at is None
    assert sources[1].samples_total == 0 and sources[1].last_attempt_at is not None


def test_scrape_group_fetches_concurrently_and_records_each_source(exporter):
    node = factories.server(hostname="node-00030")
    gpus = [factories.gpu(node) for _ in range(2)]
    exporter.gpus = [(g.uuid, "node-00030", g.pci_bus_id, "NVIDIA H100 80GB HBM3") for g in gpus]
    hangs = [source(f"hang{n}", kind=IngestKind.SCRAPE, url=f"{exporter.url}/hang", timeout_s=0.5) for n in range(3)]
    good = source("good2", kind=IngestKind.SCRAPE, url=f"{exporter.url}/metrics")
    started = time.monotonic()
    outcomes = services.sources_scrape(sources=[*hangs, good], threads=4)
    assert time.monotonic() - started < 1.5  # three 0.5 s timeouts side by side, not one after another
    assert [isinstance(outcome, services.IngestResult) for outcome in outcomes] == [False, False, False, True]
    good.refresh_from_db()
    assert good.last_samples == 2 and good.last_error == ""
    assert all("timed out" in IngestSource.objects.get(pk=h.pk).last_error.lower() for h in hangs)


# --- the demo's synthetic problems, and the demo exporter continuing the history ----------------------------------

@pytest.fixture
def demo_rack(monkeypatch):
    """32 GPUs in one rack, 12 of them (every demo role once) with a synthetic problem."""
    from telemetry import synth

    monkeypatch.setattr(synth, "DEMO_PROBLEM_SHARE", len(synth.DEMO_ROLES) / 32)
    rack = factories.rack(factories.site("demo"), name="demo-r01")
    servers = [factories.server(rack, hostname=f"demo-{n:02d}", rack_unit=2 + 8 * n) for n in range(4)]
    gpus = [factories.gpu(server) for server in servers for _ in range(8)]
    roles = synth.demo_fleet([gpu.uuid for gpu in gpus])
    return {gpu.pk: roles[gpu.uuid].role for gpu in gpus}, servers


@pytest.mark.sqlite
def test_demo_backfill_has_a_few_problem_gpus_that_health_flags(demo_rack):
    from telemetry.health import health_evaluate
    from telemetry.models import HealthFlag

    roles, _ = demo_rack
    now = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
    done = demo.telemetry_demo_backfill(hours=12, now=now)
    assert done["samples"] == 32 * 144 + 1  # the 48 before its 171
    health_evaluate(now=now)
    flagged = {(HealthFlag.objects.get(pk=pk).gpu_id, kind, severity) for pk, kind, severity in
               HealthFlag.objects.values_list("pk", "kind", "severity")}
    by_role = {role: {(kind, severity) for gpu, kind, severity in flagged if roles[gpu] == role}
               for role in set(roles.values())}
    assert by_role[""] == set()  # healthy GPUs: no flag
    assert by_role["remap_failure"] == {("row_remap_failure", "rma")}
    assert by_role["xid48"] == {("rma_xid", "rma")}  # a DBE with its DRAM detail
    for role in ("xid79", "xid74", "xid95"):
        assert by_role[role] == {("rma_xid", "drain")}
    assert by_role["xid13"] == by_role["xid43"] == set()  # application XIDs: recorded, never counted
    assert XidEvent.objects.filter(hardware=False, xid__in=(13, 43)).count() == 2
    assert {kind for kind, _ in by_role["thermal"]} == {"thermal_outlier"}
    assert by_role["dbe_rate"] == {("error_rate", "watch")} or by_role["dbe_rate"] == {("error_rate", "drain")}


@pytest.mark.sqlite
def test_demo_exporter_continues_the_backfill(demo_rack, settings, tmp_path):
    """The Procfile's exporter (``python -m world.dcgm_exporter --gpus-file ... --demo``, a real process reading
    the GPU list the backfill wrote) scraped right after the backfill: the same band (no cliff at the present),
    the same counters and last XIDs (no new XID event, no counter change except the GPU with an ECC error every
    100 min)."""
    import subprocess
    import sys
    import urllib.request

    from telemetry import synth

    settings.VAR_DIR = tmp_path
    roles, servers = demo_rack
    now = timezone.now()
    demo.telemetry_demo_backfill(hours=2, now=now)
    before = {latest.gpu_id: latest for latest in GpuLatest.objects.all()}
    events = XidEvent.objects.count()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    # The exporter process must see the same 32-GPU problem share as this test's fleet.
    code = (f"import telemetry.synth as s; s.DEMO_PROBLEM_SHARE = {synth.DEMO_PROBLEM_SHARE!r}; "
            "from world.dcgm_exporter.__main__ import main; main()")
    process = subprocess.Popen([sys.executable, "-c", code, "--port", "0", "--demo", "--gpus-file",  # noqa: S603
                                str(tmp_path / "demo-exporter-gpus.csv")], env=env, stdout=subprocess.PIPE, text=True)
    try:
        url = process.stdout.readline().split(" on ")[-1].strip()
        with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - the exporter we started
            body = response.read()
    finally:
        process.terminate()
        process.wait(timeout=10)
    services.telemetry_ingest(source=source("demo"), content=body, fmt="prometheus")
    services.telemetry_merge()
    assert XidEvent.objects.count() == events
    assert GpuLatest.objects.filter(ts__gt=now).count() == 32
    for latest in GpuLatest.objects.all():
        old = before[latest.gpu_id]
        assert abs(latest.gpu_temp_c - old.gpu_temp_c) <= 6, roles[latest.gpu_id]
        assert abs(latest.power_w - old.power_w) <= 60
        assert (latest.last_xid, latest.remap_unc, latest.remap_failure) == (old.last_xid, old.remap_unc,
                                                                            old.remap_failure)
        if roles[latest.gpu_id] != "dbe_rate":
            assert latest.ecc_dbe == old.ecc_dbe == 0


def test_cli_ingest_leaves_its_samples_visible_when_it_returns(tmp_path):
    """No beat runs here: what the command reports as written is in the raw and latest tables when it exits."""
    server = factories.server(hostname="gpu-node-1")
    gpu = factories.gpu(server, uuid="GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005")
    path = tmp_path / "scrape.prom"
    path.write_bytes(sample("dcgm-exporter/h100-8gpu-scrape.prom"))
    out = io.StringIO()
    before = raw_count()

    call_command("ingest_telemetry", str(path), "--format", "prometheus", stdout=out)

    assert "1 samples" in out.getvalue() and "visible now" in out.getvalue()
    assert raw_count() == before + 1
    assert GpuLatest.objects.filter(gpu=gpu).exists()


def test_cli_ingest_no_merge_leaves_the_inbox_to_the_beat(tmp_path):
    server = factories.server(hostname="gpu-node-1")
    factories.gpu(server, uuid="GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005")
    path = tmp_path / "scrape.prom"
    path.write_bytes(sample("dcgm-exporter/h100-8gpu-scrape.prom"))
    out = io.StringIO()
    before = raw_count()

    call_command("ingest_telemetry", str(path), "--format", "prometheus", "--no-merge", stdout=out)

    assert "visible after the beat's next merge" in out.getvalue()
    assert raw_count() == before  # in the inbox: the fault the default behaviour fixes
    services.telemetry_merge()
    assert raw_count() == before + 1


NEW_DRIVER_CSV = (
    "uuid, pci.bus_id, temperature.gpu, power.draw [W], gsp.mode.current, dramencryption.mode.current, "
    "module.power.draw.average [W], kmd_version, edpp_multiplier, bbx.time_run\n"
    "GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005, 00000000:18:00.0, 41, 712.5 W, Enabled, Disabled, 3012.0 W, "
    "610.12, [N/A], 123456\n")


def test_csv_columns_of_newer_drivers_are_ignored_with_a_notice(tmp_path):
    server = factories.server(hostname="gpu-node-1")
    gpu = factories.gpu(server, uuid="GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005")
    path = tmp_path / "smi.csv"
    path.write_text(NEW_DRIVER_CSV)
    out, err = io.StringIO(), io.StringIO()

    call_command("ingest_telemetry", str(path), "--format", "nvidia-smi-csv", stdout=out, stderr=err)

    assert "1 samples" in out.getvalue()
    assert "notice:" in err.getvalue() and "gsp.mode.current" in err.getvalue()
    latest = GpuLatest.objects.get(gpu=gpu)
    assert (latest.gpu_temp_c, latest.power_w) == (41, 712.5)


def test_csv_whose_header_is_not_nvidia_smis_is_refused(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("GPU UUID, Temperature\nGPU-c4529c8d-69c4-b61d-e0bc-7b2460096005, 41\n")
    err = io.StringIO()
    with pytest.raises(CommandError):
        call_command("ingest_telemetry", str(path), "--format", "nvidia-smi-csv", stderr=err)
    assert "not an nvidia-smi header" in err.getvalue()
