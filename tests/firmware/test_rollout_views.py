"""Rollout pages: the list, the wizard and its live plan preview, the rollout page with its live partial and its
actions by role and state (a refused transition is a message, never an error page), pinned query counts."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from django.utils import timezone

from firmware.models import Rollout, RolloutState, RolloutTarget, TargetState, TargetStep
from firmware.services import rollout as svc
from fleet.audit import SYSTEM
from fleet.models import AuditEvent
from inventory import services as inventory_services
from tests.firmware import fw_factories, rollout_fleet

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def fleet():
    # 8 servers in 4 racks; two of them already run the new VBIOS (skipped as compliant).
    return rollout_fleet.build(servers=8, per_rack=2, vbios={3: rollout_fleet.NEW_VBIOS, 6: rollout_fleet.NEW_VBIOS})


@pytest.fixture
def client_for(client, users):
    def login(role_or_user):
        user = users[role_or_user] if isinstance(role_or_user, str) else role_or_user
        client.force_login(user)
        return client
    return login


def planned(fleet, creator, **strategy) -> Rollout:
    return svc.rollout_create(name="vbios fra", bundle=fleet.bundle, selector={}, strategy=strategy, actor=creator)


def wizard_data(fleet, **changes) -> dict:
    data = {"name": "vbios 9F", "bundle": fleet.bundle.pk, "canary": "on", "waves": "25, 100", "cap_rack": "1",
            "soak_minutes": "0", "success_threshold": "95", "max_failures": "2", "max_failure_ratio": "0.05",
            "min_sample": "5", "on_failure": "pause", "retry_max_attempts": "3", "retry_backoff": "10, 60",
            "seed": "0"}
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def text(html: str) -> str:
    """The page's text: tags dropped, whitespace folded."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def action(client, rollout, name, htmx=True, **data):
    return client.post(reverse("rollout-action", args=[rollout.pk, name]), data, **(HTMX if htmx else {}))


# --- list -----------------------------------------------------------------------------------------------------

def test_list_filters_by_state_and_pages_by_keyset(fleet, users, client_for, settings):
    settings.FLEET_PAGE_SIZE = 2
    rollouts = [planned(fleet, users["operator"]) for _ in range(3)]
    svc.rollout_submit(rollout=rollouts[0], actor=users["operator"])
    client = client_for("viewer")
    page = client.get(reverse("rollout-list")).content.decode()
    assert page.count('class="badge rs-') == 2 and "Next page" in page
    assert f'href="/firmware/rollouts/{rollouts[2].pk}/"' in page  # newest first
    nxt = client.get(reverse("rollout-list"), {"after": rollouts[1].pk}).content.decode()
    assert f'href="/firmware/rollouts/{rollouts[0].pk}/"' in nxt and "Awaiting approval" in nxt
    only = client.get(reverse("rollout-list"), {"state": "awaiting_approval"}, **HTMX).content.decode()
    assert not only.lstrip().startswith("<!doctype")  # htmx: the table partial only
    assert only.count('class="badge rs-') == 1 and users["operator"].username in only
    assert "New rollout" not in page  # a viewer creates nothing


def test_list_shows_progress_and_approver(fleet, users, client_for):
    rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"])
    rollout = svc.rollout_start(rollout=rollout, actor=users["operator"])
    RolloutTarget.objects.filter(rollout=rollout, wave__index=0).update(state=TargetState.SUCCEEDED)
    done = RolloutTarget.objects.filter(rollout=rollout, state=TargetState.SUCCEEDED).count()
    page = client_for("operator").get(reverse("rollout-list")).content.decode()
    assert f"{done} of 6" in page and users["approver"].username in page and "New rollout" in page


def test_list_query_count_is_pinned(fleet, users, client_for, django_assert_max_num_queries, settings):
    for n in range(12):
        rollout = planned(fleet, users["operator"])
        if n % 3 == 0:
            rollout = svc.rollout_submit(rollout=rollout, actor=users["operator"])
            rollout = svc.rollout_approve(rollout=rollout, actor=users["approver"])
            svc.rollout_start(rollout=rollout, actor=users["operator"])
    client = client_for("viewer")
    client.get(reverse("rollout-list"))  # warm the content type cache
    # session, user, roles, the page of rollouts (bundle, platform, creator, approver joined), done counts of the
    # running ones: the same for 12 rollouts as for 1.
    with django_assert_max_num_queries(5):
        response = client.get(reverse("rollout-list"))
    assert response.status_code == 200 and response.content.decode().count('class="badge rs-running"') == 4


# --- the rollout page -------------------------------------------------------------------------------------------

def test_detail_shows_plan_waves_strategy_and_timeline(fleet, users, client_for):
    rollout = planned(fleet, users["operator"], waves=[50, 100], domain_caps={"rack": 1})
    page = client_for("viewer").get(reverse("rollout-detail", args=[rollout.pk])).content.decode()
    assert rollout.plan_hash in page and 'id="rollout-state">Planned<' in page
    assert "canary" in page and "wave 1" in page and "Rack ≤ 1" in page
    assert "96.00.9F.00.01" in page  # the bundle's release
    timeline = page[page.index('id="timeline"'):]
    assert "planned 6 targets" in timeline
    assert 'hx-trigger="every 2s"' not in page  # a planned rollout does not move by itself
    assert 'id="action-' not in page  # a viewer gets no buttons


def test_detail_query_count_is_pinned(fleet, users, client_for, django_assert_max_num_queries):
    rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"], strategy={"waves": [50, 100]})
    rollout = svc.rollout_start(rollout=rollout, actor=users["operator"])
    RolloutTarget.objects.filter(rollout=rollout).update(state=TargetState.FAILED, error_class="firmware",
                                                         last_error="Update.1.0.ApplyFailed", attempts=1)
    client = client_for("operator")
    client.get(reverse("rollout-detail", args=[rollout.pk]))
    # session, user, roles, rollout (+ bundle, platform, users), bundle items, waves, progress GROUP BY,
    # failures, the targets held for a person (asked only when a target failed), audit events, rollbacks: whatever
    # the number of targets and failures.
    with django_assert_max_num_queries(11):
        page = client.get(reverse("rollout-detail", args=[rollout.pk])).content.decode()
    assert page.count("Update.1.0.ApplyFailed") == 6
    with django_assert_max_num_queries(10):  # + usernames of the audit rows' *_by ids
        live = client.get(reverse("rollout-progress", args=[rollout.pk]), **HTMX)
    assert live.content.decode().lstrip().startswith('<div id="rollout-live"')


def test_live_partial_polls_while_running_and_stops_when_done(fleet, users, client_for):
    rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"])
    rollout = svc.rollout_start(rollout=rollout, actor=users["operator"])
    client = client_for("viewer")
    live = client.get(reverse("rollout-progress", args=[rollout.pk]), **HTMX).content.decode()
    assert 'hx-trigger="every 2s"' in live and "0 of 6 targets" in text(live)
    assert '<section class="panel flush" id="timeline" hx-swap-oob="true">' in live  # the timeline follows
    RolloutTarget.objects.filter(rollout=rollout).update(state=TargetState.SUCCEEDED)
    rollout.refresh_from_db()
    svc.rollout_engine_complete(rollout=rollout)
    live = client.get(reverse("rollout-progress", args=[rollout.pk]), **HTMX).content.decode()
    assert 'hx-trigger' not in live and "6 of 6 targets" in text(live) and 'id="rollout-state">Completed<' in live
    # Without htmx the progress URL is the page itself.
    assert client.get(reverse("rollout-progress", args=[rollout.pk])).url == reverse("rollout-detail",
                                                                                     args=[rollout.pk])


def test_failures_and_per_domain_progress(fleet, users, client_for):
    rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"], strategy={"canary": False,
                                                                                          "waves": [100]})
    rollout = svc.rollout_start(rollout=rollout, actor=users["operator"])
    targets = list(RolloutTarget.objects.filter(rollout=rollout).select_related("server").order_by("id"))
    RolloutTarget.objects.filter(pk=targets[0].pk).update(state=TargetState.FAILED, error_class="infra",
                                                          last_error="BMC unreachable: timed out", attempts=3)
    RolloutTarget.objects.filter(pk=targets[1].pk).update(state=TargetState.SUCCEEDED)
    page = client_for("viewer").get(reverse("rollout-detail", args=[rollout.pk])).content.decode()
    failures = page[page.index('id="failures"'):page.index('id="timeline"')]
    assert targets[0].server.hostname in failures and "BMC unreachable: timed out" in failures
    assert "badge err-infra" in failures and targets[1].server.hostname not in failures
    domains = page[page.index('id="domain-progress"'):page.index('id="failures"')]
    assert "Rack" in domains and "Power feed" in domains and targets[0].domains["rack"] in domains


# --- actions by role and state ------------------------------------------------------------------------------------

def test_viewer_sees_no_buttons_and_cannot_post(fleet, users, client_for):
    rollout = planned(fleet, users["operator"])
    client = client_for("viewer")
    assert client.get(reverse("rollout-create")).status_code == 403
    for name in ("submit", "approve", "abort"):
        assert action(client, rollout, name).status_code == 403
        assert action(client, rollout, name, htmx=False).status_code == 403
    assert client.post(reverse("rollout-preview"), wizard_data(fleet)).status_code == 403
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.PLANNED


def test_operator_cannot_approve(fleet, users, make_user, client_for):
    creator = make_user("operator", username="ops-creator")
    rollout = svc.rollout_submit(rollout=planned(fleet, creator), actor=creator)
    client = client_for("operator")
    page = client.get(reverse("rollout-detail", args=[rollout.pk])).content.decode()
    assert 'id="action-approve"' not in page and 'id="action-abort"' in page
    assert action(client, rollout, "approve").status_code == 403


def test_the_creator_cannot_approve_their_own_rollout(fleet, users, make_user, client_for):
    approver = users["approver"]
    rollout = svc.rollout_submit(rollout=planned(fleet, approver), actor=approver)
    client = client_for(approver)
    page = client.get(reverse("rollout-detail", args=[rollout.pk])).content.decode()
    assert 'id="action-approve"' not in page and 'id="needs-second-person"' in page
    response = action(client, rollout, "approve")  # the button is hidden; the service refuses anyway
    assert response.status_code == 200
    assert "cannot approve it: a second person must" in response.content.decode()
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.AWAITING_APPROVAL and rollout.approved_by is None

    other = make_user("approver", username="approver-two")
    client = client_for(other)
    assert 'id="action-approve"' in client.get(reverse("rollout-detail", args=[rollout.pk])).content.decode()
    response = action(client, rollout, "approve")
    assert 'id="rollout-state">Approved<' in response.content.decode()
    rollout.refresh_from_db()
    assert rollout.approved_by == other


def test_illegal_transition_is_a_message_not_an_error_page(fleet, users, client_for):
    rollout = planned(fleet, users["operator"])
    client = client_for("operator")
    live = action(client, rollout, "start")  # planned, not approved: the button is not even shown
    assert live.status_code == 200 and "Cannot start a rollout that is planned." in live.content.decode()
    page = action(client, rollout, "resume", htmx=False)
    assert page.status_code == 302
    followed = client.get(page.url).content.decode()
    assert "Cannot resume a rollout that is planned." in followed
    assert action(client, rollout, "explode").status_code == 404


def test_operator_runs_pauses_resumes_and_aborts(fleet, users, client_for):
    rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"])
    client = client_for("operator")
    page = client.get(reverse("rollout-detail", args=[rollout.pk])).content.decode()
    assert 'id="action-start"' in page and 'hx-trigger="every 2s"' in page
    assert 'id="rollout-state">Running<' in action(client, rollout, "start").content.decode()
    refused = action(client, rollout, "pause", reason="  ").content.decode()
    assert "Say why the rollout is paused." in refused
    paused = action(client, rollout, "pause", reason="XID 79 on canary").content.decode()
    assert 'id="rollout-state">Paused<' in paused and 'id="pause-reason-text">XID 79 on canary<' in paused
    assert 'id="action-resume"' in paused and 'id="action-pause"' not in paused
    assert 'id="rollout-state">Running<' in action(client, rollout, "resume").content.decode()
    aborted = action(client, rollout, "abort", reason="wrong bundle").content.decode()
    assert 'id="rollout-state">Aborted<' in aborted and 'id="action-abort"' not in aborted
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.ABORTED
    assert AuditEvent.objects.filter(object_id=str(rollout.pk), message="wrong bundle").exists()


def test_rollback_goes_to_the_new_rollout(fleet, users, client_for):
    old = fw_factories.bundle({"gpu_vbios": rollout_fleet.OLD_VBIOS}, name="vbios-old")
    fw_factories.baseline(old, users["approver"])  # what a rollback goes back to
    rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"])
    rollout = svc.rollout_start(rollout=rollout, actor=users["operator"])
    target = RolloutTarget.objects.filter(rollout=rollout).select_related("server").first()
    # The canary was activated: a step was recorded and its GPU now reports the new VBIOS.
    TargetStep.objects.create(target=target, kind="activate", idem_key=f"{target.pk}:activate:1",
                              requested_at=timezone.now())
    inventory_services.firmware_observe(gpu=target.server.gpus.get(), component="gpu_vbios",
                                        version=rollout_fleet.NEW_VBIOS, source="test", seen_at=timezone.now(),
                                        actor=SYSTEM)
    rollout = svc.rollout_pause(rollout=rollout, actor=users["operator"], reason="bad canary")
    client = client_for("operator")
    assert 'id="action-rollback"' in client.get(reverse("rollout-detail", args=[rollout.pk])).content.decode()
    response = action(client, rollout, "rollback")
    child = Rollout.objects.get(rollback_of=rollout)
    assert response.headers["HX-Redirect"] == reverse("rollout-detail", args=[child.pk])
    page = client.get(response.headers["HX-Redirect"]).content.decode()
    assert "Rolled back:" in page and "rollback of" in page and child.bundle == old
    assert "1 server activated by the rolled-back rollout" in text(page)


def test_explicit_servers_are_chosen_servers_unless_a_rollback(fleet, users, client_for):
    """The demo rollout targets servers by id (the selector's reserved ``_server_ids``, as rollbacks do): the
    page says how many were chosen, not that a rolled-back rollout activated them."""
    rollout = svc.rollout_create(name="vbios picked", bundle=fleet.bundle, strategy={}, actor=users["operator"],
                                 selector={"_server_ids": [s.pk for s in fleet.servers[:4]]})
    page = text(client_for("viewer").get(reverse("rollout-detail", args=[rollout.pk])).content.decode())
    assert "Targets 4 chosen servers" in page
    assert "rolled-back" not in page


# --- wizard and preview -------------------------------------------------------------------------------------------

def _hash(html: str) -> str:
    match = re.search(r'data-plan-hash="([0-9a-f]{64})"', html)
    assert match, html
    return match.group(1)


def test_preview_is_a_deterministic_dry_run(fleet, users, client_for):
    client = client_for("operator")
    first = client.post(reverse("rollout-preview"), wizard_data(fleet), **HTMX).content.decode()
    again = client.post(reverse("rollout-preview"), wizard_data(fleet), **HTMX).content.decode()
    assert _hash(first) == _hash(again)
    assert 'id="preview-targets">6<' in first and 'id="preview-skipped">2<' in first
    assert "matches" not in first or "8</strong> server" in first
    assert 'id="preview-canary"' in first and "96.00.89.00.01" in first  # the canary's path: from -> to
    assert not Rollout.objects.exists()  # nothing written
    reseeded = client.post(reverse("rollout-preview"), wizard_data(fleet, seed="7"), **HTMX).content.decode()
    assert _hash(reseeded) != _hash(first)
    # The hash the preview showed is the hash the rollout gets.
    created = client.post(reverse("rollout-create"), wizard_data(fleet))
    assert Rollout.objects.get().plan_hash == _hash(first) and created.status_code == 302


def test_preview_counts_the_selector_matches(fleet, users, client_for):
    client = client_for("operator")
    rack = fleet.servers[0].rack
    html = client.post(reverse("rollout-preview"), wizard_data(fleet, rack=str(rack.pk)), **HTMX).content.decode()
    assert re.search(r"matches <strong>2</strong> GPUs in <strong>2</strong> servers", html)
    assert 'id="preview-targets">2<' in html
    no_bundle = client.post(reverse("rollout-preview"), wizard_data(fleet, bundle=None), **HTMX).content.decode()
    assert 'id="preview-empty"' in no_bundle and "data-plan-hash" not in no_bundle


@pytest.mark.parametrize(("changes", "field", "message"), [
    ({"waves": "50, 10"}, "waves", "must increase"),
    ({"waves": "5, ten"}, "waves", "“ten” is not a number"),
    ({"cap_rack": "0"}, "cap_rack", "greater than or equal to 1"),
    ({"max_failure_ratio": "2"}, "max_failure_ratio", "less than or equal to 1"),
    ({"retry_backoff": "10, -5"}, "retry_backoff", "greater than or equal to 0"),
    ({"soak_minutes": "20000"}, "soak_minutes", "less than or equal to"),
    ({"site": "nowhere"}, "site", "Select a valid choice"),
])
def test_bad_strategy_shows_field_errors_in_the_partial(fleet, users, client_for, changes, field, message):
    html = client_for("operator").post(reverse("rollout-preview"), wizard_data(fleet, **changes),
                                       **HTMX).content.decode()
    block = re.search(rf'<ul class="errorlist field-errors" id="errors-{field}" hx-swap-oob="true">(.*?)</ul>',
                      html, re.S)
    assert block and message in block.group(1), html
    assert "data-plan-hash" not in html
    # Every other field's error list is swapped too (emptied), so a fixed field loses its old error.
    assert 'id="errors-name" hx-swap-oob="true"></ul>' in html


def test_create_plans_and_redirects_or_shows_errors(fleet, users, client_for):
    client = client_for("operator")
    page = client.get(reverse("rollout-create")).content.decode()
    assert 'hx-post="/firmware/rollouts/preview/"' in page and 'hx-trigger="input[!target.dataset.place] changed delay:500ms' in page
    bad = client.post(reverse("rollout-create"), wizard_data(fleet, name="", waves="9, 3"))
    html = bad.content.decode()
    assert bad.status_code == 200 and not Rollout.objects.exists()
    assert re.search(r'id="errors-name"><li>This field is required', html)
    assert re.search(r'id="errors-waves"><li>Wave percentages are cumulative', html)
    preview_only = client.post(reverse("rollout-create"), wizard_data(fleet, _preview="1"))
    assert "data-plan-hash" in preview_only.content.decode() and not Rollout.objects.exists()
    compliant = client.post(reverse("rollout-create"), wizard_data(fleet, vbios=rollout_fleet.NEW_VBIOS))
    assert "Nothing to update" in compliant.content.decode() and not Rollout.objects.exists()
    response = client.post(reverse("rollout-create"), wizard_data(fleet, state=["in_service"]))
    rollout = Rollout.objects.get()
    assert response.url == reverse("rollout-detail", args=[rollout.pk])
    assert rollout.selector == {"state": ["in_service"]} and rollout.strategy["domain_caps"] == {"rack": 1}
    assert rollout.strategy["waves"] == [25.0, 100.0] and rollout.strategy["retry"]["backoff_seconds"] == [10, 60]
    assert rollout.created_by == users["operator"] and rollout.state == RolloutState.PLANNED
    assert "planned: 6 targets" in client.get(response.url).content.decode()
