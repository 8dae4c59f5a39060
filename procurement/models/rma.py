"""Failures (a lifecycle event with a cause class and evidence) and RMA cases with vendors."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q

from inventory.models import Gpu, GpuModel, GpuStateChange, Site
from procurement.models.orders import Vendor


class Cause(models.TextChoices):
    GPU = "gpu", "GPU"
    HBM = "hbm", "HBM"
    NVLINK = "nvlink", "NVLink"
    POWER = "power", "Power"
    THERMAL = "thermal", "Thermal"
    OFF_BUS = "off_bus", "Fell off the bus"
    OTHER = "other", "Other"


class EvidenceKind(models.TextChoices):
    HEALTH_FLAG = "health_flag", "Health flag"
    XID = "xid", "XID"
    REMAP_FAILURE = "remap_failure", "Row-remapping failure"
    NOTE = "note", "Operator note"
    IMPORT = "import", "Imported history"


class Failure(models.Model):
    """One failure of one board: when, why, on what evidence. Site, model and batch are copied from the board's
    asset at the time (the forecast reads them in one scan)."""

    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="failures")
    model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="+")
    site = models.ForeignKey(Site, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    batch = models.CharField(max_length=40, blank=True)
    failed_on = models.DateField()
    cause = models.CharField(max_length=12, choices=Cause.choices, default=Cause.OTHER)
    evidence_kind = models.CharField(max_length=16, choices=EvidenceKind.choices, default=EvidenceKind.NOTE)
    xid = models.PositiveIntegerField("XID", null=True, blank=True)
    evidence = models.CharField(max_length=500, blank=True)
    state_change = models.ForeignKey(GpuStateChange, null=True, blank=True, on_delete=models.PROTECT,
                                     related_name="+", help_text="The lifecycle event (to rma) it was recorded with")
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-failed_on", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["gpu", "failed_on"], name="failure_unique_gpu_day"),
            models.CheckConstraint(condition=Q(cause__in=Cause.values), name="failure_cause_valid"),
        ]
        indexes = [models.Index(fields=["model", "failed_on"], name="failure_model_day_idx"),
                   models.Index(fields=["failed_on", "id"], name="failure_day_idx")]

    def __str__(self) -> str:
        return f"{self.gpu_id} failed {self.failed_on} ({self.cause})"


class RmaStatus(models.TextChoices):
    OPEN = "open", "Open"
    SHIPPED = "shipped", "Shipped"
    REPLACED = "replaced", "Replacement received"
    CLOSED = "closed", "Closed"


class RmaCase(models.Model):
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="rma_cases")
    vendor = models.ForeignKey(Vendor, on_delete=models.PROTECT, related_name="rma_cases")
    failure = models.ForeignKey(Failure, null=True, blank=True, on_delete=models.PROTECT, related_name="rma_cases")
    status = models.CharField(max_length=10, choices=RmaStatus.choices, default=RmaStatus.OPEN)
    vendor_case = models.CharField("Vendor case number", max_length=60, blank=True)
    opened_on = models.DateField()
    shipped_on = models.DateField(null=True, blank=True)
    carrier = models.CharField(max_length=40, blank=True)
    tracking = models.CharField(max_length=80, blank=True)
    replacement = models.ForeignKey(Gpu, null=True, blank=True, on_delete=models.PROTECT, related_name="replaces")
    replaced_on = models.DateField(null=True, blank=True)
    closed_on = models.DateField(null=True, blank=True)
    note = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-opened_on", "-id"]
        verbose_name = "RMA case"
        constraints = [
            models.CheckConstraint(condition=Q(status__in=RmaStatus.values), name="rma_status_valid"),
            models.CheckConstraint(condition=Q(shipped_on__isnull=True) | Q(shipped_on__gte=F("opened_on")),
                                   name="rma_shipped_after_opened"),
            models.UniqueConstraint(fields=["gpu"], condition=~Q(status="closed"), name="rma_one_open_per_gpu"),
        ]
        indexes = [models.Index(fields=["status", "id"], name="rma_status_idx"),
                   models.Index(fields=["vendor", "id"], name="rma_vendor_idx")]

    def __str__(self) -> str:
        return f"RMA {self.vendor_case or self.pk} ({self.gpu_id})"
