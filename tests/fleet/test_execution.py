"""fleet/execution.py on real PostgreSQL rows (firmware's RolloutTarget is a Leasable): leases with a fencing
token, the fenced record before a side effect, retry policy, time budget and the settle rule."""

import datetime as dt

import pytest
from django.utils import timezone

from firmware.models import RolloutTarget, TargetStep
from fleet import execution as ex
from tests.firmware import rollout_fleet

pytestmark = pytest.mark.django_db


@pytest.fixture
def targets(users, make_user):
    fleet = rollout_fleet.build(servers=4)
    rollout = rollout_fleet.approved(fleet, make_user("operator", "creator"), users["approver"])
    RolloutTarget.objects.filter(rollout=rollout).update(next_run_at=timezone.now() - dt.timedelta(seconds=1))
    return RolloutTarget.objects.filter(rollout=rollout).order_by("id")


def test_lease_due_bumps_the_fence_and_skips_leased_rows(targets):
    first = ex.lease_due(targets, limit=2, seconds=30, owner="w1")
    assert [lease.fence for lease in first] == [1, 1]
    assert {r.lease_owner for r in targets.filter(pk__in=[lease.pk for lease in first])} == {"w1"}
    second = ex.lease_due(targets, limit=10, seconds=30, owner="w2")
    assert {lease.pk for lease in second}.isdisjoint({lease.pk for lease in first})
    assert len(second) == targets.count() - 2
    assert ex.lease_due(targets, limit=10, seconds=30, owner="w3") == []


def test_a_worker_whose_row_was_taken_over_cannot_record_or_send(targets):
    old = ex.lease_due(targets, limit=1, seconds=30, owner="old")[0]
    ex.fenced(old, lambda: None)  # still ours
    new = ex.lease_take(RolloutTarget, old.pk, seconds=30, owner="new")
    assert new.fence == old.fence + 1
    recorded = []
    with pytest.raises(ex.LostLease):
        ex.fenced(old, lambda: recorded.append(TargetStep.objects.create(
            target_id=old.pk, kind="update", idem_key="x", requested_at=timezone.now())))
    assert not TargetStep.objects.filter(idem_key="x").exists()
    with pytest.raises(ex.LostLease):
        ex.lease_renew(old, seconds=30)
    assert not ex.lease_release(old, last_error="stale writer")
    assert ex.fenced(new, lambda: "sent") == "sent"
    ex.lease_renew(new, seconds=60)
    assert ex.lease_release(new, last_error="done")
    row = RolloutTarget.objects.get(pk=old.pk)
    assert (row.last_error, row.lease_owner, row.lease_until) == ("done", "", None)


def test_an_expired_lease_is_taken_again_with_a_new_fence(targets):
    lease = ex.lease_due(targets, limit=1, seconds=30, owner="dead")[0]
    assert ex.lease_due(targets.filter(pk=lease.pk), limit=1, seconds=30, owner="alive") == []
    RolloutTarget.objects.filter(pk=lease.pk).update(lease_until=timezone.now() - dt.timedelta(seconds=1))
    again = ex.lease_due(targets.filter(pk=lease.pk), limit=1, seconds=30, owner="alive")
    assert again and again[0].fence == lease.fence + 1
    with pytest.raises(ex.LostLease):
        ex.fenced(lease)


def test_retry_policy_and_time_budget():
    policy = ex.RetryPolicy(attempts=3, base_seconds=2, factor=3, max_seconds=10)
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [2, 6, 10, 10]
    assert not policy.exhausted(2) and policy.exhausted(3)
    now = timezone.now()
    assert policy.next_run_at(1, now=now, retry_after=30) == now + dt.timedelta(seconds=30)
    assert ex.TimeBudget.for_task(240).seconds == 120
    assert ex.TimeBudget(0).expired() and not ex.TimeBudget(60).expired()


def test_settle_waits_then_reconciles():
    sent = timezone.now()
    calls = []

    def found():
        calls.append(1)
        return ex.Trace.FOUND

    assert ex.settle(sent_at=sent, settle_seconds=10, reconcile=found, now=sent) == ex.Verdict.WAIT
    assert calls == []  # the device is not asked before the settle period is over
    later = sent + dt.timedelta(seconds=11)
    assert ex.settle(sent_at=sent, settle_seconds=10, reconcile=found, now=later) == ex.Verdict.FOUND
    assert ex.settle(sent_at=sent, settle_seconds=10, reconcile=lambda: ex.Trace.ABSENT,
                     now=later) == ex.Verdict.ABSENT
    assert ex.settle(sent_at=sent, settle_seconds=10, reconcile=lambda: ex.Trace.UNKNOWN,
                     now=later) == ex.Verdict.INCONCLUSIVE
