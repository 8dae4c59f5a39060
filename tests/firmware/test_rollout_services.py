"""Rollout services: the state machine, two-person approval, windows and freezes, cancel before and after
activation, rollback, demotion of a failing release."""

import datetime as dt

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from firmware.models import (
    Channel,
    MaintenanceWindow,
    Rollout,
    RolloutState,
    RolloutTarget,
    TargetState,
    TargetStep,
    WindowKind,
)
from firmware.services import catalog, demotion
from firmware.services import rollout as svc
from firmware.services.windows import activation_allowed, activation_allowed_for
from fleet.audit import SYSTEM
from fleet.models import AuditEvent
from tests.firmware import fw_factories, rollout_fleet

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet():
    return rollout_fleet.build(servers=6, per_rack=2)


def test_the_happy_path_of_states_is_audited(fleet, users):
    rollout = svc.rollout_create(name="r1", bundle=fleet.bundle, selector={}, strategy={}, actor=users["operator"])
    assert rollout.state == RolloutState.PLANNED and rollout.plan_hash
    assert rollout.targets.count() == 6 and rollout.waves.first().name == "canary"
    rollout = svc.rollout_submit(rollout=rollout, actor=users["operator"])
    rollout = svc.rollout_approve(rollout=rollout, actor=users["approver"])
    assert rollout.approved_by == users["approver"]
    rollout = svc.rollout_start(rollout=rollout, actor=users["operator"])
    rollout = svc.rollout_pause(rollout=rollout, actor=users["operator"], reason="look at the canary")
    assert (rollout.state, rollout.pause_reason) == (RolloutState.PAUSED, "look at the canary")
    assert svc.rollout_pause(rollout=rollout, actor=users["operator"], reason="again").version == rollout.version
    rollout = svc.rollout_resume(rollout=rollout, actor=users["operator"])
    assert rollout.state == RolloutState.RUNNING and rollout.pause_reason == ""
    steps = list(AuditEvent.objects.filter(object_id=str(rollout.pk), content_type__model="rollout")
                 .order_by("id").values_list("message", flat=True))
    assert steps[:1] == [""] and [m.split()[0] for m in steps[1:]] == [
        "planned", "submit", "approve", "start", "look", "resume"]


@pytest.mark.parametrize("verb", ["start", "approve", "resume"])
def test_illegal_transitions_are_refused(fleet, users, verb):
    rollout = svc.rollout_create(name="r", bundle=fleet.bundle, selector={}, strategy={}, actor=users["operator"])
    action = {"start": lambda: svc.rollout_start(rollout=rollout, actor=users["operator"]),
              "approve": lambda: svc.rollout_approve(rollout=rollout, actor=users["approver"]),
              "resume": lambda: svc.rollout_resume(rollout=rollout, actor=users["operator"])}[verb]
    with pytest.raises(svc.RolloutStateError, match="Cannot"):
        action()
    assert Rollout.objects.get(pk=rollout.pk).state == RolloutState.PLANNED


def test_a_stale_copy_loses_the_compare_and_set(fleet, users):
    rollout = svc.rollout_create(name="r", bundle=fleet.bundle, selector={}, strategy={}, actor=users["operator"])
    stale = Rollout.objects.get(pk=rollout.pk)
    svc.rollout_submit(rollout=rollout, actor=users["operator"])
    stale.state = RolloutState.PLANNED
    with pytest.raises(svc.RolloutConflict):
        svc.rollout_submit(rollout=stale, actor=users["operator"])


def test_two_person_rule(fleet, users, make_user):
    approver2 = make_user("approver", "approver-2")
    own = svc.rollout_create(name="mine", bundle=fleet.bundle, selector={}, strategy={}, actor=users["approver"])
    own = svc.rollout_submit(rollout=own, actor=users["approver"])
    with pytest.raises(ValidationError, match="creator"):
        svc.rollout_approve(rollout=own, actor=users["approver"])
    for role in ("viewer", "operator"):
        with pytest.raises(ValidationError, match="approver"):
            svc.rollout_approve(rollout=own, actor=users[role])
    assert svc.rollout_approve(rollout=own, actor=approver2).state == RolloutState.APPROVED
    with pytest.raises(IntegrityError), transaction.atomic():  # the database refuses it too
        Rollout.objects.filter(pk=own.pk).update(approved_by=users["approver"])


def test_strategy_and_selector_errors_are_field_errors(fleet, users):
    with pytest.raises(ValidationError) as err:
        svc.rollout_create(name="", bundle=fleet.bundle, selector={"state": "sideways"},
                           strategy={"waves": [5, 1]}, actor=users["operator"])
    assert "name" in err.value.message_dict


def _window(**fields):
    return MaintenanceWindow(name=fields.pop("name", "w"), **fields)


def test_windows_and_freezes_freeze_wins():
    now = timezone.now()
    allow = _window(name="allow", pk=1, kind=WindowKind.ALLOW, starts_at=now - dt.timedelta(hours=1),
                    ends_at=now + dt.timedelta(hours=1))
    freeze = _window(name="freeze", pk=2, kind=WindowKind.FREEZE, starts_at=now - dt.timedelta(minutes=5),
                     ends_at=now + dt.timedelta(minutes=5))
    assert activation_allowed(at=now, windows=[allow], require_window=True).allowed
    verdict = activation_allowed(at=now, windows=[allow, freeze], require_window=True)
    assert not verdict.allowed and "freeze" in verdict.reason
    assert not activation_allowed(at=now, windows=[freeze], require_window=False).allowed
    later = now + dt.timedelta(hours=2)
    assert not activation_allowed(at=later, windows=[allow, freeze], require_window=True).allowed
    assert activation_allowed(at=later, windows=[allow, freeze], require_window=False).allowed
    assert not activation_allowed(at=now, windows=[allow], require_window=True, window_ids=[99]).allowed


def test_weekly_window_in_its_time_zone(fleet):
    site = fleet.sites[0]
    # Mondays 22:00-02:00 in New York
    catalog.window_create(name="nightly", actor=SYSTEM, site=site, weekdays="1", start_time=dt.time(22, 0),
                          duration_minutes=240, timezone_name="America/New_York")
    monday_late = dt.datetime(2026, 12, 8, 4, 30, tzinfo=dt.UTC)  # Monday 23:30 in New York
    tuesday_early = dt.datetime(2026, 12, 8, 6, 30, tzinfo=dt.UTC)  # Tuesday 01:30, still in the window
    tuesday_noon = dt.datetime(2026, 12, 8, 17, 0, tzinfo=dt.UTC)
    for at, allowed in ((monday_late, True), (tuesday_early, True), (tuesday_noon, False)):
        verdict = activation_allowed_for(at=at, site_id=site.pk, pool_ids=[], require_window=True)
        assert verdict.allowed is allowed, at
    # another site's window does not apply
    assert not activation_allowed_for(at=monday_late, site_id=None, pool_ids=[], require_window=True).allowed


def _running(fleet, users, **strategy):
    rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"], strategy=strategy)
    return svc.rollout_start(rollout=rollout, actor=users["operator"])


def test_abort_cancels_before_activation_and_lets_activated_finish(fleet, users):
    rollout = _running(fleet, users, canary=False, waves=[100])
    targets = list(rollout.targets.order_by("id"))
    states = [TargetState.PENDING, TargetState.STAGING, TargetState.DRAINING, TargetState.ACTIVATING,
              TargetState.VERIFYING, TargetState.SUCCEEDED]
    for target, state in zip(targets, states, strict=True):
        RolloutTarget.objects.filter(pk=target.pk).update(state=state)
    svc.rollout_abort(rollout=rollout, actor=users["operator"], reason="wrong bundle")
    after = dict(RolloutTarget.objects.filter(rollout=rollout).values_list("id", "state"))
    assert [after[t.pk] for t in targets] == [TargetState.CANCELLED] * 3 + [
        TargetState.ACTIVATING, TargetState.VERIFYING, TargetState.SUCCEEDED]
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.ABORTED
    with pytest.raises(svc.RolloutStateError):
        svc.rollout_resume(rollout=rollout, actor=users["operator"])


def test_rollback_is_a_new_rollout_to_the_previous_bundle_for_activated_servers(fleet, users):
    old = fw_factories.bundle({"gpu_vbios": rollout_fleet.OLD_VBIOS}, name="old")
    fw_factories.baseline(old, users["approver"])
    rollout = _running(fleet, users, canary=False, waves=[100])
    assert rollout.previous_bundle == old
    activated = list(rollout.targets.order_by("id")[:2])
    for target in activated:
        TargetStep.objects.create(target=target, kind="activate", idem_key=f"{target.pk}:0:activate",
                                  requested_at=timezone.now())
    # the fleet's GPUs now report the new version on the activated servers: the rollback is not a no-op
    for target in activated:
        target.server.gpus.update(vbios_version=rollout_fleet.NEW_VBIOS)
    svc.rollout_pause(rollout=rollout, actor=users["operator"], reason="bad batch")
    back = svc.rollout_rollback(rollout=Rollout.objects.get(pk=rollout.pk), actor=users["operator"])
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.ROLLED_BACK
    assert back.rollback_of == rollout and back.bundle == old and back.state == RolloutState.PLANNED
    assert sorted(back.targets.values_list("server_id", flat=True)) == sorted(t.server_id for t in activated)


def test_demotion_revokes_the_release_and_pauses_every_rollout_using_it(fleet, users, settings):
    settings.FLEET_DEMOTE_MIN_FAILURES, settings.FLEET_DEMOTE_FAILURE_RATIO = 2, 0.5
    first = _running(fleet, users)
    second = rollout_fleet.approved(fleet, users["operator"], users["approver"], name="second")
    second = svc.rollout_start(rollout=second, actor=users["operator"])
    other_fleet = rollout_fleet.build(servers=2, new_vbios="96.00.A0.00.01")
    third = svc.rollout_start(rollout=rollout_fleet.approved(other_fleet, users["operator"], users["approver"],
                                                             name="other release"), actor=users["operator"])
    release = rollout_fleet.release()
    demotion.release_record_outcomes(release_ids=[release.pk], succeeded=False)
    assert not demotion.release_check_demotion(release=release)  # 1 failure: below the count
    demotion.release_record_outcomes(release_ids=[release.pk], succeeded=False)
    demotion.release_record_outcomes(release_ids=[release.pk], succeeded=True)
    assert demotion.release_check_demotion(release=release)
    release.refresh_from_db()
    assert release.channel == Channel.REVOKED and "2 firmware failures in 3" in release.revoked_reason
    states = dict(Rollout.objects.values_list("id", "state"))
    assert states[first.pk] == states[second.pk] == RolloutState.PAUSED
    assert states[third.pk] == RolloutState.RUNNING
    assert "revoked" in Rollout.objects.get(pk=first.pk).pause_reason
    with pytest.raises(svc.RolloutStateError, match="revoked"):
        svc.rollout_resume(rollout=Rollout.objects.get(pk=first.pk), actor=users["operator"])
