"""The rollout API: create (planned at once), preview (dry run), actions by role, 409 on illegal transitions,
progress and targets."""

import pytest
from django.urls import reverse

from firmware.models import Rollout, RolloutState, RolloutTarget, TargetState
from tests.firmware import rollout_fleet

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet():
    return rollout_fleet.build(servers=8, per_rack=2, sites=2)


def _create(api, fleet, role="operator", **extra):
    body = {"name": "vbios", "bundle": fleet.bundle.pk, "selector": {}, "strategy": {"waves": [50, 100]}, **extra}
    return api(role).post(reverse("api:rollout-list"), body, format="json")


def test_create_plans_and_preview_gives_the_same_plan(api, fleet):
    preview = api("viewer").post(reverse("api:rollout-preview"),
                                 {"bundle": fleet.bundle.pk, "strategy": {"waves": [50, 100]}}, format="json")
    assert preview.status_code == 200, preview.json()
    assert Rollout.objects.count() == 0  # the dry run writes nothing
    assert preview.json()["targets"] == 8 and preview.json()["wave_plan"][0]["name"] == "canary"
    response = _create(api, fleet)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["state"] == RolloutState.PLANNED and body["plan_hash"] == preview.json()["plan_hash"]
    assert body["strategy"]["waves"] == [50.0, 100.0] and body["created_by"]["username"] == "operator-user"
    plan = api("viewer").get(reverse("api:rollout-plan", args=[body["id"]])).json()
    assert plan["plan_hash"] == body["plan_hash"]


def test_bad_input_gives_field_errors(api, fleet):
    response = _create(api, fleet, strategy={"waves": [50, 10], "on_failure": "explode"},
                       selector={"site": "nowhere"})
    assert response.status_code == 400
    errors = response.json()
    assert "selector.site" in errors or "strategy.waves" in errors
    response = _create(api, fleet, strategy={"waves": [50, 10], "on_failure": "explode"})
    assert {"strategy.waves", "strategy.on_failure"} <= set(response.json())


def test_viewer_cannot_create(api, fleet):
    assert _create(api, fleet, role="viewer").status_code == 403


def test_actions_by_role_and_illegal_transitions(api, fleet):
    rollout_id = _create(api, fleet).json()["id"]
    url = lambda name: reverse(f"api:rollout-{name}", args=[rollout_id])  # noqa: E731
    assert api("operator").post(url("start")).status_code == 409  # planned: not approved
    assert api("operator").post(url("submit")).status_code == 200
    assert api("operator").post(url("approve")).status_code == 403  # not an approver
    assert api("viewer").post(url("approve")).status_code == 403
    response = api("approver").post(url("approve"))
    assert response.status_code == 200 and response.json()["approved_by"]["username"] == "approver-user"
    assert api("operator").post(url("approve")).status_code == 403
    assert api("operator").post(url("start")).status_code == 200
    assert api("operator").post(url("pause"), {}, format="json").status_code == 400  # a reason is required
    paused = api("operator").post(url("pause"), {"reason": "check canary"}, format="json").json()
    assert (paused["state"], paused["pause_reason"]) == ("paused", "check canary")
    assert api("operator").post(url("resume")).json()["state"] == "running"
    assert api("operator").post(url("submit")).status_code == 409
    aborted = api("operator").post(url("abort"), {"reason": "wrong bundle"}, format="json").json()
    assert aborted["state"] == "aborted"
    assert set(RolloutTarget.objects.filter(rollout_id=rollout_id).values_list("state", flat=True)) == {
        TargetState.CANCELLED}
    response = api("operator").post(url("resume"))
    assert response.status_code == 409 and "aborted" in response.json()["detail"]


def test_creator_cannot_approve_own_rollout(api, fleet):
    rollout_id = _create(api, fleet, role="approver").json()["id"]
    api("approver").post(reverse("api:rollout-submit", args=[rollout_id]))
    response = api("approver").post(reverse("api:rollout-approve", args=[rollout_id]))
    assert response.status_code == 403 and "creator" in response.json()["detail"]


def test_progress_and_targets(api, fleet, django_assert_max_num_queries):
    rollout_id = _create(api, fleet).json()["id"]
    first = RolloutTarget.objects.filter(rollout_id=rollout_id).order_by("id").first()
    RolloutTarget.objects.filter(pk=first.pk).update(state=TargetState.FAILED, error_class="firmware",
                                                     last_error="ApplyFailed")
    client = api("viewer")
    with django_assert_max_num_queries(8):
        progress = client.get(reverse("api:rollout-progress", args=[rollout_id])).json()
    assert progress["total"] == 8 and progress["failed"] == 1
    assert progress["failures"][0]["reason"] == "ApplyFailed" and progress["failures"][0]["error_class"] == "firmware"
    assert "rack" in progress["waves"][0]["domains"]
    with django_assert_max_num_queries(6):
        targets = client.get(reverse("api:rollout-target-list", args=[rollout_id]), {"state": "failed"}).json()
    assert [t["id"] for t in targets["results"]] == [first.pk] and targets["results"][0]["server"]
    with django_assert_max_num_queries(6):
        listing = client.get(reverse("api:rollout-list")).json()
    assert listing["results"][0]["id"] == rollout_id
