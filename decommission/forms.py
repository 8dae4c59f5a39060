"""HTML input of the decommission pages; cleaned data goes to a service."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.urls import reverse

from decommission.models import Category, CustodyKind, Destination, Level, Outcome, Processor
from inventory.models import Gpu, GpuModel, Rack, Server


class RequestForm(forms.Form):
    servers = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False,
                              help_text="Hostnames or serials, one per line or separated by spaces")
    rack = forms.ModelChoiceField(queryset=Rack.objects.order_by("name"), required=False,
                                  empty_label="(no whole rack)", help_text="Bulk: every server in this rack")
    gpu_model = forms.ModelChoiceField(queryset=GpuModel.objects.order_by("name"), required=False,
                                       empty_label="(no generation)", label="Generation",
                                       help_text="Bulk: every server with this GPU model")
    gpus = forms.CharField(required=False, label="Loose GPUs", help_text="Serials of GPU boards not in a server")
    reason = forms.CharField(max_length=300)
    category = forms.ChoiceField(choices=Category.choices, label="Confidentiality (FIPS 199)")
    destination = forms.ChoiceField(choices=Destination.choices)
    level = forms.ChoiceField(choices=[("", "Policy minimum"), *Level.choices], required=False,
                              help_text="You may raise the level, never lower it")
    location = forms.CharField(max_length=120, required=False)

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("initial", {"category": "moderate", "destination": "resale"})
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        for name in ("category", "destination", "level"):  # a change re-renders the policy preview
            self.fields[name].widget.attrs.update({
                "hx-get": reverse("decommission:request-new"), "hx-trigger": "change", "hx-include": "#request-form",
                "hx-target": "#preview", "hx-select": "#preview", "hx-swap": "outerHTML",
                # one preview in flight for the whole form: a newer change aborts the older request, so a slow
                # answer for an earlier choice never overwrites the preview of the last one
                "hx-sync": "#request-form:replace"})

    def clean(self) -> dict:
        data = super().clean()
        names = [n.strip().lower() for n in (data.get("servers") or "").replace(",", " ").split() if n.strip()]
        by_name = {s.hostname: s for s in Server.objects.filter(hostname__in=names)}
        by_serial = {s.serial.lower(): s for s in Server.objects.exclude(serial="").filter(serial__in=names)}
        unknown = [n for n in names if n not in by_name and n not in by_serial]
        if unknown:
            self.add_error("servers", f"Unknown server: {', '.join(unknown[:10])}.")
        chosen = {s.pk: s for s in [*by_name.values(), *by_serial.values()]}
        if data.get("rack"):
            chosen |= {s.pk: s for s in Server.objects.filter(rack=data["rack"])}
        if data.get("gpu_model"):
            chosen |= {s.pk: s for s in Server.objects.filter(gpus__model=data["gpu_model"]).distinct()}
        serials = [g for g in (data.get("gpus") or "").replace(",", " ").split() if g]
        gpus = list(Gpu.objects.filter(serial__in=serials))
        missing = sorted(set(serials) - {g.serial for g in gpus})
        if missing:
            self.add_error("gpus", f"Unknown GPU serial: {', '.join(missing[:10])}.")
        data["server_objs"] = sorted(chosen.values(), key=lambda s: s.hostname)
        data["gpu_objs"] = gpus
        if not self.errors and not chosen and not gpus:
            self.add_error("servers", "Name at least one server or GPU (or a rack, a generation).")
        return data


class ReasonForm(forms.Form):
    reason = forms.CharField(max_length=300, required=False)


class DestructionForm(forms.Form):
    reference = forms.CharField(max_length=120)
    method = forms.CharField(max_length=120)
    facility = forms.CharField(max_length=120)


class DisposeForm(forms.Form):
    outcome = forms.ChoiceField(choices=Outcome.choices)


class CustodyForm(forms.Form):
    kind = forms.ChoiceField(choices=CustodyKind.choices)
    from_party = forms.CharField(max_length=120)
    to_party = forms.CharField(max_length=120)
    from_signed_by = forms.CharField(max_length=120)
    to_signed_by = forms.CharField(max_length=120)
    seal_ids = forms.CharField(max_length=300, help_text="Seal ids, separated by spaces")
    count = forms.IntegerField(min_value=0)
    weight_kg = forms.DecimalField(max_digits=9, decimal_places=2, min_value=Decimal("0"))
    carrier = forms.CharField(max_length=120, required=False)
    reference = forms.CharField(max_length=120, required=False)
    processor = forms.ModelChoiceField(queryset=Processor.objects.order_by("name"), required=False)

    def clean_seal_ids(self) -> list[str]:
        return [s for s in self.cleaned_data["seal_ids"].replace(",", " ").split() if s]
