"""The request's state machine through the real services: every legal and illegal transition, the two-person
rules, legal hold, cancel, level below policy, and inventory's GPU lifecycle moved only by the workflow."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from decommission import lifecycle, services
from decommission.models import DecommissionRequest, RequestState
from fleet.models import AuditEvent
from inventory.models import Gpu, GpuState
from inventory.services import gpu_transition
from tests.decommission.decom_factories import found_for, server_with_gpus, walk

pytestmark = pytest.mark.django_db
S = RequestState


def test_the_whole_flow_moves_gpus_through_inventorys_lifecycle(users):
    r = walk("closed", users=users)
    assert r.state == S.CLOSED and r.outcome == "resold" and r.receipt_reference == "COD-77"
    gpus = Gpu.objects.filter(server__in=r.assets.values("server"))
    assert {g.state for g in gpus} == {GpuState.DISPOSED}
    assert services.chain_verify(request=r).ok
    # every state change was audited
    moves = AuditEvent.objects.filter(object_id=str(r.pk), action="transition",
                                      content_type__model="decommissionrequest").count()
    assert moves == 11


# The operator's rules (docs/decommission.md, "State machine"), written out here rather than read from
# decommission.lifecycle: action -> (the states it may be taken from, the state it leads to). "held" is the
# state a legal hold was placed in (release_hold goes back there).
BEFORE_SANITIZING = {"requested", "approved", "drained", "inventoried"}
OPERATOR_RULES: dict[str, tuple[set[str], str]] = {
    "approve": ({"requested"}, "approved"),
    "drain": ({"approved"}, "drained"),
    "inventory": ({"drained"}, "inventoried"),
    "sanitize": ({"inventoried", "sanitize_failed"}, "sanitizing"),  # start, or retry after a failure
    "sanitized": ({"sanitizing"}, "verifying"),  # the workers: every medium done
    "fail": ({"sanitizing"}, "sanitize_failed"),
    "escalate": ({"sanitizing", "sanitize_failed"}, "escalated_destroy"),
    "destroyed": ({"escalated_destroy"}, "verifying"),  # certificate of destruction recorded
    "validate": ({"verifying"}, "validated"),
    "certify": ({"validated"}, "certified"),
    "release": ({"certified"}, "released"),
    "ship": ({"released"}, "in_transit"),
    "dispose": ({"in_transit"}, "disposed"),
    "close": ({"disposed"}, "closed"),
    "hold": (BEFORE_SANITIZING | {"sanitizing", "sanitize_failed"}, "on_hold"),  # any state before verifying
    "release_hold": ({"on_hold"}, "held"),
    "cancel": (BEFORE_SANITIZING | {"on_hold"}, "cancelled"),  # from a hold only if placed before sanitizing
}


def expected(action: str, state: str, held_from: str) -> str | None:
    """The state the rules lead to, or None where they refuse the action."""
    sources, to = OPERATOR_RULES[action]
    if state not in sources:
        return None
    if action == "cancel" and state == "on_hold" and held_from not in BEFORE_SANITIZING:
        return None
    return held_from if to == "held" else to


def test_the_operator_table_names_every_action_and_state_the_code_has():
    assert set(OPERATOR_RULES) == set(lifecycle.ACTIONS)
    named = {s for sources, to in OPERATOR_RULES.values() for s in (*sources, to)} - {"held"}
    assert named == set(S.values)


@pytest.mark.parametrize("held_from", ["approved", "sanitizing"])
def test_every_action_from_every_state_is_allowed_or_refused_as_the_operator_rules_say(held_from):
    for state in S.values:
        for name in OPERATOR_RULES:
            to = expected(name, state, held_from)
            if to is None:
                with pytest.raises(ValidationError):
                    lifecycle.check(name, state, held_from)
            else:
                action = lifecycle.check(name, state, held_from)
                assert lifecycle.target(action, held_from) == to, (name, state)


@pytest.mark.parametrize("state,action", [
    ("requested", "sanitize"), ("certified", "sanitize"), ("requested", "validate"), ("approved", "certify"),
    ("inventoried", "close"), ("verifying", "cancel"),
])
def test_illegal_transitions_through_the_services_write_nothing(users, state, action):
    r = walk(state, users=users)
    before = (r.state, r.version, r.events.count())
    call = {"sanitize": lambda: services.request_start_sanitizing(request=r, actor=users["operator"]),
            "validate": lambda: services.request_validate(request=r, actor=users["approver"]),
            "certify": lambda: services.request_certify(request=r, actor=users["operator"]),
            "close": lambda: services.request_close(request=r, actor=users["approver"]),
            "cancel": lambda: services.request_cancel(request=r, reason="x", actor=users["operator"])}[action]
    with pytest.raises(ValidationError):
        call()
    r.refresh_from_db()
    assert (r.state, r.version, r.events.count()) == before


def test_approver_must_not_be_the_requester(users):
    r = services.request_create(servers=[server_with_gpus()], reason="eol", category="low",
                                destination="internal_reuse", actor=users["approver"])
    with pytest.raises(ValidationError, match="two-person"):
        services.request_approve(request=r, actor=users["approver"])
    services.request_approve(request=r, actor=users["admin"])


def test_validator_must_not_be_the_operator(users):
    r = walk("verifying", users=users)
    with pytest.raises(ValidationError, match="two-person"):
        services.request_validate(request=r, actor=users["operator"])
    services.request_validate(request=r, actor=users["approver"])


def test_legal_hold_blocks_sanitizing_until_released(users):
    r = walk("inventoried", users=users)
    services.request_hold(request=r, reason="Matter 2026-17", actor=users["approver"])
    with pytest.raises(ValidationError, match="legal hold"):
        services.request_start_sanitizing(request=r, actor=users["operator"])
    services.request_release_hold(request=r, actor=users["approver"])
    r.refresh_from_db()
    assert r.state == S.INVENTORIED
    services.request_start_sanitizing(request=r, actor=users["operator"])
    r.refresh_from_db()
    assert r.state == S.SANITIZING


def test_hold_needs_a_reason(users):
    r = walk("approved", users=users)
    with pytest.raises(ValidationError):
        services.request_hold(request=r, reason=" ", actor=users["approver"])


def test_cancel_only_before_sanitizing_and_gpus_go_back_to_drained(users):
    r = walk("drained", users=users)
    gpu = Gpu.objects.filter(server=r.assets.get().server).first()
    assert gpu.state == GpuState.DECOMMISSIONING
    services.request_cancel(request=r, reason="kept", actor=users["operator"])
    gpu.refresh_from_db()
    assert gpu.state == GpuState.DRAINED
    r2 = walk("sanitizing", users=users)
    with pytest.raises(ValidationError):
        services.request_cancel(request=r2, reason="late", actor=users["operator"])


def test_hold_during_sanitizing_cannot_be_cancelled(users):
    r = walk("sanitizing", users=users)
    services.request_hold(request=r, reason="Matter 9", actor=users["approver"])
    with pytest.raises(ValidationError):
        services.request_cancel(request=r, reason="x", actor=users["operator"])


def test_level_below_policy_is_refused_and_writes_nothing(users):
    count = DecommissionRequest.objects.count()
    with pytest.raises(ValidationError) as info:
        services.request_create(servers=[server_with_gpus()], reason="eol", category="high", destination="resale",
                                level="purge", actor=users["operator"])
    assert "below the policy minimum 'destroy'" in str(info.value.message_dict["level"])
    assert DecommissionRequest.objects.count() == count


def test_operator_may_raise_the_level(users):
    r = services.request_create(servers=[server_with_gpus()], reason="eol", category="low",
                                destination="internal_reuse", level="purge", actor=users["operator"])
    assert (r.min_level, r.level) == ("clear", "purge")


def test_downgrade_needs_an_approver_other_than_the_requester_and_a_reason(users):
    r = walk("requested", users=users, category="moderate", destination="resale")
    with pytest.raises(ValidationError):
        services.request_downgrade(request=r, level="clear", reason="", actor=users["approver"])
    with pytest.raises(ValidationError):
        services.request_downgrade(request=r, level="clear", reason="vendor refuses", actor=users["operator"])
    services.request_downgrade(request=r, level="clear", reason="vendor SED keys destroyed", actor=users["approver"])
    r.refresh_from_db()
    assert r.level == "clear" and r.events.filter(step="policy.exception").exists()


def test_a_server_in_an_open_request_cannot_be_requested_twice(users):
    server = server_with_gpus()
    walk("approved", users=users, servers=[server])
    with pytest.raises(ValidationError, match="Already in an open"):
        services.request_create(servers=[server], reason="again", category="low", destination="resale",
                                actor=users["operator"])


def test_gpu_cannot_be_sanitized_or_disposed_outside_the_workflow(users):
    r = walk("drained", users=users)
    gpu = Gpu.objects.filter(server=r.assets.get().server).first()
    for to in (GpuState.SANITIZED,):
        with pytest.raises(ValidationError, match="Only the decommission workflow"):
            gpu_transition(gpu=gpu, to_state=to, actor=users["admin"])


def test_certify_refuses_without_every_medium_done(users):
    r = walk("sanitizing", users=users)
    with pytest.raises(ValidationError):
        services.request_certify(request=r, actor=users["operator"])


def test_a_medium_that_fails_three_times_on_the_device_escalates_to_destroy(users):
    from decommission.models import MediaState, Medium
    from decommission.services.steps import medium_finish

    r = walk("sanitizing", users=users)
    nvme = Medium.objects.filter(request=r, media_type="nvme").first()
    for _ in range(2):
        medium_finish(medium=nvme, state=MediaState.FAILED, device_failure=True, actor=users["operator"],
                      reason="SSTAT 3")
        nvme.refresh_from_db()
        assert nvme.state == MediaState.PENDING
    medium_finish(medium=nvme, state=MediaState.FAILED, device_failure=True, actor=users["operator"], reason="SSTAT 3")
    nvme.refresh_from_db()
    assert nvme.state == MediaState.ESCALATED
    from tests.decommission.decom_factories import finish_all

    finish_all(r, users["operator"])
    r.refresh_from_db()
    assert r.state == S.ESCALATED_DESTROY
    services.request_record_destruction(request=r, reference="COD-9", method="shred 2 mm", facility="ShredCo",
                                        actor=users["operator"])
    r.refresh_from_db()
    assert r.state == S.VERIFYING
    nvme.refresh_from_db()
    assert nvme.state == MediaState.DESTROYED and nvme.level == "destroy"


def test_inventory_refuses_a_duplicate_medium_and_writes_nothing(users):
    r = walk("drained", users=users)
    found = found_for(r)
    asset_id = next(iter(found))
    found[asset_id].append(dict(found[asset_id][0]))
    with pytest.raises(ValidationError, match="twice"):
        services.request_record_inventory(request=r, found=found, actor=users["operator"])
    assert not r.media.exists()


def test_a_second_inventory_of_the_same_request_writes_nothing(users):
    """The tick sends the inventory message again while the first is still reading the BMCs: whichever records
    second finds the media recorded under the request's lock and writes nothing (no IntegrityError, no events)."""
    r = walk("drained", users=users)
    found = found_for(r)
    services.request_record_inventory(request=r, found=found, actor=users["operator"])
    media, events = r.media.count(), r.events.count()
    again = services.request_record_inventory(request=r, found=found, actor=users["operator"])
    assert again.state == "inventoried"
    assert (r.media.count(), r.events.count()) == (media, events) and media > 0
