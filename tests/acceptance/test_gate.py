"""The burn-in gate: no GPU enters service (or leaves burn-in for the shelf, or returns from a drain) without the
policy's evidence, through any door: the service, the GPU page, the API, the admin action, the bulk action."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from acceptance import services
from acceptance.gate import evaluate, policies_for
from acceptance.models import BurnInPolicy, CheckThreshold, RunGpu
from acceptance.selectors import gpu_evidence
from fleet.audit import SYSTEM
from inventory import services as inventory_services
from inventory.lifecycle import ALLOWED
from inventory.models import Gpu, GpuState
from tests import factories
from tests.acceptance.helpers import doc4, pass_run

pytestmark = pytest.mark.django_db


def fresh(gpu: Gpu) -> Gpu:
    return Gpu.objects.get(pk=gpu.pk)


def in_burn_in(n: int = 1, server=None) -> list[Gpu]:
    gpus = [factories.gpu(server, state="received") for _ in range(n)]
    for g in gpus:
        inventory_services.gpu_transition(gpu=g, to_state="burn_in", actor=SYSTEM)
    return [fresh(g) for g in gpus]


def test_into_service_from_every_state_needs_evidence():
    """Every state from which in_service is reachable is gated; from the others it is illegal anyway."""
    sources = [s for s in GpuState.values if GpuState.IN_SERVICE in ALLOWED[s]]
    assert sorted(sources) == ["burn_in", "drained"]
    for state in GpuState.values:
        gpu = factories.gpu(state=state)
        with pytest.raises(ValidationError) as refused:
            inventory_services.gpu_transition(gpu=gpu, to_state="in_service", actor=SYSTEM)
        code = refused.value.error_list[0].code if hasattr(refused.value, "error_list") else ""
        assert code == ("burn_in_gate" if state in sources else "illegal_transition"), state
        assert fresh(gpu).state == state


def test_a_passing_run_opens_the_gate_and_burn_in_to_spare_is_gated_too():
    gpu, other = in_burn_in(2)
    with pytest.raises(ValidationError, match="0 of 1 passing level 2"):
        inventory_services.gpu_transition(gpu=other, to_state="spare", actor=SYSTEM)
    pass_run([gpu], level=2)
    assert evaluate(fresh(gpu)).met and not evaluate(fresh(other)).met
    inventory_services.gpu_transition(gpu=gpu, to_state="in_service", actor=SYSTEM)
    assert fresh(gpu).state == "in_service"


def test_policy_level_runs_hours_tests_and_checks():
    gpu = in_burn_in(1)[0]
    policy = BurnInPolicy.objects.create(gpu_model=gpu.model, min_level=3, required_runs=2, min_hours=24,
                                         required_tests=["Targeted Stress"], required_checks=["nccl_allreduce_busbw"])
    CheckThreshold.objects.create(gpu_model=gpu.model, name="nccl_allreduce_busbw", min_value=350, unit="GB/s")
    started = timezone.now() - dt.timedelta(hours=30)
    Gpu.objects.filter(pk=gpu.pk).update(state_changed_at=started)
    gpu = fresh(gpu)
    pass_run([gpu], level=2, ran_at=started + dt.timedelta(hours=1))  # too shallow: does not count
    pass_run([gpu], level=3, ran_at=started + dt.timedelta(hours=2))
    status = evaluate(gpu)
    assert not status.met and "1 of 2 passing level 3+ with targeted_stress" in status.reasons[0]
    pass_run([gpu], level=3, ran_at=started + dt.timedelta(hours=10))
    assert evaluate(gpu).reasons[0] == "burn-in evidence covers 10.0 h of the 24 h required"
    pass_run([gpu], level=3, ran_at=started + dt.timedelta(hours=25))
    assert evaluate(gpu).reasons == ["no nccl_allreduce_busbw result"]
    services.check_record(gpu=gpu, name="nccl_allreduce_busbw", value=371.5, actor=SYSTEM)
    assert evaluate(gpu).met, evaluate(gpu).reasons
    assert policy.required_tests == ["Targeted Stress"]


def test_the_fleet_default_policy_applies_to_a_model_without_its_own():
    """A policy row without a model is the fleet default (it used to be dropped: SQL's IN never matches NULL)."""
    gpu = in_burn_in(1)[0]
    BurnInPolicy.objects.create(gpu_model=None, min_level=3, required_runs=1, min_hours=0)
    pass_run([gpu], level=2)
    assert evaluate(fresh(gpu)).reasons == ["0 of 1 passing level 3+ diagnostic run(s) since burn-in started"]
    pass_run([gpu], level=3)
    assert evaluate(fresh(gpu)).met
    BurnInPolicy.objects.create(gpu_model=gpu.model, min_level=4, required_runs=1, min_hours=0)
    assert not evaluate(fresh(gpu)).met  # the model's own policy wins over the default


def test_a_policy_given_is_not_read_again(django_assert_num_queries):
    """The GPU page reads the policy it shows and judges the gate by it: the gate reads only the evidence."""
    gpu = fresh(in_burn_in(1)[0])
    pass_run([gpu], level=3)
    policy = BurnInPolicy.objects.create(gpu_model=gpu.model, min_level=3, required_runs=1, min_hours=0)
    assert policies_for([]) == {}
    with django_assert_num_queries(1):  # the verdicts in the window
        assert evaluate(gpu, policy=policy).met
    with django_assert_num_queries(2):  # the policy, the verdicts
        assert evaluate(gpu).met


def test_the_gpu_page_judges_by_the_evidence_it_shows(django_assert_num_queries):
    """The GPU page shows a GPU's 20 newest verdicts and checks; when they hold the gate's whole window, the gate
    judges by them (and reads neither again), with the verdict it gives when it reads them itself."""
    gpu = in_burn_in(1)[0]
    BurnInPolicy.objects.create(gpu_model=gpu.model, min_level=3, required_runs=2, min_hours=24,
                                required_checks=["nccl_allreduce_busbw"])
    started = timezone.now() - dt.timedelta(hours=40)
    Gpu.objects.filter(pk=gpu.pk).update(state_changed_at=started)
    gpu = fresh(gpu)

    def judged(*, covered: bool):
        gpu_now = fresh(gpu)
        with django_assert_num_queries(3 if covered else 5):  # verdicts, checks, policy (+ the gate's two)
            shown = gpu_evidence(gpu=gpu_now)["gate"]
        assert (shown.met, shown.failed, shown.reasons, shown.passing_runs) == (
            (own := evaluate(gpu_now)).met, own.failed, own.reasons, own.passing_runs)
        return shown

    pass_run([gpu], level=3, ran_at=started - dt.timedelta(hours=1))  # before the window
    services.check_record(gpu=gpu, name="nccl_allreduce_busbw", passed=True, measured_at=started
                          - dt.timedelta(hours=1), actor=SYSTEM)
    assert judged(covered=True).reasons == ["0 of 2 passing level 3+ diagnostic run(s) since burn-in started",
                                            "no nccl_allreduce_busbw result"]
    pass_run([gpu], level=3, ran_at=started + dt.timedelta(hours=2))
    pass_run([gpu], level=3, ran_at=started + dt.timedelta(hours=30))
    services.check_record(gpu=fresh(gpu), name="nccl_allreduce_busbw", passed=True, actor=SYSTEM)
    assert judged(covered=True).met
    for hour in range(3, 22):  # 21 runs in the window: the 20 shown do not hold it
        pass_run([gpu], level=2, ran_at=started + dt.timedelta(hours=hour))
    assert judged(covered=False).met


def test_required_test_skipped_is_not_a_pass():
    gpu = in_burn_in(1)[0]
    BurnInPolicy.objects.create(gpu_model=gpu.model, min_level=3, required_runs=1, min_hours=0,
                                required_tests=["memory_bandwidth"])
    pass_run([gpu], level=3)  # software, memory, diagnostic, targeted_stress: no memory_bandwidth
    assert not evaluate(fresh(gpu)).met


def test_a_failed_run_moves_the_gpu_to_burn_in_failed_with_the_reason():
    a, b = in_burn_in(2)
    document = doc4({0: "Pass", 1: "Fail"}, serials={0: a.serial, 1: b.serial})
    run = services.diag_ingest(document=json.dumps(document), server=None, level=3, actor=SYSTEM)
    assert fresh(a).state == "burn_in" and fresh(b).state == "burn_in_failed"
    change = fresh(b).state_changes.first()
    assert f"diagnostic run #{run.pk}" in change.reason and "memory mismatch" in change.reason
    verdict = RunGpu.objects.get(run=run, gpu=b)
    assert verdict.verdict == "fail"
    assert run.results.filter(gpu=b, status="fail").values_list("error_ids", flat=True)[0] == [95]
    # A person decides: it may not go to service; retest (back to burn-in, a new window) or RMA.
    with pytest.raises(ValidationError):
        inventory_services.gpu_transition(gpu=fresh(b), to_state="in_service", actor=SYSTEM)
    inventory_services.gpu_transition(gpu=fresh(b), to_state="burn_in", actor=SYSTEM, reason="retest")
    assert not evaluate(fresh(b)).met  # the earlier passing evidence belongs to the old window


def test_an_incomplete_run_is_not_a_pass_and_moves_nothing():
    gpu = in_burn_in(1)[0]
    document = doc4({0: "Not Run"}, serials={0: gpu.serial})
    run = services.diag_ingest(document=json.dumps(document), server=None, level=3, actor=SYSTEM)
    assert RunGpu.objects.get(run=run).verdict == "incomplete"
    assert fresh(gpu).state == "burn_in" and not evaluate(fresh(gpu)).met


def test_return_from_rma_goes_through_burn_in_again():
    gpu = in_burn_in(1)[0]
    pass_run([gpu])
    inventory_services.gpu_transition(gpu=gpu, to_state="in_service", actor=SYSTEM)
    for state in ("drained", "rma", "received", "burn_in"):
        inventory_services.gpu_transition(gpu=fresh(gpu), to_state=state, actor=SYSTEM)
    with pytest.raises(ValidationError, match="burn-in started"):
        inventory_services.gpu_transition(gpu=fresh(gpu), to_state="in_service", actor=SYSTEM)
    pass_run([fresh(gpu)])
    inventory_services.gpu_transition(gpu=fresh(gpu), to_state="in_service", actor=SYSTEM)


def test_return_from_a_drain_needs_a_run_since_the_drain():
    gpu = in_burn_in(1)[0]
    pass_run([gpu])
    inventory_services.gpu_transition(gpu=gpu, to_state="in_service", actor=SYSTEM)
    inventory_services.gpu_transition(gpu=fresh(gpu), to_state="drained", actor=SYSTEM, reason="repair: reseat")
    with pytest.raises(ValidationError, match="since the drain"):
        inventory_services.gpu_transition(gpu=fresh(gpu), to_state="in_service", actor=SYSTEM)
    pass_run([fresh(gpu)], level=3)
    inventory_services.gpu_transition(gpu=fresh(gpu), to_state="in_service", actor=SYSTEM)


def test_page_api_admin_and_bulk_all_refuse(client, api, users):
    gpus = in_burn_in(3)
    # the GPU page
    client.force_login(users["operator"])
    page = client.post(f"/gpus/{gpus[0].pk}/transition/", {"to_state": "in_service", "reason": "go"})
    assert page.status_code == 200 and "may not go to" in page.content.decode()
    # the API, one and bulk
    one = api("operator").post(f"/api/v1/gpus/{gpus[0].pk}/transition/", {"to_state": "in_service"}, format="json")
    assert one.status_code == 400 and "passing" in json.dumps(one.json())
    bulk = api("operator").post("/api/v1/gpus/bulk-transition/", {"gpus": [g.pk for g in gpus],
                                                                  "to_state": "in_service"}, format="json")
    assert bulk.status_code == 400
    # the page's bulk action
    client.post("/gpus/bulk-transition/", {"scope": "selected", "gpu": [g.pk for g in gpus],
                                           "to_state": "in_service", "reason": "go", "filter": ""})
    # the admin action
    client.force_login(users["admin"])
    client.post("/admin/inventory/gpu/", {"action": "transition_selected", "apply": "1",
                                          "_selected_action": [g.pk for g in gpus], "to_state": "in_service",
                                          "reason": "admin"})
    assert set(Gpu.objects.filter(pk__in=[g.pk for g in gpus]).values_list("state", flat=True)) == {"burn_in"}
    # with evidence for one, the bulk action is still all or nothing
    pass_run([gpus[0]])
    assert api("operator").post("/api/v1/gpus/bulk-transition/", {"gpus": [g.pk for g in gpus],
                                "to_state": "in_service"}, format="json").status_code == 400
    ok = api("operator").post(f"/api/v1/gpus/{gpus[0].pk}/transition/", {"to_state": "in_service"}, format="json")
    assert ok.status_code == 200


def test_background_bulk_job_chunk_reports_the_gated_gpus():
    gpus = in_burn_in(2)
    pass_run([gpus[0]])
    errors = inventory_services.gpu_bulk_transition_job_chunk(
        job=type("J", (), {"params": {"to_state": "in_service", "reason": "job"}})(), ids=[g.pk for g in gpus],
        actor=SYSTEM)
    assert [e["gpu"] for e in errors] == [gpus[1].pk]
    assert fresh(gpus[0]).state == "in_service" and fresh(gpus[1]).state == "burn_in"


def test_a_group_above_the_bulk_limit_is_queued_as_a_job_not_reported_as_moved(settings):
    """Above ``FLEET_BULK_SYNC_LIMIT`` the group goes to a background job: the answer names the job and the GPUs
    it will move, and claims none moved (they have not, yet)."""
    from fleet.models import Job

    settings.FLEET_BULK_SYNC_LIMIT = 2
    gpus = [factories.gpu(state="received") for _ in range(3)]
    result = services.burn_in_start(gpus=gpus, actor=SYSTEM)
    assert result.moved == [] and sorted(result.queued) == sorted(g.pk for g in gpus)
    assert Job.objects.filter(pk=result.job).exists()
    assert all(fresh(g).state == "received" for g in gpus)  # the job's workers move them, not this call
    small = services.burn_in_start(gpus=[factories.gpu(state="received")], actor=SYSTEM)
    assert len(small.moved) == 1 and small.job is None and small.queued == []
