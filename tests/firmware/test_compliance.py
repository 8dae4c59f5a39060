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
    """{(component, observed version): (status, GPUs reporting it; 0 for a server component)}"""
    return {(row.component, row.actual): (row.status, row.gpu_count)
            for row in ComplianceStatus.objects.filter(server=server)}


@pytest.fixture
def approver(users):
    catalog.component_specs_ensure(actor=SYSTEM)
    return users["approver"]


@pytest.mark.sqlite
def test_compliant_drift_unknown(approver):
    fw.baseline(fw.bundle(BUNDLE), approver)
    ok = make_server(bmc="01.03.19", sbios="2.4")
    # Case and zero padding do not matter; an older BMC observation is superseded by the newer one.
    observe(ok, "bmc", "01.01.16", when=NOW - dt.timedelta(days=30))
    drifted = make_server(bmc="01.01.16", sbios="2.04", vbios=("96.00.99.00.01", "96.00.74.00.1c"))
    unknown = make_server(bmc=None, sbios="2.4", vbios=("96.00.99.00.01", ""))
    result = compliance_recompute()

    # The GPUs of a server are grouped by the version they report.
    assert statuses(ok) == {("bmc", "01.03.19"): ("compliant", 0), ("sbios", "2.4"): ("compliant", 0),
                            ("gpu_vbios", "96.00.99.00.01"): ("compliant", 2)}
    assert statuses(drifted) == {("bmc", "01.01.16"): ("drift", 0), ("sbios", "2.04"): ("compliant", 0),
                                 ("gpu_vbios", "96.00.99.00.01"): ("compliant", 1),
                                 ("gpu_vbios", "96.00.74.00.1c"): ("drift", 1)}
    assert statuses(unknown) == {("bmc", ""): ("unknown", 0), ("sbios", "2.4"): ("compliant", 0),
                                 ("gpu_vbios", "96.00.99.00.01"): ("compliant", 1), ("gpu_vbios", ""): ("unknown", 1)}
    # Counted as before: a server component once, a per-GPU component once per GPU.
    assert result["drift"] == 2 and result["unknown"] == 2
    assert result["compliant"] == 3 * 4 - 4


def test_vbios_case_insensitive(approver):
    fw.baseline(fw.bundle({"gpu_vbios": "96.00.9A.00.01"}), approver)
    server = make_server(vbios=("96.00.9a.00.01",))
    compliance_recompute()
    assert statuses(server) == {("gpu_vbios", "96.00.9a.00.01"): ("compliant", 1)}


def test_pool_baseline_wins_over_platform_baseline(approver):
    fw.baseline(fw.bundle({"bmc": "01.03.19"}), approver)
    pool_member, other = make_server(bmc="01.04.02", vbios=()), make_server(bmc="01.03.19", vbios=())
    pool = catalog.pool_create(name="train-a", servers=[pool_member], actor=SYSTEM)
    fw.baseline(fw.bundle({"bmc": "01.04.02"}), approver, pool=pool)
    compliance_recompute()
    assert statuses(pool_member) == {("bmc", "01.04.02"): ("compliant", 0)}
    assert statuses(other) == {("bmc", "01.03.19"): ("compliant", 0)}


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
    assert statuses(server)[("bmc", "01.01.16")] == ("drift", 0)
    before = FirmwareTuple.objects.get(server=server).tuple_hash
    observe(server, "bmc", "01.03.19", when=NOW + dt.timedelta(minutes=1))
    compliance_recompute()
    assert statuses(server) == {("bmc", "01.03.19"): ("compliant", 0), ("sbios", "2.4"): ("compliant", 0),
                                ("gpu_vbios", "96.00.99.00.01"): ("compliant", 2)}
    after = FirmwareTuple.objects.get(server=server)
    assert after.tuple_hash != before
    assert after.tuple_text == "bmc=01.03.19;gpu_vbios=96.00.99.00.01;sbios=2.4"
    assert not after.mixed


@pytest.mark.sqlite
def test_mixed_gpus_mark_the_tuple(approver):
    server = make_server(vbios=("96.00.99.00.01", "96.00.74.00.1C"))
    compliance_recompute()
    t = FirmwareTuple.objects.get(server=server)
    assert t.mixed and "gpu_vbios=96.00.74.00.1c|96.00.99.00.01" in t.tuple_text


def test_constant_query_count(approver, django_assert_max_num_queries):
    fw.baseline(fw.bundle(BUNDLE), approver)
    make_server(bmc="01.03.19")
    with django_assert_max_num_queries(16) as small:  # 14 statements + the savepoint and its release
        compliance_recompute()
    for _ in range(5):
        make_server(bmc="01.01.16", sbios="2.4")
    with django_assert_max_num_queries(len(small.captured_queries)):
        compliance_recompute()
