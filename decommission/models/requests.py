"""Decommission requests, the assets (servers or loose GPUs) they cover, their data-bearing media, and the policy
table that gives the minimum sanitization level (NIST SP 800-88: Clear < Purge < Destroy)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class Category(models.TextChoices):
    """FIPS 199 confidentiality category of the data the media held."""

    LOW = "low", "Low"
    MODERATE = "moderate", "Moderate"
    HIGH = "high", "High"


class Destination(models.TextChoices):
    INTERNAL_REUSE = "internal_reuse", "Internal reuse"
    RESALE = "resale", "Resale"
    VENDOR_RETURN = "vendor_return", "Vendor return"
    RECYCLING = "recycling", "Recycling"


# (leaves the organisation's control?, reused?) per destination: the two questions of NIST's decision flow.
DESTINATION_FACTS: dict[str, tuple[bool, bool]] = {
    Destination.INTERNAL_REUSE: (False, True),
    Destination.RESALE: (True, True),
    Destination.VENDOR_RETURN: (True, True),
    Destination.RECYCLING: (True, False),
}


class Level(models.TextChoices):
    CLEAR = "clear", "Clear"
    PURGE = "purge", "Purge"
    DESTROY = "destroy", "Destroy"


LEVEL_RANK = {Level.CLEAR: 1, Level.PURGE: 2, Level.DESTROY: 3}


class RequestState(models.TextChoices):
    REQUESTED = "requested", "Requested"
    APPROVED = "approved", "Approved"
    DRAINED = "drained", "Drained"
    INVENTORIED = "inventoried", "Inventoried"
    SANITIZING = "sanitizing", "Sanitizing"
    VERIFYING = "verifying", "Verifying"
    VALIDATED = "validated", "Validated"
    CERTIFIED = "certified", "Certified"
    RELEASED = "released", "Released"
    IN_TRANSIT = "in_transit", "In transit"
    DISPOSED = "disposed", "Disposed"
    CLOSED = "closed", "Closed"
    ON_HOLD = "on_hold", "On hold (legal hold)"
    SANITIZE_FAILED = "sanitize_failed", "Sanitize failed"
    ESCALATED_DESTROY = "escalated_destroy", "Escalated to destroy"
    CANCELLED = "cancelled", "Cancelled"


class Outcome(models.TextChoices):
    REUSED = "reused", "Reused internally"
    RESOLD = "resold", "Resold"
    RETURNED = "returned", "Returned to vendor"
    DESTROYED = "destroyed", "Destroyed"
    RECYCLED = "recycled", "Recycled"


class PolicyRule(models.Model):
    """One row of the policy table: the minimum level for (category, destination). Data, editable by admins."""

    category = models.CharField(max_length=10, choices=Category.choices)
    destination = models.CharField(max_length=20, choices=Destination.choices)
    min_level = models.CharField(max_length=10, choices=Level.choices)
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["category", "destination", "id"]
        constraints = [models.UniqueConstraint(fields=["category", "destination"], name="decom_policy_unique")]

    def __str__(self) -> str:
        return f"{self.category} / {self.destination}: {self.min_level}"


class ChainLayout(models.IntegerChoices):
    """REQUEST: one hash chain per request (requests created before migration 0003). PER_ASSET: one chain per
    asset (every event naming the asset or one of its media) plus the request's own chain, which anchors each
    asset chain's head (docs/decommission.md, "Evidence and certificates")."""

    REQUEST = 1, "One chain per request"
    PER_ASSET = 2, "One chain per asset, anchored in the request's chain"


class DecommissionRequest(models.Model):
    reason = models.CharField(max_length=300)
    category = models.CharField(max_length=10, choices=Category.choices)
    destination = models.CharField(max_length=20, choices=Destination.choices)
    min_level = models.CharField(max_length=10, choices=Level.choices, help_text="From the policy table")
    level = models.CharField(max_length=10, choices=Level.choices, help_text="Chosen level; never below the policy")
    state = models.CharField(max_length=20, choices=RequestState.choices, default=RequestState.REQUESTED)
    version = models.PositiveIntegerField(default=0, help_text="Compare-and-set counter of state changes")
    held_from = models.CharField(max_length=20, blank=True, help_text="State to return to when the hold is released")
    hold_reason = models.CharField(max_length=300, blank=True)
    outcome = models.CharField(max_length=12, choices=Outcome.choices, blank=True)
    downgrade_reason = models.CharField(max_length=300, blank=True)
    downgrade_approved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                              on_delete=models.PROTECT, related_name="+")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")
    approved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                    related_name="+")
    operator = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                 related_name="+", help_text="Who started sanitizing (the performer)")
    validated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                     related_name="+")
    location = models.CharField(max_length=120, blank=True)
    receipt_reference = models.CharField(max_length=120, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    state_changed_at = models.DateTimeField(null=True, blank=True)
    chain_layout = models.PositiveSmallIntegerField(
        choices=ChainLayout.choices, default=ChainLayout.PER_ASSET,
        help_text="How its evidence is chained (requests created before migration 0003 keep one chain)")

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=RequestState.values), name="decom_request_state_valid"),
        ]
        indexes = [models.Index(fields=["state", "id"], name="decom_request_state_idx")]

    def __str__(self) -> str:
        return f"DR-{self.pk}"


class AssetState(models.TextChoices):
    PENDING = "pending", "Pending"
    INVENTORIED = "inventoried", "Inventoried"
    SANITIZING = "sanitizing", "Sanitizing"
    SANITIZED = "sanitized", "Sanitized"
    FAILED = "failed", "Failed"
    CERTIFIED = "certified", "Certified"


class Asset(models.Model):
    """A server (with its GPUs) or a loose GPU board in a request. Lease fields fence the worker running it."""

    request = models.ForeignKey(DecommissionRequest, on_delete=models.PROTECT, related_name="assets")
    server = models.ForeignKey("inventory.Server", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    gpu = models.ForeignKey("inventory.Gpu", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    label = models.CharField(max_length=253)
    state = models.CharField(max_length=12, choices=AssetState.choices, default=AssetState.PENDING)
    # Lease fields, as fleet.execution.Leasable declares them (the shared execution model; docs/decommission.md).
    lease_owner = models.CharField(max_length=64, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    fence = models.BigIntegerField(default=0, help_text="Fencing token: bumped whenever a worker takes the row")
    attempts = models.PositiveIntegerField(default=0)
    next_run_at = models.DateTimeField(null=True, blank=True, db_index=True)
    powered_off_at = models.DateTimeField(null=True, blank=True)
    # Standard-evidence execution (docs/decommission.md, "Crash safety"): the system discovered from the BMC's
    # Systems collection, the ForceOff recorded before it is sent, the bounded count of consecutive errors, the
    # boot grace after a reset (on the database's clock), and a hold for a person with the evidence.
    system_uri = models.CharField(max_length=300, blank=True)
    power_off_sent_at = models.DateTimeField(null=True, blank=True, help_text="ForceOff recorded, before sending")
    power_off_sends = models.PositiveSmallIntegerField(default=0)
    errors = models.PositiveSmallIntegerField(default=0, help_text="Consecutive passes that ended in a BMC error")
    boot_grace_until = models.DateTimeField(null=True, blank=True, help_text="The BMC reboots until then")
    hold_reason = models.CharField(max_length=300, blank=True, help_text="Set: a person must decide; not run")
    hold_evidence = models.JSONField(default=dict, blank=True)
    held_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["request", "label", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(server__isnull=False) | Q(gpu__isnull=False), name="decom_asset_kind"),
            models.UniqueConstraint(fields=["request", "server"], name="decom_asset_server_unique",
                                    condition=Q(server__isnull=False)),
            models.UniqueConstraint(fields=["request", "gpu"], name="decom_asset_gpu_unique",
                                    condition=Q(gpu__isnull=False)),
        ]
        indexes = [models.Index(fields=["state", "next_run_at", "id"], name="decom_asset_due_idx")]

    def __str__(self) -> str:
        return self.label


class MediaType(models.TextChoices):
    NVME = "nvme", "NVMe SSD"
    BMC_FLASH = "bmc_flash", "BMC flash (logs, users, certificates)"
    HMC_FLASH = "hmc_flash", "HGX HMC flash (logs, dumps)"
    UEFI_NVRAM = "uefi_nvram", "UEFI NVRAM"
    TPM = "tpm", "TPM 2.0"
    DPU = "dpu", "DPU (eMMC/SSD)"
    GPU_HBM = "gpu_hbm", "GPU HBM (volatile DRAM)"
    GPU_INFOROM = "gpu_inforom", "GPU InfoROM/VBIOS (no workload data)"


class MediaState(models.TextChoices):
    PENDING = "pending", "Pending"
    SENDING = "sending", "Sending (recorded before sending)"
    RUNNING = "running", "Running"
    SANITIZED = "sanitized", "Sanitized"
    RECORDED = "recorded", "Recorded (no workload data, not altered)"
    FAILED = "failed", "Failed"
    ESCALATED = "escalated", "Escalated to destroy"
    DESTROYED = "destroyed", "Destroyed"


class Medium(models.Model):
    """One data-bearing medium, recorded by serial at inventory time, before any wipe."""

    request = models.ForeignKey(DecommissionRequest, on_delete=models.PROTECT, related_name="media")
    asset = models.ForeignKey(Asset, on_delete=models.PROTECT, related_name="media")
    gpu = models.ForeignKey("inventory.Gpu", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    media_type = models.CharField(max_length=12, choices=MediaType.choices)
    serial = models.CharField(max_length=100)
    manufacturer = models.CharField(max_length=100, blank=True)
    model = models.CharField(max_length=100, blank=True)
    source = models.CharField(max_length=40, help_text="Where the record came from: redfish, agent, inventory")
    target_uri = models.CharField(max_length=300, blank=True, help_text="Redfish resource of the medium, if any")
    level = models.CharField(max_length=10, choices=Level.choices, blank=True)
    technique = models.CharField(max_length=120, blank=True)
    tool = models.CharField(max_length=120, blank=True)
    state = models.CharField(max_length=12, choices=MediaState.choices, default=MediaState.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    device_failures = models.PositiveSmallIntegerField(default=0)
    task_uri = models.CharField(max_length=300, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True, help_text="Stamped (database clock) just before the send")
    sends = models.PositiveSmallIntegerField(default=0, help_text="Requests sent for this step (bounded)")
    baseline = models.JSONField(default=dict, blank=True,
                                help_text="The device's reading before the send: what reconciliation compares with")
    unknown_checks = models.PositiveSmallIntegerField(default=0)
    detail = models.CharField(max_length=300, blank=True)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["asset", "media_type", "serial", "id"]
        constraints = [
            models.UniqueConstraint(fields=["request", "media_type", "serial"], name="decom_medium_unique"),
            models.CheckConstraint(condition=Q(state__in=MediaState.values), name="decom_medium_state_valid"),
        ]
        # "Is anything left to run in this request?" is asked under the request's lock each time a server
        # finishes: without it, a scan of all the request's media (23,000 for 1,000 servers) per server.
        indexes = [models.Index(fields=["request", "id"], name="decom_medium_open_idx",
                                condition=~Q(state__in=["sanitized", "recorded", "destroyed"]))]

    def __str__(self) -> str:
        return f"{self.get_media_type_display()} {self.serial}"
