"""What the workload scheduler says about each server's node (refreshed by beat), and Fleet's drains of nodes.

A ``SchedulerHold`` is one reason Fleet has a node out of service (a rollout target, a flagged GPU, a
decommission): recorded (``requested``) and committed BEFORE the drain is sent, ``held`` once the scheduler shows
it, and ended exactly once: ``releasing`` is recorded before the resume is sent, ``released`` after (or ``left``
when the node is not Fleet's to resume: someone else's reason, or another Fleet hold still open). A hold that
found the node already out for someone else's reason is ``foreign``: never drained, never resumed by Fleet."""

from __future__ import annotations

from django.db import models


class SchedulerNode(models.Model):
    name = models.CharField(max_length=253, unique=True)
    server = models.OneToOneField("inventory.Server", null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="scheduler_state")
    state = models.CharField(max_length=20, default="unknown")  # display state (inventory.scheduler.base)
    reason = models.CharField(max_length=500, blank=True)
    reason_user = models.CharField(max_length=100, blank=True)
    reason_at = models.DateTimeField(null=True, blank=True)
    drained_by = models.CharField(max_length=10, blank=True)  # "fleet", "other" or ""
    partitions = models.CharField(max_length=500, blank=True)  # ",batch,gpu," (a substring filter per partition)
    job_ids = models.JSONField(default=list, blank=True)
    job_count = models.PositiveIntegerField(default=0)
    refreshed_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]
        indexes = [models.Index(fields=["drained_by", "id"], name="schednode_drained_by_idx"),
                   models.Index(fields=["state", "id"], name="schednode_state_idx")]

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"

    @property
    def partition_list(self) -> list[str]:
        return [p for p in self.partitions.split(",") if p]


class HoldState(models.TextChoices):
    REQUESTED = "requested", "Drain recorded"
    HELD = "held", "Drained by Fleet"
    FOREIGN = "foreign", "Out of service for someone else"
    RELEASING = "releasing", "Resume recorded"
    RELEASED = "released", "Resumed"
    LEFT = "left", "Left out of service"


HOLD_OPEN = (HoldState.REQUESTED, HoldState.HELD, HoldState.FOREIGN, HoldState.RELEASING)
HOLD_DRAINING = (HoldState.REQUESTED, HoldState.HELD, HoldState.RELEASING)  # Fleet has (or asked for) the drain


class SchedulerHold(models.Model):
    key = models.CharField(max_length=100, unique=True)  # "rollout-target:12:<attempt>", "gpu:7", ...
    owner = models.CharField(max_length=30, blank=True)  # "rollout-target", "gpu", "decommission-asset"
    owner_id = models.BigIntegerField(null=True, blank=True)  # the owner row's id (counted in SQL by the caps)
    server = models.ForeignKey("inventory.Server", on_delete=models.CASCADE, related_name="scheduler_holds")
    node = models.CharField(max_length=253)
    reason = models.CharField(max_length=500)  # the reason Fleet sets (starts with the Fleet prefix)
    partitions = models.CharField(max_length=500, blank=True)
    state = models.CharField(max_length=12, choices=HoldState.choices, default=HoldState.REQUESTED)
    note = models.CharField(max_length=500, blank=True)  # the last thing learned (foreign reason, why left)
    requested_at = models.DateTimeField()
    drained_at = models.DateTimeField(null=True, blank=True)
    requeued = models.JSONField(default=list, blank=True)  # job ids sent back to the queue (recorded first)
    release_requested_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["state", "id"], name="schedhold_state_idx"),
                   models.Index(fields=["node", "state"], name="schedhold_node_state_idx"),
                   models.Index(fields=["owner", "state", "owner_id"], name="schedhold_owner_idx")]

    def __str__(self) -> str:
        return f"{self.key} on {self.node} ({self.state})"


class ReservationState(models.TextChoices):
    REQUESTED = "requested", "Reservation recorded"
    CREATED = "created", "Reserved in the scheduler"
    ENDING = "ending", "Deletion recorded"
    ENDED = "ended", "Deleted"


RESERVATION_OPEN = (ReservationState.REQUESTED, ReservationState.CREATED, ReservationState.ENDING)


class SchedulerReservation(models.Model):
    """A maintenance reservation Fleet asked the scheduler for (a rollout wave's window): recorded before it is
    created, deleted exactly once when its owner ends. Its nodes in the scheduler's "reserved" state are Fleet's,
    not someone else's (inventory.scheduler.reservations)."""

    name = models.CharField(max_length=100, unique=True)  # the scheduler's name: "fleet-r12-w3-1"
    owner = models.CharField(max_length=30)  # "rollout-wave"
    owner_id = models.BigIntegerField()
    nodes = models.JSONField(default=list)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    state = models.CharField(max_length=10, choices=ReservationState.choices, default=ReservationState.REQUESTED)
    note = models.CharField(max_length=500, blank=True)
    requested_at = models.DateTimeField()
    created_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["owner", "state", "owner_id"], name="schedresv_owner_idx"),
                   models.Index(fields=["state", "id"], name="schedresv_state_idx")]

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"
