"""compliance_recompute: expected (baseline in force) against observed, set-based."""

import datetime as dt

import pytest
from django.utils import timezone

from firmware.models import ComplianceStatus, FirmwareTuple
from firmware.services import catalog
from firmware.services.compliance import compliance_recompute
from fleet.audit import SYSTEM
from inventory import services as inv
from tests import factories
from tests.firmware import fw_factories as fw

pytestmark = pytest.mark.django_db
NOW = timezone.now()
BUNDLE = {"bmc": "01.03.19", "sbios": "2.4", "gpu_vbios": "96.00.99.00.01"}


def observe(server, component, version, when=None):
    inv.firmware_observe(server=server, component=component, version=version, source="test",
                         seen_at=when or NOW, actor=SYSTEM)


def observe_gpu(gpu, component, version):
    inv.firmware_observe(gpu=gpu, component=component, version=version, source="test", seen_at=NOW, actor=SYSTEM)


def make_server(bmc=None, sbios=None, vbios=("96.00.99.00.01", "96.00.99.00.01")):
    server = factories.server()
    for component, version in (("bmc", bmc), ("sbios", sbios)):
        if version:
            observe(server, component, version)
    for v in vbios:
        gpu = factories.gpu(server)
        if v:
            observe_gpu(gpu, "gpu_vbios", v)
    return server


def statuses(server):
    return {(row.component, row.gpu_id): (row.status, row.actual)
            for row in ComplianceStatus.objects.filter(server=server)}


@pytest.fixture
def approver(users):
    catalog.component_specs_ensure(actor=SYSTEM)
    return users["approver"]


def test_compliant_drift_unknown(approver):
    fw.baseline(fw.bundle(BUNDLE), approver)
    ok = make_server(bmc="01.03.19", sbios="2.4")
    # Case and zero padding do not matter; an older BMC observation is superseded by the newer one.
    observe(ok, "bmc", "01.01.16", when=NOW - dt.timedelta(days=30))
    drifted = make_server(bmc="01.01.16", sbios="2.04", vbios=("96.00.99.00.01", "96.00.74.00.1c"))
    unknown = make_server(bmc=None, sbios="2.4", vbios=("96.00.99.00.01", ""))
    result = compliance_recompute()

    assert {v[0] for v in statuses(ok).values()} == {"compliant"}
    d = statuses(drifted)
    assert d[("bmc", None)] == ("drift", "01.01.16")
    assert d[("sbios", None)] == ("compliant", "2.04")
    assert sorted(s for (c, g), (s, _) in d.items() if c == "gpu_vbios") == ["compliant", "drift"]
    u = statuses(unknown)
    assert u[("bmc", None)] == ("unknown", "")
    assert sorted(s for (c, g), (s, _) in u.items() if c == "gpu_vbios") == ["compliant", "unknown"]
    assert result["drift"] == 2 and result["unknown"] == 2
    assert result["compliant"] == 3 * 4 - 4


def test_vbios_case_insensitive(approver):
    fw.baseline(fw.bundle({"gpu_vbios": "96.00.9A.00.01"}), approver)
    server = make_server(vbios=("96.00.9a.00.01",))
    compliance_recompute()
    assert {s for s, _ in statuses(server).values()} == {"compliant"}


def test_pool_baseline_wins_over_platform_baseline(approver):
    fw.baseline(fw.bundle({"bmc": "01.03.19"}), approver)
    pool_member, other = make_server(bmc="01.04.02", vbios=()), make_server(bmc="01.03.19", vbios=())
    pool = catalog.pool_create(name="train-a", servers=[pool_member], actor=SYSTEM)
    fw.baseline(fw.bundle({"bmc": "01.04.02"}), approver, pool=pool)
    compliance_recompute()
    assert statuses(pool_member) == {("bmc", None): ("compliant", "01.04.02")}
    assert statuses(other) == {("bmc", None): ("compliant", "01.03.19")}


def test_expired_unapproved_and_future_baselines_do_not_apply(approver):
    server = make_server(bmc="01.01.16", vbios=())
    fw.baseline(fw.bundle({"bmc": "01.03.19"}), approver, valid_from=NOW - dt.timedelta(days=10),
                valid_to=NOW - dt.timedelta(days=1))
    catalog.baseline_create(bundle=fw.bundle({"bmc": "01.04.02"}), actor=SYSTEM,
                            valid_from=NOW - dt.timedelta(hours=1), valid_to=NOW + dt.timedelta(hours=12))  # not approved
    fw.baseline(fw.bundle({"bmc": "9.9"}), approver, valid_from=NOW + dt.timedelta(days=1))
    compliance_recompute()
    assert statuses(server) == {}


def test_rewrite_replaces_old_rows_and_tuples(approver):
    fw.baseline(fw.bundle(BUNDLE), approver)
    server = make_server(bmc="01.01.16", sbios="2.4")
    compliance_recompute()
    assert statuses(server)[("bmc", None)][0] == "drift"
    before = FirmwareTuple.objects.get(server=server).tuple_hash
    observe(server, "bmc", "01.03.19", when=NOW + dt.timedelta(minutes=1))
    compliance_recompute()
    assert statuses(server)[("bmc", None)][0] == "compliant"
    assert ComplianceStatus.objects.filter(server=server).count() == 4
    after = FirmwareTuple.objects.get(server=server)
    assert after.tuple_hash != before
    assert after.tuple_text == "bmc=01.03.19;gpu_vbios=96.00.99.00.01;sbios=2.4"
    assert not after.mixed


def test_mixed_gpus_mark_the_tuple(approver):
    server = make_server(vbios=("96.00.99.00.01", "96.00.74.00.1C"))
    compliance_recompute()
    t = FirmwareTuple.objects.get(server=server)
    assert t.mixed and "gpu_vbios=96.00.74.00.1c|96.00.99.00.01" in t.tuple_text


def test_constant_query_count(approver, django_assert_max_num_queries):
    fw.baseline(fw.bundle(BUNDLE), approver)
    make_server(bmc="01.03.19")
    with django_assert_max_num_queries(12) as small:
        compliance_recompute()
    for _ in range(5):
        make_server(bmc="01.01.16", sbios="2.4")
    with django_assert_max_num_queries(len(small.captured_queries)):
        compliance_recompute()
