"""Vendors, purchase orders and their lines, deliveries, and what procurement knows about each board and server
it bought or imported (order line, batch, warranty, home site)."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from inventory.models import Gpu, GpuModel, Server, ServerPlatform, Site


class Vendor(models.Model):
    name = models.CharField(max_length=100, unique=True)
    lead_time_days = models.PositiveIntegerField(null=True, blank=True,
                                                 help_text="Configured lead time; empty: observed from deliveries")
    rma_contact = models.CharField("RMA contact", max_length=200, blank=True)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name


class OrderStatus(models.TextChoices):
    DRAFT = "draft", "Draft"
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    APPROVED = "approved", "Approved"
    CLOSED = "closed", "Closed"
    CANCELLED = "cancelled", "Cancelled"


class PurchaseOrder(models.Model):
    vendor = models.ForeignKey(Vendor, on_delete=models.PROTECT, related_name="orders")
    reference = models.CharField(max_length=60, unique=True, help_text="The PO number")
    ordered_on = models.DateField()
    promised_on = models.DateField(help_text="Delivery date the vendor promised")
    currency = models.CharField(max_length=3, default="USD")
    status = models.CharField(max_length=20, choices=OrderStatus.choices, default=OrderStatus.DRAFT)
    note = models.CharField(max_length=500, blank=True)
    rejection_reason = models.CharField(max_length=500, blank=True,
                                        help_text="Why an approver rejected the order (it is then cancelled)")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    approved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-ordered_on", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(promised_on__gte=F("ordered_on")), name="po_promised_after_ordered"),
            models.CheckConstraint(condition=Q(status__in=OrderStatus.values), name="po_status_valid"),
        ]
        indexes = [models.Index(fields=["vendor", "id"], name="po_vendor_idx"),
                   models.Index(fields=["status", "id"], name="po_status_idx")]

    def __str__(self) -> str:
        return self.reference


class OrderLine(models.Model):
    order = models.ForeignKey(PurchaseOrder, on_delete=models.PROTECT, related_name="lines")
    gpu_model = models.ForeignKey(GpuModel, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    platform = models.ForeignKey(ServerPlatform, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
                                 help_text="A server platform, for a line of servers")
    quantity = models.PositiveIntegerField()
    unit_price = models.DecimalField(max_digits=12, decimal_places=2)
    warranty_months = models.PositiveSmallIntegerField(default=36)
    support_months = models.PositiveSmallIntegerField(default=60, help_text="Months until end of support")

    class Meta:
        ordering = ["order", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(gpu_model__isnull=False) ^ Q(platform__isnull=False),
                                   name="line_gpu_xor_platform"),
            models.CheckConstraint(condition=Q(quantity__gt=0), name="line_quantity_positive"),
            models.CheckConstraint(condition=Q(unit_price__gte=Decimal(0)), name="line_price_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.order.reference}: {self.quantity} x {self.gpu_model or self.platform}"

    @property
    def item(self) -> GpuModel | ServerPlatform:
        return self.gpu_model or self.platform  # type: ignore[return-value]

    @property
    def total(self) -> Decimal:
        return self.unit_price * self.quantity


class Delivery(models.Model):
    order = models.ForeignKey(PurchaseOrder, on_delete=models.PROTECT, related_name="deliveries")
    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="+")
    received_on = models.DateField()
    source = models.CharField(max_length=30, default="serials", help_text="serials, nvidia-smi-xml, csv, ...")
    note = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-received_on", "-id"]
        verbose_name_plural = "deliveries"
        indexes = [models.Index(fields=["order", "id"], name="delivery_order_idx")]

    def __str__(self) -> str:
        return f"{self.order.reference} @ {self.received_on}"


class GpuAsset(models.Model):
    """Procurement's record of one board: where it came from, its batch, warranty, home site and service dates.

    ``site`` is the board's home site (a spare on the shelf has no server, so inventory does not place it).
    ``in_service_on`` / ``removed_on`` bound its exposure for the failure-rate statistics."""

    gpu = models.OneToOneField(Gpu, on_delete=models.PROTECT, related_name="asset")
    model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="+")
    site = models.ForeignKey(Site, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    order_line = models.ForeignKey(OrderLine, null=True, blank=True, on_delete=models.PROTECT, related_name="gpus")
    delivery = models.ForeignKey(Delivery, null=True, blank=True, on_delete=models.PROTECT, related_name="gpus")
    batch = models.CharField(max_length=40, blank=True, help_text="Manufacturing lot")
    in_service_on = models.DateField(null=True, blank=True)
    removed_on = models.DateField(null=True, blank=True)
    warranty_start = models.DateField(null=True, blank=True)
    warranty_end = models.DateField(null=True, blank=True)
    support_end = models.DateField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(warranty_end__isnull=True) | Q(warranty_start__isnull=True)
                                   | Q(warranty_end__gte=F("warranty_start")), name="asset_warranty_order"),
            models.CheckConstraint(condition=Q(removed_on__isnull=True) | Q(in_service_on__isnull=True)
                                   | Q(removed_on__gte=F("in_service_on")), name="asset_removed_after_service"),
        ]
        indexes = [models.Index(fields=["model", "site", "id"], name="asset_model_site_idx"),
                   models.Index(fields=["warranty_end", "id"], name="asset_warranty_idx"),
                   models.Index(fields=["order_line", "id"], name="asset_line_idx")]

    def __str__(self) -> str:
        return f"asset of {self.gpu_id}"


class ServerAsset(models.Model):
    server = models.OneToOneField(Server, on_delete=models.PROTECT, related_name="asset")
    order_line = models.ForeignKey(OrderLine, null=True, blank=True, on_delete=models.PROTECT, related_name="servers")
    delivery = models.ForeignKey(Delivery, null=True, blank=True, on_delete=models.PROTECT, related_name="servers")
    site = models.ForeignKey(Site, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    warranty_start = models.DateField(null=True, blank=True)
    warranty_end = models.DateField(null=True, blank=True)
    support_end = models.DateField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["warranty_end", "id"], name="srvasset_warranty_idx")]

    def __str__(self) -> str:
        return f"asset of server {self.server_id}"
