"""Orders and deliveries: create and approve purchase orders, receive deliveries (GPUs and servers created in
``received``, linked to their order line, all or nothing), warranty terms per board."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count

from fleet.audit import Actor, audit_write, audited_create, audited_update
from fleet.models import AuditAction
from inventory import importers
from inventory import services as inventory_services
from inventory.models import Gpu, GpuState, Server, Site
from procurement.models import Delivery, GpuAsset, OrderLine, OrderStatus, PurchaseOrder, ServerAsset


def add_months(d: dt.date, months: int) -> dt.date:
    y, m = divmod(d.month - 1 + months, 12)
    year, month = d.year + y, m + 1
    for day in (d.day, 30, 29, 28):
        try:
            return dt.date(year, month, day)
        except ValueError:
            continue
    raise ValueError(d)


def approval_threshold() -> Decimal:
    return Decimal(str(getattr(settings, "PROCUREMENT_APPROVAL_THRESHOLD", 1_000_000)))


def order_total(order: PurchaseOrder) -> Decimal:
    return sum((line.total for line in order.lines.all()), Decimal(0))


@transaction.atomic
def order_create(*, vendor: Any, reference: str, ordered_on: dt.date, promised_on: dt.date, currency: str = "USD",
                 note: str = "", lines: Sequence[dict[str, Any]], actor: Actor) -> PurchaseOrder:
    """A purchase order with its lines. Above the approval threshold it waits for an approver; below, it is
    approved at once. Each line names a GPU model or a server platform, a positive quantity and a price."""
    errors: dict[str, list[str]] = {}
    if promised_on < ordered_on:
        errors["promised_on"] = ["The promised date is before the order date."]
    if not lines:
        errors["lines"] = ["An order needs at least one line."]
    for i, line in enumerate(lines, start=1):
        if bool(line.get("gpu_model")) == bool(line.get("platform")):
            errors.setdefault("lines", []).append(f"Line {i}: give a GPU model or a server platform, not both.")
        if int(line.get("quantity") or 0) <= 0:
            errors.setdefault("lines", []).append(f"Line {i}: quantity must be positive.")
        if Decimal(str(line.get("unit_price", 0))) < 0:
            errors.setdefault("lines", []).append(f"Line {i}: unit price must not be negative.")
    if errors:
        raise ValidationError(errors)
    created_by = actor if getattr(actor, "is_authenticated", False) else None
    order = audited_create(model_class=PurchaseOrder, actor=actor, vendor=vendor, reference=reference.strip(),
                           ordered_on=ordered_on, promised_on=promised_on, currency=currency.upper(), note=note,
                           created_by=created_by)
    for line in lines:
        audited_create(model_class=OrderLine, actor=actor, order=order, **line)
    status = OrderStatus.AWAITING_APPROVAL if order_total(order) > approval_threshold() else OrderStatus.APPROVED
    audited_update(obj=order, actor=actor, status=status)
    return order  # type: ignore[return-value]


def order_approve_refusal(order: PurchaseOrder) -> str | None:
    if order.status != OrderStatus.AWAITING_APPROVAL:
        return f"Only an order awaiting approval can be approved; this one is {order.get_status_display().lower()}."
    return None


@transaction.atomic
def order_approve(*, order: PurchaseOrder, actor: Actor) -> PurchaseOrder:
    locked = PurchaseOrder.objects.select_for_update().get(pk=order.pk)
    refusal = order_approve_refusal(locked)
    if refusal:
        raise ValidationError({"status": refusal})
    audited_update(obj=locked, actor=actor, status=OrderStatus.APPROVED,
                   approved_by=actor if getattr(actor, "is_authenticated", False) else None)
    order.status, order.approved_by_id = locked.status, locked.approved_by_id
    return locked


@transaction.atomic
def order_reject(*, order: PurchaseOrder, actor: Actor, reason: str) -> PurchaseOrder:
    """Reject an order awaiting approval, with the approver's reason: it is cancelled and says why."""
    reason = reason.strip()
    if not reason:
        raise ValidationError({"reason": "Say why the order is rejected: the buyer reads it."})
    locked = PurchaseOrder.objects.select_for_update().get(pk=order.pk)
    if locked.status != OrderStatus.AWAITING_APPROVAL:
        raise ValidationError({"status": "Only an order awaiting approval can be rejected; this one is "
                                         f"{locked.get_status_display().lower()}."})
    audited_update(obj=locked, actor=actor, status=OrderStatus.CANCELLED, rejection_reason=reason[:500])
    order.status, order.rejection_reason = locked.status, locked.rejection_reason
    return locked


def received_counts(order: PurchaseOrder) -> dict[int, int]:
    """Received quantity per line id (GPUs and servers)."""
    gpus = dict(GpuAsset.objects.filter(order_line__order=order).values("order_line").annotate(n=Count("id"))
                .values_list("order_line", "n"))
    servers = dict(ServerAsset.objects.filter(order_line__order=order).values("order_line")
                   .annotate(n=Count("id")).values_list("order_line", "n"))
    return {line_id: gpus.get(line_id, 0) + servers.get(line_id, 0)
            for line_id in order.lines.values_list("id", flat=True)}


# --- receiving ------------------------------------------------------------------------------------------

@dataclass
class ReceiptRow:
    line: int  # line in the pasted list or the file
    serial: str
    model: str = ""  # as the file reports it
    error: str = ""


@dataclass
class ReceiptPreview:
    order_line: OrderLine
    rows: list[ReceiptRow] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # file-level

    @property
    def ok(self) -> bool:
        return not self.errors and bool(self.rows) and not any(r.error for r in self.rows)

    @property
    def row_errors(self) -> list[str]:
        return [f"line {r.line}: {r.error}" for r in self.rows if r.error] + self.errors


def receipt_rows(*, serials: str = "", content: bytes | None = None, filename: str = "") -> tuple[list[ReceiptRow],
                                                                                                   list[str]]:
    """Rows from a scanned serial list (one per line) or an importer file (nvidia-smi XML/CSV, Fleet CSV)."""
    if content is not None:
        parsed = importers.parse(content, filename=filename or "upload")
        errors = [str(e) for e in parsed.errors]
        return [ReceiptRow(r.line, r.serial or r.serial_raw or "", r.product_name or "") for r in parsed.records], errors
    rows = [ReceiptRow(i, text.strip().split(",")[0].strip()) for i, text in enumerate(serials.splitlines(), start=1)
            if text.strip()]
    return rows, []


def receipt_preview(*, order_line: OrderLine, rows: list[ReceiptRow], errors: Sequence[str] = ()) -> ReceiptPreview:
    """Check every row: serial given, not twice in the list, not already in the fleet, model as on the line,
    not more than the line's open quantity. Writes nothing."""
    preview = ReceiptPreview(order_line, rows, list(errors))
    order = order_line.order
    if order.status not in (OrderStatus.APPROVED,):
        preview.errors.append(f"Order {order.reference} is {order.get_status_display().lower()}: "
                              "only an approved order can be received.")
    open_qty = order_line.quantity - received_counts(order).get(order_line.pk, 0)
    serials = [r.serial for r in rows if r.serial]
    if order_line.gpu_model_id:
        taken = set(Gpu.objects.filter(serial__in=serials).values_list("serial", flat=True))
    else:
        taken = set(Server.objects.filter(serial__in=serials).values_list("serial", flat=True))
    seen: set[str] = set()
    accepted = 0
    expected = order_line.item.name
    for row in rows:
        if not row.serial:
            row.error = "serial: empty or masked; a received board needs its serial."
        elif row.serial in seen:
            row.error = f"serial: {row.serial} appears twice in this delivery."
        elif row.serial in taken:
            row.error = f"serial: {row.serial} is already in the fleet."
        elif row.model and order_line.gpu_model_id and row.model != expected:
            row.error = f"model: {row.model} does not match the order line ({expected})."
        elif accepted >= open_qty:
            row.error = (f"quantity: over-delivery; line {order_line} has {open_qty} open "
                         f"({order_line.quantity} ordered).")
        else:
            accepted += 1
        seen.add(row.serial)
    if not rows and not preview.errors:
        preview.errors.append("No serials: scan or paste one serial per line, or upload a file.")
    return preview


@transaction.atomic
def delivery_receive(*, order_line: OrderLine, site: Site, received_on: dt.date, rows: list[ReceiptRow],
                     source: str = "serials", note: str = "", actor: Actor) -> Delivery:
    """Receive a delivery against one order line: every row valid, or nothing is written (ValidationError with
    the row errors). GPUs (or servers) are created in ``received`` with warranty from the line's terms."""
    # One receipt per order at a time, checked against the order as it is now (not a caller's stale copy).
    order_line.order = PurchaseOrder.objects.select_for_update().get(pk=order_line.order_id)
    if received_on < order_line.order.ordered_on:
        raise ValidationError({"received_on": "The delivery date is before the order date."})
    preview = receipt_preview(order_line=order_line, rows=rows)
    if not preview.ok:
        raise ValidationError({"rows": preview.row_errors or ["Nothing to receive."]})
    delivery = audited_create(model_class=Delivery, actor=actor, order=order_line.order, site=site,
                              received_on=received_on, source=source, note=note)
    warranty_end = add_months(received_on, order_line.warranty_months)
    support_end = add_months(received_on, order_line.support_months)
    reason = f"received on {order_line.order.reference}"
    for row in rows:
        if order_line.gpu_model_id:
            gpu = inventory_services.gpu_create(actor=actor, serial=row.serial, model=order_line.gpu_model,
                                                state=GpuState.RECEIVED, warranty_end=warranty_end, reason=reason,
                                                site=site)
            GpuAsset.objects.create(gpu=gpu, model=order_line.gpu_model, site=site, order_line=order_line,
                                    delivery=delivery, warranty_start=received_on, warranty_end=warranty_end,
                                    support_end=support_end)
        else:
            server = inventory_services.record_create(model_class=Server, actor=actor,
                                                      hostname=f"rcv-{row.serial.lower()}", serial=row.serial,
                                                      platform=order_line.platform)
            ServerAsset.objects.create(server=server, order_line=order_line, delivery=delivery, site=site,
                                       warranty_start=received_on, warranty_end=warranty_end,
                                       support_end=support_end)
    counts = received_counts(order_line.order)
    if all(counts[line.pk] >= line.quantity for line in order_line.order.lines.all()):
        audited_update(obj=order_line.order, actor=actor, status=OrderStatus.CLOSED)
    audit_write(actor=actor, action=AuditAction.UPDATE, obj=delivery,
                changes={"received": [0, len(rows)]}, message=f"{len(rows)} received on line {order_line.pk}")
    return delivery  # type: ignore[return-value]
