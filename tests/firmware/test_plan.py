"""Wave planning: deterministic, every upgrade path in the canary, failure-domain caps, NVLink domains whole,
compliant servers skipped, strategy and selector validation."""

from collections import Counter

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from firmware.services.plan import plan_preview, strategy_parse
from inventory.models import Server
from tests.firmware import rollout_fleet

pytestmark = pytest.mark.django_db


def _wave_of(plan) -> dict[int, int]:
    return {sid: w.index for w in plan.waves for sid in w.server_ids}


def test_same_inputs_same_plan_and_hash():
    fleet = rollout_fleet.build(servers=30, per_rack=3, sites=2)
    strategy = {"waves": [10, 50, 100], "seed": 7}
    a = plan_preview(bundle=fleet.bundle, selector={}, strategy=strategy)
    b = plan_preview(bundle=fleet.bundle, selector={}, strategy=strategy)
    assert a.plan_hash == b.plan_hash and [w.server_ids for w in a.waves] == [w.server_ids for w in b.waves]
    assert a.target_count == 30 and sorted(_wave_of(a)) == sorted(s.pk for s in fleet.servers)
    other = plan_preview(bundle=fleet.bundle, selector={}, strategy={**strategy, "seed": 8})
    assert other.plan_hash != a.plan_hash and other.target_count == 30
    preview = a.as_json()
    assert preview["targets"] == 30 and preview["wave_plan"][0]["name"] == "canary"
    assert sum(w["servers"] for w in preview["wave_plan"]) == 30


def test_canary_covers_every_upgrade_path_before_any_wave():
    # 3 current VBIOS versions x 2 sites = 6 upgrade paths among 24 servers
    versions = {n: ["96.00.89.00.01", "96.00.74.00.02", "96.00.61.00.01"][n % 3] for n in range(24)}
    fleet = rollout_fleet.build(servers=24, per_rack=2, sites=2, vbios=versions)
    plan = plan_preview(bundle=fleet.bundle, selector={}, strategy={"waves": [50, 100]})
    assert len(plan.paths) == 6
    canary = plan.waves[0]
    assert canary.name == "canary" and len(canary.server_ids) == 6
    assert {plan.servers[s].path for s in canary.server_ids} == set(plan.paths)


def test_compliant_servers_are_skipped_and_shown():
    fleet = rollout_fleet.build(servers=6, vbios={0: rollout_fleet.NEW_VBIOS, 1: rollout_fleet.NEW_VBIOS})
    plan = plan_preview(bundle=fleet.bundle, selector={}, strategy={})
    assert sorted(plan.skipped) == sorted([fleet.servers[0].pk, fleet.servers[1].pk])
    assert plan.target_count == 4
    assert plan.as_json()["skipped"] == 2 and fleet.servers[0].hostname in plan.as_json()["skipped_sample"]


def test_per_wave_rack_cap_and_per_domain_counts():
    fleet = rollout_fleet.build(servers=16, per_rack=4)
    plan = plan_preview(bundle=fleet.bundle, selector={},
                        strategy={"canary": False, "waves": [50, 100], "domain_caps": {"rack": 1}})
    # Recounted from the servers' own racks (the inventory's rows), not from the plan's per-domain counts.
    rack_of = dict(Server.objects.filter(pk__in=[s.pk for s in fleet.servers]).values_list("pk", "rack__name"))
    assert len(set(rack_of.values())) == 4
    for wave in plan.waves:
        per_rack = Counter(rack_of[sid] for sid in wave.server_ids)
        assert max(per_rack.values()) <= 1, (wave.index, per_rack)
        assert wave.per_domain["rack"] == dict(per_rack)  # the plan's own counts agree with the recount
    assert plan.target_count == 16 and sorted(_wave_of(plan)) == sorted(rack_of)
    assert len(plan.waves) >= 4  # 4 racks, at most one server of each per wave: 4 servers per wave at most


def test_an_nvlink_domain_goes_whole_into_one_wave():
    fleet = rollout_fleet.build(servers=16, per_rack=8, nvl_size=4)
    plan = plan_preview(bundle=fleet.bundle, selector={}, strategy={"waves": [25, 50, 100]})
    wave_of = _wave_of(plan)
    for start in range(0, 16, 4):
        assert len({wave_of[s.pk] for s in fleet.servers[start:start + 4]}) == 1


def test_selector_is_the_gpu_list_filter():
    fleet = rollout_fleet.build(servers=8, per_rack=2, sites=2)
    site = fleet.sites[1]
    plan = plan_preview(bundle=fleet.bundle, selector={"site": site.code}, strategy={})
    assert {plan.servers[s].site_id for w in plan.waves for s in w.server_ids} == {site.pk}
    with pytest.raises(ValidationError) as err:
        plan_preview(bundle=fleet.bundle, selector={"site": "nowhere"}, strategy={})
    assert "selector.site" in err.value.message_dict


@pytest.mark.parametrize(("strategy", "field"), [
    ({"waves": [50, 10]}, "strategy.waves"),
    ({"on_failure": "explode"}, "strategy.on_failure"),
    ({"domain_caps": {"moon": 1}}, "strategy.domain_caps"),
    ({"max_failure_ratio": 3}, "strategy.max_failure_ratio"),
    ({"retry": {"max_attempts": 0}}, "strategy.retry.max_attempts"),
])
def test_bad_strategy_gives_field_errors(strategy, field):
    with pytest.raises(ValidationError) as err:
        strategy_parse(strategy)
    assert field in err.value.message_dict


def test_plan_queries_do_not_grow_with_the_fleet():
    """The planner reads the fleet in a fixed number of queries: planning four times as many servers costs no
    more (what keeps a 100,000-GPU plan cheap; bench/firmware.py, not this test, plans at that size)."""
    fleet = rollout_fleet.build(servers=40, per_rack=5, sites=4)  # 10 servers per site
    counts = {}
    for selector, servers in (({"site": fleet.sites[0].code}, 10), ({}, 40)):
        with CaptureQueriesContext(connection) as queries:
            plan = plan_preview(bundle=fleet.bundle, selector=selector, strategy={})
        assert plan.target_count == servers
        counts[servers] = len(queries)
    assert counts[40] <= counts[10] <= 8, counts  # (the site selector itself costs one lookup)
