"""Forms of the operator UI. They validate input only; views hand the cleaned data to services."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.template.defaultfilters import filesizeformat

from inventory.lifecycle import allowed_targets
from inventory.models import Gpu, GpuState

IMPORT_FORMATS = [
    ("auto", "Detect from the file"),
    ("nvidia-smi-xml", "nvidia-smi -q -x (XML)"),
    ("nvidia-smi-csv", "nvidia-smi --query-gpu (CSV)"),
    ("csv", "Fleet CSV"),
]


class GpuTransitionForm(forms.Form):
    """Any state validates here, so an illegal move reaches the lifecycle and gets its full explanation;
    the select only offers the states allowed from the GPU's current one."""

    to_state = forms.ChoiceField(label="New state", choices=GpuState.choices)
    reason = forms.CharField(max_length=500, required=False,
                             widget=forms.TextInput(attrs={"placeholder": "Why (ticket, symptom, plan)"}))

    def __init__(self, *args: Any, gpu: Gpu, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        labels = dict(GpuState.choices)
        self.fields["to_state"].widget.choices = [(s, labels[s]) for s in allowed_targets(gpu.state)]


class IdListField(forms.Field):
    """Repeated ``name=<id>`` parameters (checkboxes) as a list of ints."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: Any) -> list[int]:
        try:
            return sorted({int(v) for v in value or ()})
        except (TypeError, ValueError):
            raise forms.ValidationError("GPU ids must be numbers.", code="invalid") from None


class BulkTransitionForm(forms.Form):
    SELECTED, FILTER = "selected", "filter"

    gpu = IdListField(required=False)
    scope = forms.ChoiceField(choices=[(SELECTED, "Selected GPUs"), (FILTER, "All GPUs matching the filter")],
                              initial=SELECTED)
    filter = forms.CharField(required=False, widget=forms.HiddenInput, max_length=4000)
    to_state = forms.ChoiceField(label="New state", choices=GpuState.choices)
    reason = forms.CharField(max_length=500, required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("scope") == self.SELECTED and not data.get("gpu"):
            raise forms.ValidationError("Select at least one GPU, or apply to all GPUs matching the filter.")
        return data


class ImportUploadForm(forms.Form):
    file = forms.FileField()
    fmt = forms.ChoiceField(label="Format", choices=IMPORT_FORMATS, initial="auto")
    server_hint = forms.CharField(label="Server hostname", required=False, max_length=253,
                                  help_text="For nvidia-smi output, which names no host.")

    def clean_file(self) -> Any:
        upload = self.cleaned_data["file"]
        limit = settings.FLEET_IMPORT_MAX_BYTES
        if upload.size > limit:
            raise forms.ValidationError(
                f"The file is {filesizeformat(upload.size)}; imports are limited to {filesizeformat(limit)}.",
                code="too_large")
        return upload
