"""RMA cases: the list with turnaround per vendor and model, open a case from a GPU, and the case page with its
next steps (ship, replacement received, close)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from fleet.views import HtmxHttpRequest, operator_required, query_params, viewer_required
from inventory.models import Gpu
from procurement import selectors
from procurement.forms import RmaCloseForm, RmaOpenForm, RmaReplaceForm, RmaShipForm
from procurement.models import RmaCase, RmaStatus
from procurement.services import rma as services
from procurement.services.sync import flag_evidence


@viewer_required
@query_params(status={"open", "all", *RmaStatus.values})
def rma_list(request: HtmxHttpRequest) -> HttpResponse:
    status = request.GET.get("status", "open")
    qs = selectors.rma_list()
    if status == "open":
        qs = qs.exclude(status=RmaStatus.CLOSED)
    elif status in RmaStatus.values:
        qs = qs.filter(status=status)
    return render(request, "procurement/rma_list.html", {"cases": list(qs[:300]), "status": status,
                                                          "statuses": RmaStatus.choices,
                                                          "turnaround": selectors.rma_turnaround()})


@operator_required
def rma_new(request: HtmxHttpRequest, gpu_id: int) -> HttpResponse:
    gpu = get_object_or_404(Gpu.objects.select_related("model"), pk=gpu_id)
    form = RmaOpenForm(request.POST or None, initial=flag_evidence(gpu.pk))
    refusal = services.rma_open_refusal(gpu)
    if request.method == "POST" and form.is_valid() and not refusal:
        try:
            case = services.rma_open(gpu=gpu, actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            messages.success(request, f"RMA case opened for {gpu.identity}.")
            return redirect("procurement-rma", pk=case.pk)
    return render(request, "procurement/rma_new.html", {"gpu": gpu, "form": form, "refusal": refusal})


STEPS = {"ship": (RmaShipForm, services.rma_ship, RmaStatus.SHIPPED),
         "replace": (RmaReplaceForm, services.rma_replace, RmaStatus.REPLACED),
         "close": (RmaCloseForm, services.rma_close, RmaStatus.CLOSED)}


@viewer_required
def rma_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    case = get_object_or_404(selectors.rma_list(), pk=pk)
    forms = {step: form_class(prefix=step) for step, (form_class, _, to) in STEPS.items()
             if services.rma_refusal(case, to) is None}
    return render(request, "procurement/rma_detail.html", {"case": case, "forms": forms})


@operator_required
def rma_step(request: HtmxHttpRequest, pk: int, step: str) -> HttpResponse:
    case = get_object_or_404(RmaCase, pk=pk)
    if step not in STEPS or request.method != "POST":
        return redirect("procurement-rma", pk=pk)
    form_class, service, _ = STEPS[step]
    form = form_class(request.POST, prefix=step)
    if form.is_valid():
        try:
            service(case=case, actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            messages.success(request, f"RMA case {case.vendor_case or case.pk}: {step} recorded.")
            return redirect("procurement-rma", pk=pk)
    case = selectors.rma_list().get(pk=pk)
    return render(request, "procurement/rma_detail.html", {"case": case, "forms": {step: form}}, status=400)
