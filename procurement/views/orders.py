"""Purchase orders: list, create, detail (lines with open quantity, deliveries), approve, receive (preview and
confirm, all or nothing, like the imports)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from fleet.roles import APPROVER
from fleet.views import HtmxHttpRequest, operator_required, query_params, role_required, viewer_required
from procurement import selectors
from procurement.forms import LineFormSet, OrderForm, ReceiveForm
from procurement.models import OrderStatus, PurchaseOrder
from procurement.services import orders as services


@viewer_required
@query_params(status=OrderStatus.values)
def home(request: HtmxHttpRequest) -> HttpResponse:
    status = request.GET.get("status", "")
    qs = selectors.order_list()
    if status:
        qs = qs.filter(status=status)
    return render(request, "procurement/home.html", {
        "orders": list(qs[:200]), "status": status, "statuses": OrderStatus.choices,
        "lead_times": selectors.lead_time_observed(), "spend": selectors.spend_by_vendor(),
        "threshold": services.approval_threshold(),
    })


@operator_required
def order_new(request: HtmxHttpRequest) -> HttpResponse:
    form = OrderForm(request.POST or None)
    lines = LineFormSet(request.POST or None, prefix="lines")
    if request.method == "POST" and form.is_valid() and lines.is_valid():
        data = [ln for ln in lines.cleaned_data if ln.get("quantity")]
        if not data:
            form.add_error(None, "An order needs at least one line.")
        else:
            try:
                order = services.order_create(actor=request.user, lines=data, **form.cleaned_data)
            except ValidationError as exc:
                for field, errors in exc.message_dict.items():
                    form.add_error(field if field in form.fields else None, errors)
            else:
                messages.success(request, f"Order {order.reference} created ({order.get_status_display().lower()}).")
                return redirect("procurement-order", pk=order.pk)
    return render(request, "procurement/order_form.html", {"form": form, "lines": lines})


@viewer_required
def order_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    order = get_object_or_404(selectors.order_list(), pk=pk)
    return render(request, "procurement/order_detail.html", {
        "order": order, "lines": selectors.order_lines(order=order),
        "deliveries": selectors.delivery_items(selectors.delivery_list(order=order)),
        "total": services.order_total(order), "approve_refusal": services.order_approve_refusal(order),
        "receive_form": ReceiveForm(order=order) if order.status == OrderStatus.APPROVED else None,
    })


@require_POST
@role_required(APPROVER)
def order_approve(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    order = get_object_or_404(PurchaseOrder, pk=pk)
    try:
        services.order_approve(order=order, actor=request.user)
        messages.success(request, f"Order {order.reference} approved.")
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect("procurement-order", pk=pk)


@require_POST
@role_required(APPROVER)
def order_reject(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    order = get_object_or_404(PurchaseOrder, pk=pk)
    try:
        services.order_reject(order=order, actor=request.user, reason=request.POST.get("reason", ""))
        messages.success(request, f"Order {order.reference} rejected.")
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect("procurement-order", pk=pk)


def _rows_from_hidden(text: str) -> list[services.ReceiptRow]:
    rows = []
    for raw in text.splitlines():
        line, _, rest = raw.partition("\t")
        serial, _, model = rest.partition("\t")
        if line.strip().isdigit():
            rows.append(services.ReceiptRow(int(line), serial, model))
    return rows


@operator_required
def order_receive(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Step 1 (``preview``): parse the serials or the file and check every row, writing nothing. Step 2
    (``confirm``): receive exactly the previewed rows, all or nothing."""
    order = get_object_or_404(selectors.order_list(), pk=pk)
    form = ReceiveForm(request.POST or None, request.FILES or None, order=order)
    ctx = {"order": order, "form": form}
    if request.method == "POST" and request.POST.get("step") == "confirm":
        form.fields["serials"].required = False
        rows = _rows_from_hidden(request.POST.get("rows", ""))
        form.data = form.data.copy()
        form.data["serials"] = "\n".join(r.serial for r in rows)
        if form.is_valid():
            try:
                delivery = services.delivery_receive(
                    order_line=form.cleaned_data["line"], site=form.cleaned_data["site"],
                    received_on=form.cleaned_data["received_on"], rows=rows,
                    source=request.POST.get("source", "serials"), actor=request.user)
            except ValidationError as exc:
                ctx["confirm_errors"] = exc.messages
            else:
                messages.success(request, f"Received {len(rows)} on {order.reference} at {delivery.site}.")
                return redirect("procurement-order", pk=pk)
    elif request.method == "POST" and form.is_valid():
        upload = form.cleaned_data.get("file")
        if upload:
            rows, errors = services.receipt_rows(content=upload.read(), filename=upload.name)
            source = "file"
        else:
            rows, errors = services.receipt_rows(serials=form.cleaned_data["serials"])
            source = "serials"
        preview = services.receipt_preview(order_line=form.cleaned_data["line"], rows=rows, errors=errors)
        ctx |= {"preview": preview, "source": source,
                "hidden_rows": "\n".join(f"{r.line}\t{r.serial}\t{r.model}" for r in rows)}
    return render(request, "procurement/receive.html", ctx)
