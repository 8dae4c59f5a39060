"""Firmware catalog API: role matrix, field errors, actions, labels, drift; OpenAPI validates."""

import pytest
from django.core.management import call_command
from django.urls import reverse

from firmware.models import Baseline, Channel, Release
from firmware.services import catalog
from fleet.audit import SYSTEM
from tests import factories
from tests.firmware import fw_factories as fw
from tests.firmware.test_compliance import make_server

pytestmark = pytest.mark.django_db
SHA = "cd" * 32


@pytest.fixture(autouse=True)
def specs():
    catalog.component_specs_ensure(actor=SYSTEM)


def test_release_create_roles_and_field_errors(api):
    body = {"component": "bmc", "version": "01.04.11", "sha256": SHA, "image_url": "https://fw.example/bmc.bin"}
    assert api("viewer").post(reverse("api:release-list"), body, format="json").status_code == 403
    assert api(None).post(reverse("api:release-list"), body, format="json").status_code in (401, 403)
    created = api("operator").post(reverse("api:release-list"), body, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["channel"] == "testing"
    again = api("operator").post(reverse("api:release-list"), body, format="json")
    assert again.status_code == 400 and "version" in again.json()
    bad = api("operator").post(reverse("api:release-list"), {**body, "version": "2", "sha256": "xyz",
                                                            "image_url": ""}, format="json")
    assert bad.status_code == 400 and {"image_url"} <= set(bad.json())


def test_channel_action_needs_approver_and_reason(api):
    release = fw.release("bmc", "01.03.19")
    url = reverse("api:release-channel", args=[release.pk])
    assert api("operator").post(url, {"channel": "stable"}, format="json").status_code == 403
    assert api("approver").post(url, {"channel": "revoked"}, format="json").status_code == 400
    ok = api("approver").post(url, {"channel": "revoked", "reason": "bricks CPLD"}, format="json")
    assert ok.status_code == 200 and ok.json()["revoked_reason"] == "bricks CPLD"
    assert Release.objects.get(pk=release.pk).channel == Channel.REVOKED


def test_bundle_orders_bmc_first_and_baseline_approval(api, users):
    vbios, bmc = fw.release("gpu_vbios", "96.00.99.00.01"), fw.release("bmc", "01.03.19")
    plat = fw.platform()
    res = api("operator").post(reverse("api:bundle-list"), {"name": "h100 current", "platform": plat.pk,
                                                            "releases": [vbios.pk, bmc.pk]}, format="json")
    assert res.status_code == 201, res.content
    assert [i["component"] for i in res.json()["items"]] == ["bmc", "gpu_vbios"]
    bl = api("operator").post(reverse("api:baseline-list"), {"bundle": res.json()["id"]}, format="json")
    assert bl.status_code == 201, bl.content
    overlap = api("operator").post(reverse("api:baseline-list"), {"bundle": res.json()["id"]}, format="json")
    assert overlap.status_code == 400 and "Overlaps baseline" in overlap.json()["valid_from"][0]
    approve = reverse("api:baseline-approve", args=[bl.json()["id"]])
    assert api("operator").post(approve).status_code == 403
    assert api("approver").post(approve).json()["approved_by"] == users["approver"].username


def test_compliance_drift_and_labels(api, users):
    fw.baseline(fw.bundle({"bmc": "01.03.19"}), users["approver"])
    a, b = make_server(bmc="01.03.19", vbios=()), make_server(bmc="01.01.16", vbios=())
    domain = factories.rack()  # noqa: F841  (servers have their own domains)
    res = api("operator").post(reverse("api:compliance-recompute"))
    assert res.status_code == 200 and res.json()["drift"] == 1
    assert api("viewer").post(reverse("api:compliance-recompute")).status_code == 403
    rows = api("viewer").get(reverse("api:compliance-list"), {"status": "drift"}).json()["results"]
    assert [r["hostname"] for r in rows] == [b.hostname]
    report = api("viewer").get(reverse("api:firmware-drift")).json()
    assert report["counts"][0]["servers"] == 1
    slurm = api("viewer").get(reverse("api:firmware-labels"), {"format": "slurm"})
    assert slurm.status_code == 200 and slurm["Content-Type"].startswith("text/plain")
    lines = b"".join(slurm.streaming_content).decode().splitlines()
    assert any(line.startswith(f"NodeName={a.hostname} Features=fw_") and "fw_bmc_01.03.19" in line for line in lines)
    k8s = b"".join(api("viewer").get(reverse("api:firmware-labels"), {"format": "kubernetes"}).streaming_content)
    assert f"kubectl label --overwrite node {b.hostname} fleet.io/fw-tuple=".encode() in k8s
    assert b"fleet.io/fw-bmc=01.01.16" in k8s


def test_compliance_rows_group_gpus_by_version(api, users):
    fw.baseline(fw.bundle({"bmc": "01.03.19", "gpu_vbios": "96.00.99.00.01"}), users["approver"])
    server = make_server(bmc="01.03.19", vbios=("96.00.99.00.01", "96.00.74.00.1C", "96.00.74.00.1C"))
    api("operator").post(reverse("api:compliance-recompute"))
    rows = api("viewer").get(reverse("api:compliance-list"), {"server": server.pk, "component": "gpu_vbios"}).json()
    assert sorted((r["actual"], r["status"], r["gpu_count"]) for r in rows["results"]) == [
        ("96.00.74.00.1C", "drift", 2), ("96.00.99.00.01", "compliant", 1)]
    assert "gpu" not in rows["results"][0]
    counts = api("viewer").get(reverse("api:firmware-drift")).json()["counts"]
    assert [(c["component"], c["servers"], c["gpus"]) for c in counts] == [("gpu_vbios", 1, 2)]


def test_list_query_counts(api, django_assert_max_num_queries):
    for n in range(5):
        fw.bundle({"bmc": f"1.{n}", "sbios": f"2.{n}"})
    client = api("viewer")
    for name in ("release-list", "bundle-list", "baseline-list", "pool-list", "maintenancewindow-list",
                 "compliance-list", "componentspec-list"):
        with django_assert_max_num_queries(8):
            assert client.get(reverse(f"api:{name}")).status_code == 200


def test_openapi_validates(tmp_path):
    call_command("spectacular", "--fail-on-warn", "--validate", "--file", str(tmp_path / "s.yaml"))
    assert "/api/v1/releases/{id}/channel/" in (tmp_path / "s.yaml").read_text()


def test_baseline_model_unused():
    assert Baseline.objects.count() == 0


def test_baseline_two_person_rule(api, users):
    """As for rollouts: whoever proposed a baseline cannot approve it (service, API and the database)."""
    from django.core.exceptions import ValidationError
    from django.db import IntegrityError, transaction

    from fleet.models import AuditEvent

    bundle = fw.bundle({"bmc": "01.03.19"})
    created = api("approver").post(reverse("api:baseline-list"), {"bundle": bundle.pk}, format="json")
    assert created.status_code == 201 and created.json()["created_by"] == users["approver"].username
    baseline = Baseline.objects.get(pk=created.json()["id"])
    create_event = AuditEvent.objects.get(object_id=str(baseline.pk), action="create", object_repr=str(baseline))
    assert "created_by" in str(create_event.changes)
    approve = reverse("api:baseline-approve", args=[baseline.pk])

    refused = api("approver").post(approve)
    assert refused.status_code == 400
    assert "cannot approve" in refused.json()["non_field_errors"][0]
    with pytest.raises(ValidationError, match="second person"):
        catalog.baseline_approve(baseline=baseline, actor=users["approver"])
    baseline.refresh_from_db()
    assert baseline.proposed
    with pytest.raises(IntegrityError), transaction.atomic():  # the constraint holds without the service too
        Baseline.objects.filter(pk=baseline.pk).update(approved_by=users["approver"])

    ok = api("admin").post(approve)
    assert ok.status_code == 200 and ok.json()["approved_by"] == users["admin"].username
    approved = AuditEvent.objects.get(object_id=str(baseline.pk), action="update", object_repr=str(baseline))
    assert approved.actor == users["admin"]  # one approval, audited; the refused one left no trace
