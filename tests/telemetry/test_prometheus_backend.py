"""FLEET_TELEMETRY_BACKEND=prometheus against real stores: Debian's victoria-metrics and prometheus binaries,
started here on free loopback ports with temporary data directories (one of each per module), stopped after.

VictoriaMetrics is loaded as history is in production, with timestamps (``/api/v1/import/prometheus``);
Prometheus scrapes the world's dcgm-exporter simulator. Every expected value is computed here from what was
written (``HISTORY``), never read back through the code under test. The store's failures (down, slow, 422, 503)
come from real HTTP: a closed port, and a small server that answers as a struggling store does.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import socket
import statistics
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from telemetry import promql, pull, selectors, series_selectors
from telemetry.health import health_evaluate
from telemetry.models import GpuLatest, HealthFlag, Rollup1h, XidEvent
from tests import factories
from world.dcgm_exporter import ExporterServer, dcgm_text_for

pytestmark = [pytest.mark.django_db,
              pytest.mark.skipif(not (shutil.which("victoria-metrics") and shutil.which("prometheus")),
                                 reason="Debian's victoria-metrics and prometheus packages")]

STEP = 30


def _timeline() -> tuple[dt.datetime, dt.datetime, int]:
    """NOW, H0 (three hours before, on a 5-minute edge) and N (samples per GPU, the last one ~15-45 s before NOW).
    Taken again when the store is loaded (``victoria``): the suite may reach this module long after importing it,
    and "latest" values older than the store's look-back would be none."""
    now = timezone.now().replace(microsecond=0)
    h0 = dt.datetime.fromtimestamp((int(now.timestamp()) // 300) * 300, tz=dt.UTC) - dt.timedelta(hours=3)
    return now, h0, int((now - h0).total_seconds() // STEP) - 1


NOW, H0, N = _timeline()
UUIDS = {name: f"GPU-{k:08x}-aaaa-bbbb-cccc-{k:012x}" for k, name in enumerate(("g1", "g2", "g3", "g4"), start=11)}


def sample_time(k: int) -> dt.datetime:
    return H0 + dt.timedelta(seconds=STEP * k + 15)  # mid-step: never on a bucket edge


def values(name: str, k: int) -> dict[str, float]:
    """What GPU ``name`` reported at its k-th sample (a counter resets at sample 300: a reboot)."""
    seed = {"g1": 0, "g2": 5, "g3": 9}[name]
    ecc = (k // 20 if k < 300 else (k - 300) // 20) + (2 if name == "g2" else 0)
    return {
        "DCGM_FI_DEV_GPU_TEMP": 50 + (k * 7 + seed) % 11,
        "DCGM_FI_DEV_MEMORY_TEMP": 60 + (k * 3 + seed) % 7,
        "DCGM_FI_DEV_POWER_USAGE": 300 + ((k + seed) % 13) * 1.5,
        "DCGM_FI_DEV_SM_CLOCK": 1980 if k % 40 else 1830,
        "DCGM_FI_DEV_GPU_TEMP_LIMIT": 30 - (k + seed) % 5,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0x40 if 60 <= k < 75 else (0x1 if k % 9 == 0 else 0),
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ecc,
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 0,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 1 if name == "g2" and k >= 50 else 0,
        "DCGM_FI_DEV_XID_ERRORS": (79 if 100 <= k < 110 else (48 if k >= 150 else 0)) if name == "g1" else 0,
    }


def _history() -> dict[str, list[tuple[dt.datetime, dict[str, float]]]]:
    return {name: [(sample_time(k), values(name, k)) for k in range(N)] for name in ("g1", "g2", "g3")}


HISTORY = _history()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, *, timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def http_get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - the loopback store we started
        return response.read()


def instant(base: str, expr: str) -> list:
    return json.loads(http_get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})))["data"]["result"]


@pytest.fixture(scope="module")
def victoria(tmp_path_factory):
    """VictoriaMetrics single node with 3 hours of HISTORY imported with timestamps (g3 under a relabelled
    ``gpu_uuid`` label, g4 with no series at all)."""
    global NOW, H0, N, HISTORY  # noqa: PLW0603 - the module's timeline, as of loading the store
    NOW, H0, N = _timeline()
    HISTORY = _history()
    port, data = free_port(), tmp_path_factory.mktemp("vm")
    process = subprocess.Popen(["victoria-metrics", f"-storageDataPath={data}", f"-httpListenAddr=127.0.0.1:{port}",  # noqa: S603, S607
                                "-retentionPeriod=1", "-search.latencyOffset=0s", "-search.disableCache",
                                "-loggerLevel=ERROR"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: http_get(base + "/health") == b"OK", what="victoria-metrics")
        lines = []
        for name, rows in HISTORY.items():
            label = "gpu_uuid" if name == "g3" else "UUID"
            labels = f'gpu="0",{label}="{UUIDS[name]}",Hostname="host-{name}",modelName="NVIDIA H100 80GB HBM3"'
            for at, reading in rows:
                ms = int(at.timestamp() * 1000)
                lines += [f"{metric}{{{labels}}} {value} {ms}" for metric, value in reading.items()]
        request = urllib.request.Request(base + "/api/v1/import/prometheus", data="\n".join(lines).encode(),  # noqa: S310
                                         method="POST")
        urllib.request.urlopen(request, timeout=60).read()  # noqa: S310
        http_get(base + "/internal/force_flush")
        wait_for(lambda: len(instant(base, "count_over_time(DCGM_FI_DEV_GPU_TEMP[4h])")) == 3, what="the import")
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture
def fleet(settings, victoria):
    """Racks A (g1, g2) and B (g3, g4) with the UUIDs of HISTORY; Fleet reading VictoriaMetrics."""
    settings.FLEET_TELEMETRY_BACKEND = "prometheus"
    settings.FLEET_PROMETHEUS_URL = victoria
    settings.FLEET_PROMETHEUS_LABELS = {}
    settings.FLEET_PROMETHEUS_TIMEOUT = 10
    selectors.heatmap_layout_forget()
    site = factories.site("pm")
    racks = {"A": factories.rack(site, name="A"), "B": factories.rack(site, name="B")}
    gpus = {}
    for name, rack in (("g1", "A"), ("g2", "A"), ("g3", "B"), ("g4", "B")):
        server = factories.server(racks[rack], hostname=f"host-{name}")
        gpus[name] = factories.gpu(server, uuid=UUIDS[name])
    yield gpus, racks
    selectors.heatmap_layout_forget()


def in_bucket(name: str, start: dt.datetime, seconds: int) -> list[dict[str, float]]:
    return [v for at, v in HISTORY[name] if start <= at < start + dt.timedelta(seconds=seconds)]


def delta(new: float, old: float | None) -> float:
    """The operator's reading of a counter: a lower value is a reset (the increase is the new value)."""
    return 0 if old is None else (new if new < old else new - old)


def test_gpu_charts_read_the_store_raw_and_5_minute(fleet):
    gpus, _ = fleet
    start, end = H0 + dt.timedelta(minutes=30), H0 + dt.timedelta(minutes=90)
    raw = selectors.history(scope="gpu", scope_id=gpus["g1"].pk, metric="gpu_temp", start=start, end=end)
    expected = [(at - dt.timedelta(seconds=15), v["DCGM_FI_DEV_GPU_TEMP"]) for at, v in HISTORY["g1"]
                if start <= at < end]
    assert [(t, lo) for t, lo, _, _ in raw] == expected

    five = selectors.history(scope="gpu", scope_id=gpus["g1"].pk, metric="power", start=start, end=end,
                             resolution="5m")
    assert len(five) == 12
    for t, lo, avg, hi in five:
        power = [v["DCGM_FI_DEV_POWER_USAGE"] for v in in_bucket("g1", t, 300)]
        assert (lo, hi) == (min(power), max(power)) and avg == pytest.approx(statistics.fmean(power))
    throttle = selectors.history(scope="gpu", scope_id=gpus["g1"].pk, metric="throttle", start=H0,
                                 end=H0 + dt.timedelta(hours=1), resolution="5m")
    for t, _, fraction, _ in throttle:  # only hardware reasons count (0x40 HW thermal; 0x1 idle does not)
        masks = [v["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"] for v in in_bucket("g1", t, 300)]
        assert fraction == pytest.approx(sum(1 for m in masks if m & 0x40) / len(masks))


def test_counters_are_read_as_increases_across_a_reset(fleet):
    gpus, _ = fleet
    start, end = H0, H0 + dt.timedelta(hours=3)
    got = selectors.history(scope="gpu", scope_id=gpus["g1"].pk, metric="ecc_dbe", start=start, end=end,
                            resolution="5m")
    series = [v["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] for _, v in HISTORY["g1"]]
    expected: dict[dt.datetime, float] = {}
    for k, (at, _) in enumerate(HISTORY["g1"]):
        bucket = dt.datetime.fromtimestamp(int(at.timestamp()) // 300 * 300, tz=dt.UTC)
        expected[bucket] = expected.get(bucket, 0) + delta(series[k], series[k - 1] if k else None)
    expected = {t: v for t, v in expected.items() if start <= t < end}
    assert {t: v for t, _, v, _ in got if v} == {t: v for t, v in expected.items() if v}
    assert sum(v for _, _, v, _ in got) == sum(expected.values()) > 0


def test_rack_aggregates_and_power_sum(fleet):
    gpus, racks = fleet
    start = H0 + dt.timedelta(hours=1)
    end = start + dt.timedelta(minutes=30)
    got = selectors.history(scope="rack", scope_id=racks["A"].pk, metric="power_sum", start=start, end=end)
    assert len(got) == 6
    for t, _, total, _ in got:
        assert total == pytest.approx(sum(statistics.fmean(v["DCGM_FI_DEV_POWER_USAGE"] for v in in_bucket(n, t, 300))
                                          for n in ("g1", "g2")))
    temps = selectors.history(scope="rack", scope_id=racks["A"].pk, metric="gpu_temp", start=start, end=end)
    for t, lo, _, hi in temps:
        both = [v["DCGM_FI_DEV_GPU_TEMP"] for n in ("g1", "g2") for v in in_bucket(n, t, 300)]
        assert (lo, hi) == (min(both), max(both))


def test_heatmap_latest_values_and_gpus_without_samples(fleet):
    gpus, _ = fleet
    document = selectors.heatmap_data(metric="gpu_temp")
    by_gpu = dict(zip(document["gpus"], document["values"], strict=True))
    assert by_gpu[gpus["g1"].pk] == HISTORY["g1"][-1][1]["DCGM_FI_DEV_GPU_TEMP"]
    assert by_gpu[gpus["g2"].pk] == HISTORY["g2"][-1][1]["DCGM_FI_DEV_GPU_TEMP"]
    assert by_gpu[gpus["g3"].pk] is None  # its series carry another UUID label
    assert by_gpu[gpus["g4"].pk] is None  # no series at all
    assert selectors.history(scope="gpu", scope_id=gpus["g4"].pk, metric="gpu_temp", start=H0, end=NOW) == []


def test_relabelled_uuid_label(fleet, settings):
    gpus, _ = fleet
    settings.FLEET_PROMETHEUS_LABELS = {"uuid": "gpu_uuid"}
    document = selectors.heatmap_data(metric="mem_temp")
    by_gpu = dict(zip(document["gpus"], document["values"], strict=True))
    assert by_gpu[gpus["g3"].pk] == HISTORY["g3"][-1][1]["DCGM_FI_DEV_MEMORY_TEMP"]
    assert by_gpu[gpus["g1"].pk] is None
    start = H0 + dt.timedelta(hours=2)
    got = selectors.history(scope="gpu", scope_id=gpus["g3"].pk, metric="tlimit", start=start,
                            end=start + dt.timedelta(minutes=10))
    assert [lo for _, lo, _, _ in got] == [v["DCGM_FI_DEV_GPU_TEMP_LIMIT"] for at, v in HISTORY["g3"]
                                           if start <= at < start + dt.timedelta(minutes=10)]


def test_beat_pulls_xids_hours_and_latest_idempotently_and_health_flags_them(fleet):
    gpus, _ = fleet
    added = pull.pull_xids(start=H0, end=NOW)
    assert pull.pull_xids(start=H0, end=NOW) == 0  # the same window again: nothing new
    changes = [(at, v["DCGM_FI_DEV_XID_ERRORS"]) for k, (at, v) in enumerate(HISTORY["g1"])
               if v["DCGM_FI_DEV_XID_ERRORS"] and (k == 0 or HISTORY["g1"][k - 1][1]["DCGM_FI_DEV_XID_ERRORS"]
                                                   != v["DCGM_FI_DEV_XID_ERRORS"])]
    events = list(XidEvent.objects.filter(gpu=gpus["g1"]).order_by("at").values_list("at", "xid"))
    assert added == len(changes) == 2 and [x for _, x in events] == [x for _, x in changes] == [79, 48]
    for (got_at, _), (written_at, _) in zip(events, changes, strict=True):
        assert written_at < got_at <= written_at + dt.timedelta(seconds=STEP)  # seen at the next step

    hour = dt.datetime.fromtimestamp((int(H0.timestamp()) // 3600 + 1) * 3600, tz=dt.UTC)
    assert pull.pull_hour(hour) == 2  # g1, g2 (g3 is under another label, g4 has none)
    pull.pull_hour(hour)  # again: the same rows
    row = Rollup1h.objects.get(gpu=gpus["g2"], bucket=hour)
    rows = in_bucket("g2", hour, 3600)
    assert row.n_samples == len(rows) == 120
    assert row.gpu_temp_avg == pytest.approx(statistics.fmean(v["DCGM_FI_DEV_GPU_TEMP"] for v in rows))
    assert (row.gpu_temp_max, row.power_min) == (max(v["DCGM_FI_DEV_GPU_TEMP"] for v in rows),
                                                 min(v["DCGM_FI_DEV_POWER_USAGE"] for v in rows))
    before = [v for at, v in HISTORY["g2"] if at < hour][-1]["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]
    assert row.d_ecc_dbe == rows[-1]["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] - before
    assert row.throttled_samples == sum(1 for v in rows if v["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"] & 0x40)

    assert pull.pull_latest(now=NOW) == 2
    assert GpuLatest.objects.get(gpu=gpus["g2"]).remap_failure is True
    health_evaluate(now=NOW)
    assert set(HealthFlag.objects.filter(cleared_at__isnull=True).values_list("gpu_id", "kind")) >= {
        (gpus["g2"].pk, "row_remap_failure"), (gpus["g1"].pk, "rma_xid")}


def test_steps_stay_under_the_stores_point_limit(fleet):
    gpus, _ = fleet
    start = NOW - dt.timedelta(days=365)
    assert promql.step_for(start, NOW, "raw") * promql.POINTS_MAX >= (NOW - start).total_seconds()
    got = selectors.history(scope="gpu", scope_id=gpus["g1"].pk, metric="gpu_temp", start=start, end=NOW,
                            resolution="raw")  # a year at the raw tier: the step grows, the store answers
    assert 0 < len(got) <= promql.POINTS_MAX


# --- Prometheus scraping the world's exporter -------------------------------------------------------------------

@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    """The world's dcgm-exporter simulator serving two GPUs with fixed readings, and a Prometheus scraping it
    every second. Yields (prometheus URL, the readings served)."""
    from telemetry.synth import DemoReading

    gpus = [(UUIDS["g1"], "host-g1", "00000000:18:00.0", "NVIDIA H100 80GB HBM3"),
            (UUIDS["g2"], "host-g2", "00000000:18:00.0", "NVIDIA H100 80GB HBM3")]
    readings = [DemoReading(412.5, 0, 61, 66, 27, 1980, 0, 3, 0, 0, False, 0),
                DemoReading(298.0, 0x40, 83, 90, 4, 1830, 0, 0, 0, 0, False, 0)]
    exporter = ExporterServer(lambda: dcgm_text_for(gpus, seed=1, health_fields=True, readings=readings).encode())
    exporter.start()
    port, data = free_port(), tmp_path_factory.mktemp("prom")
    config = data / "prometheus.yml"
    config.write_text(f"global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: dcgm\n    static_configs:\n"
                      f"      - targets: ['127.0.0.1:{exporter.port}']\n")
    process = subprocess.Popen(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={data / 'tsdb'}",  # noqa: S603, S607
                                f"--web.listen-address=127.0.0.1:{port}", "--log.level=error"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: len(instant(base, "DCGM_FI_DEV_GPU_TEMP")) == 2, what="prometheus to scrape the exporter")
        yield base, readings
    finally:
        process.terminate()
        process.wait(timeout=30)
        exporter.stop()


def test_prometheus_scraping_the_world_exporter(settings, scraped):
    base, readings = scraped
    settings.FLEET_TELEMETRY_BACKEND, settings.FLEET_PROMETHEUS_URL = "prometheus", base
    settings.FLEET_PROMETHEUS_LABELS = {}
    selectors.heatmap_layout_forget()
    rack = factories.rack(factories.site("sc"), name="S")
    g1 = factories.gpu(factories.server(rack, hostname="host-g1"), uuid=UUIDS["g1"])
    g2 = factories.gpu(factories.server(rack, hostname="host-g2"), uuid=UUIDS["g2"])
    for metric, field in (("gpu_temp", "gpu_temp_c"), ("power", "power_w"), ("tlimit", "tlimit_c"),
                          ("throttle", "throttle_mask")):
        document = selectors.heatmap_data(metric=metric)
        by_gpu = dict(zip(document["gpus"], document["values"], strict=True))
        want = [getattr(r, field) for r in readings]
        if metric == "throttle":
            want = [1 if mask & 0x40 else 0 for mask in want]
        assert [by_gpu[g1.pk], by_gpu[g2.pk]] == [round(w) for w in want], metric
    got = selectors.history(scope="gpu", scope_id=g2.pk, metric="gpu_temp", start=timezone.now() -
                            dt.timedelta(minutes=5), end=timezone.now() + dt.timedelta(seconds=30))
    assert got and {lo for _, lo, _, _ in got} == {83}
    # The rack's aggregates and playback from Prometheus too (label_replace + "or" of the store's PromQL).
    now = timezone.now()
    rack_temps = selectors.history(scope="rack", scope_id=rack.pk, metric="gpu_temp",
                                   start=now - dt.timedelta(minutes=5), end=now + dt.timedelta(seconds=30))
    assert rack_temps and {(lo, avg, hi) for _, lo, avg, hi in rack_temps} == {(61, 72, 83)}
    frames = selectors.heatmap_frames(metric="throttle", start=now - dt.timedelta(minutes=5),
                                      end=now + dt.timedelta(minutes=5), level="rack")
    assert frames["ids"] == [rack.pk] and [1] in frames["values"]  # g2's 0x40 is a hardware reason
    assert all(value in ([1], [None]) for value in frames["values"])  # None: before Prometheus started
    # The point limit is the store's, not ours: 11,001 points in one series is refused by Prometheus itself.
    end = time.time()
    with pytest.raises(urllib.error.HTTPError) as refused:
        http_get(f"{base}/api/v1/query_range?" + urllib.parse.urlencode(
            {"query": "DCGM_FI_DEV_GPU_TEMP", "start": end - 11_001, "end": end, "step": 1}))
    assert refused.value.code == 400
    selectors.heatmap_layout_forget()


# --- a store that is down, slow, or refusing ----------------------------------------------------------------------

class StrugglingStore:
    """A real HTTP server answering as a store in trouble: ``mode`` 422, 503 or "slow" (holds every request until
    released, longer than Fleet's timeout)."""

    def __init__(self) -> None:
        self.mode = "503"
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if outer.mode == "slow":
                    outer.release.wait(30)
                    code, body = 200, {"status": "success", "data": {"resultType": "matrix", "result": []}}
                elif outer.mode == "422":
                    code, body = 422, {"status": "error", "errorType": "execution",
                                       "error": "query processing would load too many samples into memory"}
                else:
                    code, body = 503, {"status": "error", "errorType": "unavailable", "error": "too many queries"}
                data = json.dumps(body).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (the slow case)

            def log_message(self, format, *args):  # noqa: A002
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def struggling():
    store = StrugglingStore()
    yield store
    store.close()


@pytest.mark.parametrize("mode, message", [("down", "unreachable"), ("slow", "did not answer within"),
                                           ("422", "answered 422: query processing would load too many samples"),
                                           ("503", "answered 503: too many queries")])
def test_a_store_in_trouble_degrades_the_charts_with_a_message_never_the_inventory_pages(
        client, users, settings, struggling, mode, message):
    settings.FLEET_TELEMETRY_BACKEND = "prometheus"
    settings.FLEET_PROMETHEUS_TIMEOUT = 0.5
    settings.FLEET_PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}" if mode == "down" else struggling.url
    struggling.mode = mode
    selectors.heatmap_layout_forget()
    gpu = factories.gpu(factories.server(factories.rack(factories.site("tr"), name="T"), hostname="trouble-1"),
                        uuid=UUIDS["g1"])
    client.force_login(users["viewer"])
    answer = client.get("/api/v1/telemetry/history/", {"scope": "gpu", "id": gpu.pk, "metric": "gpu_temp"})
    assert answer.status_code == 503 and message in answer.json()["detail"]
    answer = client.get("/api/v1/telemetry/heatmap/", {"metric": "power"})
    assert answer.status_code == 503 and message in answer.json()["detail"]
    page = client.get(f"/gpus/{gpu.pk}/")
    assert page.status_code == 200 and UUIDS["g1"] in page.content.decode()
    struggling.release.set()
    selectors.heatmap_layout_forget()


def test_with_the_prometheus_backend_samples_pushed_to_fleet_are_refused_kernel_logs_taken(client, users, settings):
    settings.FLEET_TELEMETRY_BACKEND = "prometheus"
    gpu = factories.gpu(factories.server(hostname="push-1"), uuid=UUIDS["g1"], pci_bus_id="00000000:9B:00.0")
    client.force_login(users["operator"])
    text = dcgm_text_for([(UUIDS["g1"], "push-1", "00000000:9B:00.0", "NVIDIA H100 80GB HBM3")], seed=1)
    answer = client.post("/api/v1/telemetry/prometheus", data=text, content_type="text/plain")
    assert answer.status_code == 409 and answer.json()["code"] == "backend_prometheus"
    assert not GpuLatest.objects.filter(gpu=gpu).exists()
    log = "[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
    answer = client.post("/api/v1/telemetry/ingest?format=kernel-log&host=push-1", data=log, content_type="text/plain")
    assert answer.status_code == 200, answer.content
    assert list(XidEvent.objects.filter(gpu=gpu).values_list("xid", flat=True)) == [79]


def test_heatmap_playback_frames_from_the_store(fleet):
    gpus, _ = fleet
    start = H0 + dt.timedelta(hours=1)
    frames = selectors.heatmap_frames(metric="gpu_temp", start=start, end=start + dt.timedelta(minutes=30),
                                      level="gpu")
    column = frames["ids"].index(gpus["g1"].pk)
    assert len(frames["times"]) == 6
    for t, values in zip(frames["times"], frames["values"], strict=True):
        temps = [v["DCGM_FI_DEV_GPU_TEMP"] for v in in_bucket("g1", t, 300)]
        assert values[column] == round(statistics.fmean(temps))
        assert values[frames["ids"].index(gpus["g4"].pk)] is None


# --- racks, rows and sites: aggregated by the store over the UUIDs of Fleet's placement ----------------------------

def bucket_mean(name: str, t: dt.datetime, metric: str, seconds: int = 300) -> float | None:
    got = [v[metric] for v in in_bucket(name, t, seconds)]
    return statistics.fmean(got) if got else None


def test_rack_playback_frames_from_the_store(fleet, monkeypatch):
    """The heatmap's rack-level playback (fleets too large for per-GPU frames) read Fleet's 5-minute rack rollups,
    which nothing fills with the prometheus backend: it came back empty. Now the store aggregates each rack."""
    gpus, racks = fleet
    start = H0 + dt.timedelta(minutes=25)  # the buckets of samples 50-109: hardware throttling at 60-74
    end = start + dt.timedelta(minutes=30)
    monkeypatch.setattr(selectors, "FRAMES_GPU_LIMIT", 1)  # "auto" picks racks, as for a large fleet
    for metric in ("gpu_temp", "power", "tlimit", "mem_temp", "throttle"):
        frames = selectors.heatmap_frames(metric=metric, start=start, end=end)
        assert frames["level"] == "rack" and len(frames["times"]) == 6
        a, b = frames["ids"].index(racks["A"].pk), frames["ids"].index(racks["B"].pk)
        for t, row in zip(frames["times"], frames["values"], strict=True):
            field = {"gpu_temp": "DCGM_FI_DEV_GPU_TEMP", "power": "DCGM_FI_DEV_POWER_USAGE",
                     "tlimit": "DCGM_FI_DEV_GPU_TEMP_LIMIT", "mem_temp": "DCGM_FI_DEV_MEMORY_TEMP",
                     "throttle": "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"}[metric]
            per_gpu = {n: [v[field] for v in in_bucket(n, t, 300)] for n in ("g1", "g2")}
            if metric in ("gpu_temp", "power"):  # the mean over the rack's GPUs of each GPU's bucket mean
                want = statistics.fmean(statistics.fmean(x) for x in per_gpu.values())
            elif metric == "tlimit":
                want = min(min(x) for x in per_gpu.values())
            elif metric == "mem_temp":
                want = max(max(x) for x in per_gpu.values())
            else:  # the rack's GPUs with a hardware reason in the bucket
                want = sum(1 for x in per_gpu.values() if any(m & 0x40 for m in x))
            assert row[a] == round(want), (metric, t)
            assert row[b] is None  # g3's series carry another label, g4 has none: no value, not a zero
        if metric == "throttle":
            assert max(row[a] for row in frames["values"]) == 2
    assert selectors.heatmap_frames(metric="gpu_temp", start=start, end=end, level="gpu")["level"] == "gpu"


def fillers(row, n: int) -> None:
    """``n`` GPUs in new racks of ``row`` with UUIDs the store has no series for, sorting between g1's and g2's:
    they only make the group's UUID regex long (and put g1 and g2 in different parts of a split query)."""
    from inventory import services as inventory_services
    from inventory.models import Rack

    for k in range(n):
        if k % 64 == 0:
            rack = inventory_services.record_create(model_class=Rack, actor=factories.SYSTEM, row=row,
                                                    name=f"F{k // 64}", position=2 + k // 64, power_budget_kw="40")
        if k % 8 == 0:
            server = factories.server(rack, hostname=f"filler-{k // 8}", rack_unit=2 + 4 * (k % 64 // 8))
        factories.gpu(server, uuid=f"GPU-0000000b-ffff-0000-0000-{k:012x}")


def test_row_and_site_aggregates_split_under_the_stores_query_length_limit(fleet, monkeypatch, settings):
    """A row's or a site's UUID regex is longer than VictoriaMetrics takes (``-search.maxQueryLen``, 16 kB): the
    throttle expression, which names the selector once per hardware bit, passes it at ~80 GPUs; the temperature
    at ~400. The group is queried in parts and the parts' partial aggregates combined (an average from sums and
    counts). These aggregates used to be one query, refused with a 422."""
    from telemetry import promql_groups

    gpus, racks = fleet
    row = racks["A"].row
    fillers(row, 100)
    row_uuids = sorted([UUIDS["g1"], UUIDS["g2"], *(f"GPU-0000000b-ffff-0000-0000-{k:012x}" for k in range(100))])
    start = H0 + dt.timedelta(minutes=25)  # hardware throttling at samples 60-74
    end = start + dt.timedelta(minutes=30)
    whole = f'avg(max_over_time({promql.throttled(promql.selector("throttle", row_uuids))}[300s:30s]))'
    assert len(whole) > 16_384
    with pytest.raises(promql.StoreUnavailable, match="422.*too long query"):  # the store's limit is real
        promql.query_range(whole, start + dt.timedelta(minutes=5), end + dt.timedelta(minutes=5), 300)

    sent = []
    real = promql_groups.query_range
    monkeypatch.setattr(promql_groups, "query_range", lambda q, *a: sent.append(len(q)) or real(q, *a))

    def throttled_gpus(t: dt.datetime) -> int:
        return sum(any(v["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"] & 0x40 for v in in_bucket(n, t, 300)) for n in ("g1", "g2"))

    for scope, scope_id in (("row", row.pk), ("site", racks["A"].site_id)):
        settings.FLEET_PROMETHEUS_MAX_QUERY_BYTES = 16_384  # VictoriaMetrics' default
        sent.clear()
        throttle = selectors.history(scope=scope, scope_id=scope_id, metric="throttle", start=start, end=end)
        assert len(sent) >= 2 and max(sent) <= 16_384, sent
        assert [(t, f) for t, _, f, _ in throttle] == [(t, throttled_gpus(t) / 2) for t, *_ in throttle]
        assert len(throttle) == 6 and any(f == 1 for _, _, f, _ in throttle)

        settings.FLEET_PROMETHEUS_MAX_QUERY_BYTES = 2_000  # a store with a tighter limit: every metric splits
        sent.clear()
        temps = selectors.history(scope=scope, scope_id=scope_id, metric="gpu_temp", start=start, end=end)
        assert len(sent) >= 2 and max(sent) <= 2_000, sent
        assert len(temps) == 6
        for t, lo, avg, hi in temps:
            both = {n: [v["DCGM_FI_DEV_GPU_TEMP"] for v in in_bucket(n, t, 300)] for n in ("g1", "g2")}
            assert lo == min(min(x) for x in both.values()) and hi == max(max(x) for x in both.values())
            assert avg == pytest.approx(statistics.fmean(statistics.fmean(x) for x in both.values()))
        draw = selectors.history(scope=scope, scope_id=scope_id, metric="power_sum", start=start, end=end)
        assert [(t, total) for t, _, total, _ in draw] == [
            (t, pytest.approx(bucket_mean("g1", t, "DCGM_FI_DEV_POWER_USAGE")
                              + bucket_mean("g2", t, "DCGM_FI_DEV_POWER_USAGE"))) for t, *_ in temps]
    assert selectors.history(scope="row", scope_id=row.pk, metric="ecc_dbe", start=start, end=end) == []


# --- the series index (/api/v1/series): which GPUs the store has, and whether the UUID label is the right one -------

def test_the_series_index_tells_which_gpus_have_no_samples_in_the_store(fleet, settings, client, users, monkeypatch):
    gpus, racks = fleet
    paths = []
    real = promql.request
    monkeypatch.setattr(promql, "request", lambda path, params: paths.append(path) or real(path, params))
    a = series_selectors.store_coverage(scope="rack", scope_id=racks["A"].pk)
    assert (a.gpus, a.missing, a.no_uuid, a.label) == (2, [], 0, "UUID")
    b = series_selectors.store_coverage(scope="rack", scope_id=racks["B"].pk)
    assert b.missing == [(gpus["g3"].pk, UUIDS["g3"]), (gpus["g4"].pk, UUIDS["g4"])]  # another label; none at all
    assert series_selectors.store_coverage(scope="gpu", scope_id=gpus["g1"].pk).missing == []
    assert set(paths) == {"/api/v1/series"}  # the index only: no range query, no sample read
    settings.FLEET_PROMETHEUS_LABELS = {"uuid": "gpu_uuid"}
    assert series_selectors.store_coverage(scope="rack", scope_id=racks["B"].pk).missing == [
        (gpus["g4"].pk, UUIDS["g4"])]
    settings.FLEET_PROMETHEUS_LABELS = {}

    client.force_login(users["viewer"])
    panel = client.get(f"/telemetry/heatmap/gpu/{gpus['g4'].pk}/").content.decode()  # loads the fragment after
    assert f'hx-get="/telemetry/store-coverage/gpu/{gpus["g4"].pk}/"' in panel
    page = client.get(f"/telemetry/store-coverage/gpu/{gpus['g4'].pk}/").content.decode()
    assert "No samples in the history store for this GPU" in page and UUIDS["g4"] in page
    page = client.get(f"/telemetry/store-coverage/rack/{racks['B'].pk}/").content.decode()
    assert "2 of 2 GPUs have no series" in page and UUIDS["g3"] in page
    assert client.get(f"/telemetry/store-coverage/rack/{racks['A'].pk}/").content.decode().strip() == ""
    assert client.get(f"/telemetry/store-coverage/row/{racks['A'].pk}/").status_code == 404
    settings.FLEET_PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"  # the store down: a message, not an error
    answer = client.get(f"/telemetry/store-coverage/gpu/{gpus['g1'].pk}/")
    assert answer.status_code == 200 and "Telemetry history is unavailable" in answer.content.decode()
    settings.FLEET_TELEMETRY_BACKEND = "embedded"  # nothing to load: the panel asks for nothing
    assert "store-coverage" not in client.get(f"/telemetry/heatmap/gpu/{gpus['g1'].pk}/").content.decode()


def test_the_label_check_names_the_label_that_carries_fleets_uuids(fleet, settings, client, users):
    check = series_selectors.store_label_check()
    assert check.ok and (check.checked, check.found) == (4, 2), check.message  # g3: another label; g4: none
    call_command("check_history_store")

    settings.FLEET_PROMETHEUS_LABELS = {"uuid": "uuid"}  # dcgm-exporter's old name, not this store's
    check = series_selectors.store_label_check()
    assert not check.ok and check.suggestion == {"uuid": "UUID"}  # g1 and g2 under UUID beat g3 under gpu_uuid
    assert """set FLEET_PROMETHEUS_LABELS='{"uuid": "UUID"}'""" in check.message
    with pytest.raises(CommandError, match="carry them in label 'UUID'"):
        call_command("check_history_store")
    client.force_login(users["viewer"])
    page = client.get("/telemetry/sources/").content.decode()
    assert 'id="label-check"' in page and "carry them in label" in page

    settings.FLEET_PROMETHEUS_LABELS = {"uuid": "uuid", "host": "node"}
    check = series_selectors.store_label_check()
    assert not check.ok and not check.suggestion and "Nor do any carry label 'node'" in check.message
    settings.FLEET_PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(CommandError, match="unreachable"):
        call_command("check_history_store")
    page = client.get("/telemetry/sources/")
    assert page.status_code == 200 and "Telemetry history is unavailable" in page.content.decode()
