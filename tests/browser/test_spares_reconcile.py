"""A buyer in real Chromium reads the spares recommendation of every scope (each site, the pool, the fleet) and
sees them reconcile: the pool holds what its sites hold, the fleet what every site holds, the fleet's "each site
alone" figure is the sum of the site rows it shows, pooled needs no more than that, and every move it suggests
goes from a site holding more than it needs to one holding less. The numbers are read off the page and checked
against the spares counted here from the fixture."""

from __future__ import annotations

import re

import pytest

from fleet.audit import SYSTEM
from inventory.models import GpuState, Site
from inventory.services import gpu_transition
from procurement.models import GpuAsset, SparesPool
from procurement.services import forecast, history
from tests import factories
from tests.browser.helpers import CHROMIUM, login, shot

playwright = pytest.importorskip("playwright.sync_api")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (make chromium)"),
]

MODEL = "NVIDIA H100 80GB HBM3"
HELD = {"fra1": 9, "ams1": 0, "sjc1": 4}  # spares on each site's shelf
POOL = ("fra1", "ams1")


@pytest.fixture
def spares_world(transactional_db):
    factories.gpu_model()
    sites = {code: factories.site(code) for code in HELD}
    SparesPool.objects.create(name="EU").sites.set([sites[c] for c in POOL])
    rows = ["serial,model,site,in_service_at,failed_at,removed_at,cause,batch"]
    for i in range(1200):
        code = ("fra1", "ams1", "sjc1")[i % 3]
        failed = f"{2024 + (i // 12) % 2}-{1 + i % 12:02d}-07" if i % 9 == 0 else ""
        rows.append(f"R{i:05d},{MODEL},{code},2023-04-01,{failed},,{'DBE' if failed else ''},L{i % 2}")
    assert history.history_import(text="\n".join(rows) + "\n", actor=SYSTEM).ok
    for code, n in HELD.items():
        for i in range(n):
            gpu = factories.gpu(state=GpuState.RECEIVED, serial=f"SPARE-{code}-{i}")
            GpuAsset.objects.create(gpu=gpu, model=gpu.model, site=Site.objects.get(code=code))
            gpu_transition(gpu=gpu, to_state=GpuState.SPARE, actor=SYSTEM, reason="shelf")
    forecast.forecast_compute(actor=SYSTEM)


def _int(text: str) -> int:
    return int(re.search(r"\d+", text).group())


def test_a_buyer_reads_each_scope_and_sees_them_reconcile(live_server, page, spares_world, make_user):
    expect = playwright.expect
    buyer = make_user("viewer", username="buyer")
    login(page, live_server.url, buyer.username, "/procurement/forecast/")
    section = page.locator(f"section.forecast-model[data-model='{MODEL}']")
    expect(section).to_be_visible()

    seen: dict[tuple[str, str], dict[str, int]] = {}
    for row in section.locator("table.forecast-table tbody tr").all():
        scope, where = row.get_attribute("data-scope"), row.get_attribute("data-where")
        seen[(scope, where)] = {"recommended": _int(row.locator(".recommended").inner_text()),
                                "spares": _int(row.locator(".spares").inner_text())}
    shot(page, "spares-01-scopes")
    assert set(seen) == {("site", "fra1"), ("site", "ams1"), ("site", "sjc1"), ("pool", "EU"), ("model", "fleet")}

    # What each scope holds, against the shelves counted in the fixture.
    assert {c: seen[("site", c)]["spares"] for c in HELD} == HELD
    assert seen[("pool", "EU")]["spares"] == sum(HELD[c] for c in POOL) == 9
    assert seen[("model", "fleet")]["spares"] == sum(HELD.values()) == 13

    text = " ".join(section.locator(".reconcile").inner_text().split())
    site_sum = sum(seen[("site", c)]["recommended"] for c in HELD)
    fleet = seen[("model", "fleet")]
    assert f"Fleet: holds {fleet['spares']} spares and needs {fleet['recommended']}" in text
    assert f"would need {site_sum} in all (it holds {sum(HELD.values())})" in text
    assert fleet["recommended"] <= site_sum  # pooled needs no more than every site alone
    pool = seen[("pool", "EU")]
    pool_sites = sum(seen[("site", c)]["recommended"] for c in POOL)
    assert re.search(rf"Pool EU \((fra1, ams1|ams1, fra1)\): holds {pool['spares']}, the sum of its sites' spares, "
                     rf"and needs {pool['recommended']} shared \(its sites alone: {pool_sites}\)", text), text
    assert pool["recommended"] <= pool_sites

    # Every suggested move takes from a site above its own need and gives to one below it, never beyond.
    surplus = {c: seen[("site", c)]["spares"] - seen[("site", c)]["recommended"] for c in HELD}
    moves = re.findall(r"move (\d+) from (\w+) to (\w+)", text)
    if surplus["fra1"] > 0 and surplus["ams1"] < 0:  # the pool's own shelves can cover its empty site
        assert ("fra1", "ams1") in {(src, dst) for _, src, dst in moves}, text
    for n, src, dst in moves:
        assert surplus[src] >= int(n) > 0 and surplus[dst] < 0
        surplus[src] -= int(n)
        surplus[dst] += int(n)
        assert surplus[dst] <= 0
    if any(v > 0 for v in surplus.values()):
        assert all(v >= 0 for v in surplus.values())  # nothing left that a move could fix
    if not moves:
        assert "No move between sites helps" in text
    shot(page, "spares-02-reconcile")
