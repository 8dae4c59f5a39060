"""HTML input of the procurement pages; cleaned data goes to a service."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django import forms
from django.utils import timezone

from inventory.models import GpuModel, ServerPlatform, Site
from procurement.models import Cause, EvidenceKind, OrderLine, SparesPool, Vendor
from procurement.services.forecast import last_scored

DATE = forms.DateInput(attrs={"type": "date"})


class OrderForm(forms.Form):
    vendor = forms.ModelChoiceField(queryset=Vendor.objects.order_by("name"))
    reference = forms.CharField(max_length=60, label="PO number")
    ordered_on = forms.DateField(widget=DATE)
    promised_on = forms.DateField(widget=DATE)
    currency = forms.RegexField(r"^[A-Za-z]{3}$", initial="USD", max_length=3,
                                error_messages={"invalid": "A three-letter ISO code, for example USD."})
    note = forms.CharField(max_length=500, required=False)

    def clean(self):  # type: ignore[no-untyped-def]
        data = super().clean()
        if data.get("ordered_on") and data.get("promised_on") and data["promised_on"] < data["ordered_on"]:
            self.add_error("promised_on", "The promised date is before the order date.")
        return data


class LineForm(forms.Form):
    gpu_model = forms.ModelChoiceField(queryset=GpuModel.objects.order_by("name"), required=False)
    platform = forms.ModelChoiceField(queryset=ServerPlatform.objects.order_by("name"), required=False)
    quantity = forms.IntegerField(min_value=1, required=False)
    unit_price = forms.DecimalField(min_value=Decimal(0), max_digits=12, decimal_places=2, required=False)
    warranty_months = forms.IntegerField(min_value=0, max_value=240, initial=36)
    support_months = forms.IntegerField(min_value=0, max_value=240, initial=60)

    def clean(self):  # type: ignore[no-untyped-def]
        data = super().clean()
        if not (data.get("gpu_model") or data.get("platform") or data.get("quantity")):
            return data  # an empty extra line
        if bool(data.get("gpu_model")) == bool(data.get("platform")):
            self.add_error("gpu_model", "Give a GPU model or a server platform, not both.")
        if not data.get("quantity"):
            self.add_error("quantity", "Required, and positive.")
        if data.get("unit_price") is None:
            self.add_error("unit_price", "Required.")
        return data


LineFormSet = forms.formset_factory(LineForm, extra=3, max_num=20)


class ReceiveForm(forms.Form):
    line = forms.ModelChoiceField(queryset=OrderLine.objects.none(), label="Order line")
    site = forms.ModelChoiceField(queryset=Site.objects.order_by("code"))
    received_on = forms.DateField(widget=DATE, initial=timezone.localdate)
    serials = forms.CharField(widget=forms.Textarea(attrs={"rows": 6, "placeholder": "One serial per line"}),
                              required=False, help_text="Scanned serials, one per line")
    file = forms.FileField(required=False, help_text="Or an nvidia-smi XML/CSV of the burn-in nodes, or a Fleet CSV")

    def __init__(self, *args, order=None, **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        if order is not None:
            self.fields["line"].queryset = order.lines.select_related("gpu_model", "platform")

    def clean(self):  # type: ignore[no-untyped-def]
        data = super().clean()
        if not data.get("serials", "").strip() and not data.get("file"):
            self.add_error("serials", "Scan or paste serials, or upload a file.")
        return data


class RmaOpenForm(forms.Form):
    vendor = forms.ModelChoiceField(queryset=Vendor.objects.order_by("name"), required=False,
                                    help_text="Empty: the vendor the board was bought from")
    cause = forms.ChoiceField(choices=Cause.choices)
    evidence_kind = forms.ChoiceField(choices=EvidenceKind.choices)
    xid = forms.IntegerField(min_value=0, required=False, label="XID")
    evidence = forms.CharField(max_length=500, required=False)
    vendor_case = forms.CharField(max_length=60, required=False, label="Vendor case number")
    opened_on = forms.DateField(widget=DATE, initial=timezone.localdate)


class RmaShipForm(forms.Form):
    shipped_on = forms.DateField(widget=DATE, initial=timezone.localdate)
    carrier = forms.CharField(max_length=40)
    tracking = forms.CharField(max_length=80)
    vendor_case = forms.CharField(max_length=60, required=False, label="Vendor case number")


class RmaReplaceForm(forms.Form):
    serial = forms.CharField(max_length=64, label="Replacement serial")
    received_on = forms.DateField(widget=DATE, initial=timezone.localdate)


class RmaCloseForm(forms.Form):
    closed_on = forms.DateField(widget=DATE, initial=timezone.localdate)
    note = forms.CharField(max_length=500, required=False)


class WarrantyForm(forms.Form):
    start = forms.DateField(widget=DATE, required=False)
    end = forms.DateField(widget=DATE, required=False)
    site = forms.ModelChoiceField(queryset=Site.objects.order_by("code"), required=False, to_field_name="code")
    model = forms.ModelChoiceField(queryset=GpuModel.objects.order_by("name"), required=False)
    what = forms.ChoiceField(choices=[("warranty", "Leaves warranty"), ("support", "Reaches end of support")],
                             required=False)

    def period(self) -> tuple[dt.date, dt.date]:
        today = timezone.localdate()
        data = self.cleaned_data if self.is_valid() else {}
        start = data.get("start") or today
        return start, data.get("end") or start + dt.timedelta(days=180)


class PoolForm(forms.ModelForm):
    class Meta:
        model = SparesPool
        fields = ["name", "sites", "target_fill_rate"]


class BacktestForm(forms.Form):
    """The backtest page's window: its last origin must leave a whole lead time inside the recorded data."""

    date_from = forms.DateField(widget=DATE, label="First origin")
    date_to = forms.DateField(widget=DATE, label="Last origin")
    lead_days = forms.IntegerField(min_value=1, max_value=730, initial=90, label="Lead time (days)")

    def clean(self):  # type: ignore[no-untyped-def]
        data = super().clean()
        if data.get("date_from") and data.get("date_to") and data["date_to"] < data["date_from"]:
            self.add_error("date_to", "Before the first origin.")
        elif data.get("date_to") and data.get("lead_days"):
            last, end = last_scored(lead_days=data["lead_days"])
            if data["date_to"] > last:
                self.add_error("date_to", f"{data['date_to']} runs past the data: the history ends {end}, so with a "
                                          f"{data['lead_days']}-day lead time the last date that can be scored is "
                                          f"{last}.")
        return data
