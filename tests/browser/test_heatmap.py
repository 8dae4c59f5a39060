"""The fleet heatmap in real Chromium: the canvas draws a cell per GPU, hovering names the GPU, clicking a cell
opens its side panel with uPlot charts, and the GPU link leads to the GPU page. Screenshots in /tmp/fleet-shots/."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from telemetry.rollup import FIVE_MIN, floor
from telemetry.selectors import heatmap_layout_forget
from tests import factories
from tests.browser.helpers import CHROMIUM, login, shot
from tests.telemetry.test_health import hours_of, sample, write

playwright = pytest.importorskip("playwright.sync_api")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (make chromium)"),
]


@pytest.fixture
def hot_fleet(transactional_db):
    """Two racks of 2 servers x 8 GPUs with 3 hours of history; one GPU runs 20 C hotter."""
    site = factories.site("hm1")
    racks = [factories.rack(site, name=f"hm1-r{n:02d}") for n in (1, 2)]
    gpus = [factories.gpu(server) for rack in racks
            for server in (factories.server(rack, hostname=f"{rack.name}-n{u}", rack_unit=2 + 8 * u) for u in range(2))
            for _ in range(8)]
    hot = gpus[5]
    heatmap_layout_forget()  # the live server shares this process's 60 s layout cache with earlier tests
    end = floor(timezone.now(), FIVE_MIN)
    hours_of(gpus, hours=3, end=end, temp={hot: 80}, power={gpu: 350.0 + i for i, gpu in enumerate(gpus)})
    write([sample(gpu, end + dt.timedelta(seconds=30), temp=80 if gpu == hot else 55 + i % 10, power=400.0)
           for i, gpu in enumerate(gpus)])
    return {"gpus": gpus, "hot": hot}


def test_heatmap_draws_every_gpu_and_drills_down_to_a_gpu_chart(live_server, page, hot_fleet, make_user):
    expect = playwright.expect
    viewer = make_user("viewer", username="hm-viewer")
    login(page, live_server.url, viewer.username, "/telemetry/heatmap/")
    page.wait_for_selector("#hm-canvas[data-ready='1']")
    stats = page.evaluate("({cells: window.__heatmapStats.cells, drawMs: window.__heatmapStats.drawMs})")
    assert stats["cells"] == 32
    # The canvas has coloured (non-white) pixels: a cell per GPU was drawn.
    coloured = page.evaluate("""() => { const c = document.getElementById('hm-canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i] !== 255 || d[i + 1] !== 255 || d[i + 2] !== 255) n++;
        return n; }""")
    assert coloured >= 32 * 4
    expect(page.locator("#hm-legend")).to_contain_text("°C")
    shot(page, "20-heatmap")

    hot = hot_fleet["hot"]
    cell = page.evaluate(f"window.__heatmapStats.cellOf({hot.pk})")
    canvas = page.locator("#hm-canvas")
    canvas.hover(position=cell)
    expect(page.locator("#hm-tooltip")).to_contain_text(f"GPU #{hot.pk}")
    expect(page.locator("#hm-tooltip")).to_contain_text("80 °C")
    canvas.click(position=cell)
    panel = page.locator(f"#side-panel[data-gpu='{hot.pk}']")
    expect(panel).to_be_visible()
    chart = panel.locator("[data-chart]")
    expect(chart).to_have_attribute("data-drawn", "1")
    expect(chart.locator(".chart-box[data-panel='temp'] canvas")).to_have_count(1)
    shot(page, "21-heatmap-gpu-panel")

    panel.locator("#side-gpu-link").click()
    page.wait_for_url(f"**/gpus/{hot.pk}/")
    expect(page.locator("[data-chart][data-scope='gpu'] .chart-box[data-panel='temp'] canvas")).to_have_count(1)
    shot(page, "22-gpu-page-chart")


def test_with_the_history_store_down_the_gpu_page_renders_and_its_chart_says_why(live_server, page, make_user,
                                                                                 settings, transactional_db):
    """FLEET_TELEMETRY_BACKEND=prometheus and nothing listening at the store's URL: the GPU page is whole, and the
    chart's status line carries the API's reason (a 503) instead of a bare HTTP code."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    settings.FLEET_TELEMETRY_BACKEND = "prometheus"
    settings.FLEET_PROMETHEUS_URL = f"http://127.0.0.1:{port}"
    settings.FLEET_PROMETHEUS_TIMEOUT = 1
    gpu = factories.gpu(factories.server(factories.rack(factories.site("dn1"), name="dn1-r01"), hostname="dn1-n1"))
    viewer = make_user("viewer")
    login(page, live_server.url, viewer.username, f"/gpus/{gpu.pk}/")
    expect = playwright.expect
    expect(page.locator("body")).to_contain_text(gpu.uuid)
    status = page.locator("[data-chart][data-scope='gpu'] .chart-status")
    expect(status).to_contain_text("Telemetry history is unavailable: the history store is unreachable")
    shot(page, "23-gpu-page-store-down")


def test_the_scheduler_layer_colours_cells_by_node_state_with_a_legend(live_server, page, make_user, settings,
                                                                      transactional_db):
    """The "Workload scheduler" layer (inventory's, from the refreshed SchedulerNode rows): each cell in its
    node's state colour, the legend counts the cells per state, hovering names the state, no playback."""
    from inventory.models import SchedulerNode

    settings.FLEET_SCHEDULER = "slurm"  # the layer reads the rows beat's refresh wrote: no scheduler is asked
    rack = factories.rack(factories.site("sc1"), name="sc1-r01")
    servers = [factories.server(rack, hostname=f"sc1-n{u}", rack_unit=2 + 4 * u) for u in range(3)]
    gpus = {s.hostname: [factories.gpu(s) for _ in range(4)] for s in servers}
    for server, state in zip(servers, ("allocated", "drained", "idle"), strict=True):
        SchedulerNode.objects.create(name=server.hostname, server=server, state=state, refreshed_at=timezone.now())
    heatmap_layout_forget()
    expect = playwright.expect
    viewer = make_user("viewer", username="hm-sched-viewer")
    login(page, live_server.url, viewer.username, "/telemetry/heatmap/")
    page.wait_for_selector("#hm-canvas[data-ready='1']")
    page.locator(".metric-btn[data-metric='scheduler']").click()
    legend = page.locator("#hm-legend")
    expect(legend.locator("[data-category='2']")).to_contain_text("allocated 4")
    expect(legend.locator("[data-category='4']")).to_contain_text("drained 4")
    expect(legend.locator("[data-category='0']")).to_contain_text("idle 4")
    expect(legend).to_contain_text("down 0")
    expect(page.locator("#hm-play")).to_be_disabled()
    shot(page, "24-heatmap-scheduler")

    busy = gpus["sc1-n0"][1]
    cell = page.evaluate(f"window.__heatmapStats.cellOf({busy.pk})")
    rgb = page.evaluate(f"""() => {{ const c = document.getElementById('hm-canvas');
        const d = c.getContext('2d').getImageData({int(cell['x'])}, {int(cell['y'])}, 1, 1).data;
        return [d[0], d[1], d[2]]; }}""")
    assert rgb == [0x31, 0x82, 0xBD]  # allocated's colour
    canvas = page.locator("#hm-canvas")
    canvas.hover(position=cell)
    expect(page.locator("#hm-tooltip")).to_contain_text("allocated")
    canvas.hover(position=page.evaluate(f"window.__heatmapStats.cellOf({gpus['sc1-n1'][0].pk})"))
    expect(page.locator("#hm-tooltip")).to_contain_text("drained")
