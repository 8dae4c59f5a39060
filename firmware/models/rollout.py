"""Staged rollouts. PostgreSQL holds the state machine: a beat tick picks due targets with
``SELECT ... FOR UPDATE SKIP LOCKED`` and each step advances one target with a compare-and-set on
(state, version), so a redelivered or stale Celery task does nothing (docs/firmware.md)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from firmware.models.catalog import Bundle, Release
from fleet.execution import Leasable
from inventory.models import Server, Site


class RolloutState(models.TextChoices):
    DRAFT = "draft", "Draft"
    PLANNED = "planned", "Planned"
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    APPROVED = "approved", "Approved"
    RUNNING = "running", "Running"
    PAUSED = "paused", "Paused"
    COMPLETED = "completed", "Completed"
    COMPLETED_WITH_EXCEPTIONS = "completed_exc", "Completed with exceptions"
    ABORTED = "aborted", "Aborted"
    ROLLED_BACK = "rolled_back", "Rolled back"


class Rollout(models.Model):
    name = models.CharField(max_length=120)
    bundle = models.ForeignKey(Bundle, on_delete=models.PROTECT, related_name="rollouts")
    previous_bundle = models.ForeignKey(Bundle, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
                                        help_text="What a rollback goes back to")
    rollback_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT,
                                    related_name="rollbacks")
    selector = models.JSONField(default=dict, blank=True, help_text="Inventory list filters (query parameters)")
    strategy = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=20, choices=RolloutState.choices, default=RolloutState.DRAFT)
    pause_reason = models.TextField(blank=True)
    stop_requested = models.BooleanField(default=False, help_text="Finish what was activated, start nothing new")
    version = models.PositiveIntegerField(default=0)
    plan_hash = models.CharField(max_length=64, blank=True)
    plan_summary = models.JSONField(default=dict, blank=True,
                                    help_text="Skipped (already compliant) servers, upgrade paths, totals")
    current_wave = models.PositiveSmallIntegerField(default=0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    approved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                    related_name="+")
    approved_at = models.DateTimeField(null=True, blank=True)
    paused_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=RolloutState.values), name="rollout_state_valid"),
            models.CheckConstraint(condition=Q(approved_by__isnull=True) | ~Q(approved_by=models.F("created_by")),
                                   name="rollout_two_person_rule"),
        ]
        indexes = [models.Index(fields=["state", "id"], name="rollout_state_idx")]

    def __str__(self) -> str:
        return self.name


class WaveState(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SOAKING = "soaking", "Soaking"
    PASSED = "passed", "Passed"
    FAILED = "failed", "Failed"


class RolloutWave(models.Model):
    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="waves")
    index = models.PositiveSmallIntegerField(help_text="0 = canary")
    name = models.CharField(max_length=40)
    state = models.CharField(max_length=10, choices=WaveState.choices, default=WaveState.PENDING)
    planned = models.PositiveIntegerField(default=0)
    per_domain = models.JSONField(default=dict, blank=True, help_text="Counts per failure domain in this wave")
    started_at = models.DateTimeField(null=True, blank=True)
    soak_until = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    gate_result = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["rollout", "index"]
        constraints = [models.UniqueConstraint(fields=["rollout", "index"], name="wave_unique_index")]

    def __str__(self) -> str:
        return f"{self.rollout} / {self.name}"


class TargetState(models.TextChoices):
    PENDING = "pending", "Pending"
    PRECHECK = "precheck", "Precheck"
    SKIPPED = "skipped", "Skipped (already compliant)"
    STAGING = "staging", "Staging"
    DRAINING = "draining", "Draining"
    ACTIVATING = "activating", "Activating"
    VERIFYING = "verifying", "Verifying"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    ROLLED_BACK = "rolled_back", "Rolled back"


class ErrorClass(models.TextChoices):
    INFRA = "infra", "Infrastructure (BMC unreachable, timeout, 5xx)"
    FIRMWARE = "firmware", "Firmware (update or verification failed)"
    INCONCLUSIVE = "inconclusive", "Inconclusive (a task or a check did not finish in time)"


# Target states a target leaves only through the engine; before ACTIVATING a target may still be cancelled.
TARGET_CANCELLABLE = (TargetState.PENDING, TargetState.PRECHECK, TargetState.STAGING, TargetState.DRAINING)
TARGET_PAST_NO_RETURN = (TargetState.ACTIVATING, TargetState.VERIFYING)
TARGET_IN_FLIGHT = (TargetState.PRECHECK, TargetState.STAGING, TargetState.DRAINING, *TARGET_PAST_NO_RETURN)
TARGET_DONE = (TargetState.SUCCEEDED, TargetState.SKIPPED, TargetState.FAILED, TargetState.CANCELLED,
               TargetState.ROLLED_BACK)


class RolloutTarget(Leasable):
    """One unit of a rollout: a server (all its targeted components). Servers of one NVLink domain share a
    ``unit_key`` and always sit in the same wave."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="targets")
    wave = models.ForeignKey(RolloutWave, on_delete=models.CASCADE, related_name="targets")
    server = models.ForeignKey(Server, on_delete=models.PROTECT, related_name="rollout_targets")
    unit_key = models.CharField(max_length=60)
    site = models.ForeignKey(Site, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    bmc_class = models.CharField(max_length=100, blank=True, help_text="Platform: concurrency is capped per class")
    domains = models.JSONField(default=dict, blank=True, help_text="Failure domains (rack, row, feed, NVLink)")
    upgrade_path = models.CharField(max_length=64, blank=True, help_text="Hash of platform x firmware tuple x site")
    state = models.CharField(max_length=12, choices=TargetState.choices, default=TargetState.PENDING)
    version = models.PositiveIntegerField(default=0)
    item_index = models.PositiveSmallIntegerField(default=0, help_text="Bundle item being applied")
    deadline_at = models.DateTimeField(null=True, blank=True, help_text="The current state gives up after this")
    work = models.JSONField(default=list, blank=True, help_text="Bundle items this server needs (from precheck)")
    bmc_task_uri = models.CharField(max_length=300, blank=True)
    last_error = models.TextField(blank=True)
    error_class = models.CharField(max_length=12, choices=ErrorClass.choices, blank=True)
    before = models.JSONField(default=dict, blank=True, help_text="Component versions before the update")
    after = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["rollout", "wave", "id"]
        constraints = [
            models.UniqueConstraint(fields=["rollout", "server"], name="target_unique_server"),
            models.CheckConstraint(condition=Q(state__in=TargetState.values), name="target_state_valid"),
        ]
        indexes = [
            models.Index(fields=["state", "next_run_at"], name="target_due_idx"),
            models.Index(fields=["rollout", "state"], name="target_rollout_state_idx"),
            models.Index(fields=["wave", "state"], name="target_wave_state_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.rollout} / {self.server}"


class TargetStep(models.Model):
    """One side effect sent to a BMC, recorded BEFORE it is sent (idempotency key), so a redelivered step
    reconciles with the BMC instead of sending a second update for the same release."""

    target = models.ForeignKey(RolloutTarget, on_delete=models.CASCADE, related_name="steps")
    release = models.ForeignKey(Release, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=16, help_text="update, reset, verify, ...")
    idem_key = models.CharField(max_length=120, unique=True)
    requested_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    bmc_task_uri = models.CharField(max_length=300, blank=True)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    outcome = models.CharField(max_length=20, blank=True)
    messages = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["target", "id"]

    def __str__(self) -> str:
        return self.idem_key
