"""Forms of the operator UI. They validate input only; views hand the cleaned data to services."""

from __future__ import annotations

import csv
import io
from typing import Any

from django import forms
from django.conf import settings
from django.template.defaultfilters import filesizeformat

from inventory.imports import IMPORT_NEW_STATES
from inventory.lifecycle import allowed_targets
from inventory.models import Gpu, GpuState
from inventory.place_fields import PlaceField, place_lookup

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


class ServerPlaceForm(forms.Form):
    """A server's rack position: the rack by name (completion), the lowest unit it occupies."""

    rack = PlaceField(kind="rack", label="Rack")
    rack_unit = forms.IntegerField(label="Rack unit (lowest)", min_value=1, max_value=64)


class ServerPlaceBulkForm(forms.Form):
    """``hostname,rack,unit`` per line (a CSV, pasted or uploaded)."""

    rows = forms.CharField(label="Servers to place", required=False,
                           widget=forms.Textarea(attrs={"rows": 6, "placeholder": "hostname,rack,unit\n"
                                                        "gpu-fra2-101,fra2-r07,10"}))
    file = forms.FileField(label="or a CSV file", required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        upload = data.get("file")
        text = upload.read().decode("utf-8", "replace") if upload else data.get("rows", "")
        if not text.strip():
            raise forms.ValidationError("Paste hostname,rack,unit lines or upload a CSV file.")
        placements, errors = [], []
        reader = csv.reader(io.StringIO(text))
        for number, record in enumerate(reader, start=1):
            cells = [c.strip() for c in record]
            if not any(cells) or (number == 1 and cells and cells[0].lower() == "hostname"):
                continue
            if len(cells) != 3:
                errors.append(f"line {number}: write hostname,rack,unit (3 columns, not {len(cells)}).")
                continue
            hostname, rack_name, unit = cells
            try:
                server = place_lookup("server", hostname)
                rack = place_lookup("rack", rack_name)
                if not unit.isdigit() or int(unit) < 1:
                    raise forms.ValidationError(f"unit “{unit}” is not a rack unit (a whole number from 1).")
            except forms.ValidationError as exc:
                errors.append(f"line {number}: {' '.join(exc.messages)}")
                continue
            placements.append((server, rack, int(unit), f"line {number}"))
        if errors:
            raise forms.ValidationError(errors)
        if not placements:
            raise forms.ValidationError("No servers to place in what was given.")
        data["placements"] = placements
        return data


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
    new_state = forms.ChoiceField(label="New GPUs start in", initial="received", required=False,
                                  choices=[(s.value, s.label) for s in IMPORT_NEW_STATES],
                                  help_text="Received: they pass burn-in before service. Another state is "
                                            "written in each new GPU's history.")

    def clean_file(self) -> Any:
        upload = self.cleaned_data["file"]
        limit = settings.FLEET_IMPORT_MAX_BYTES
        if upload.size > limit:
            raise forms.ValidationError(
                f"The file is {filesizeformat(upload.size)}; imports are limited to {filesizeformat(limit)}.",
                code="too_large")
        return upload
