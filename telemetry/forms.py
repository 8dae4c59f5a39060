"""Telemetry's forms: a scrape source on the ingest status page."""

from __future__ import annotations

from django import forms

from telemetry.models import IngestSource


class ScrapeSourceForm(forms.ModelForm):
    class Meta:
        model = IngestSource
        fields = ["name", "url", "host", "interval_s", "timeout_s"]
        widgets = {"url": forms.URLInput(attrs={"placeholder": "http://node0001:9400/metrics"})}

    def clean_url(self) -> str:
        url = self.cleaned_data["url"]
        if not url:
            raise forms.ValidationError("A scrape source needs the exporter's URL.")
        return url
