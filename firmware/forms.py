"""Forms of the firmware pages (the rollout wizard; the catalog's releases, bundles, baselines, pools and windows).
They validate input only; views hand the cleaned data to services.

The rollout wizard is one form: a name, a bundle, the target selector (the GPU list's own ``GpuFilter``, with the
same widgets) and the strategy as flat fields. The strategy's rules live in ``StrategySerializer``: the form only
turns text into numbers and lists, and puts the serializer's errors next to the fields they are about."""

from __future__ import annotations

import re
from typing import Any

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django.http import QueryDict

from firmware.models import CATALOGUED, Bundle, Channel, Pool, Release, WindowKind
from firmware.services.plan import DOMAINS, Strategy, strategy_parse
from inventory.filters import GpuFilter, gpu_filter
from inventory.models import FirmwareComponent, GpuModel, ServerPlatform, Site

# Failure domains the wizard offers a per-wave cap for (the planner's names; "site" is left to max unavailable).
CAP_DOMAINS = {"rack": "Rack", "power_feed": "Power feed", "row": "Row", "nvlink_domain": "NVLink domain"}
assert set(CAP_DOMAINS) <= set(DOMAINS)

# StrategySerializer error keys (``strategy.<key>[.<n>]``) -> the wizard field they belong to.
_ERROR_FIELDS = {
    **{f"domain_caps.{d}": f"cap_{d}" for d in CAP_DOMAINS},
    "max_unavailable.per_site": "max_unavailable_per_site",
    "max_unavailable.per_pool": "max_unavailable_per_pool",
    "soak_seconds": "soak_minutes",
    "retry.max_attempts": "retry_max_attempts",
    "retry.backoff_seconds": "retry_backoff",
}

_NUMBER_LIST = re.compile(r"[\s,;]+")


def _number_list(text: str, kind: type[int] | type[float], what: str) -> list[Any]:
    values = []
    for part in filter(None, _NUMBER_LIST.split(text.strip())):
        try:
            values.append(kind(part.rstrip("%")))
        except ValueError:
            raise ValidationError(f"“{part}” is not a number: write {what} separated by commas.",
                                  code="invalid") from None
    return values


def _number(**attrs: Any) -> forms.Field:
    return forms.IntegerField(required=False, widget=forms.NumberInput(attrs={"min": 0, **attrs}))


class RolloutForm(forms.Form):
    name = forms.CharField(max_length=120, widget=forms.TextInput(attrs={"placeholder": "VBIOS 96.00.99 fra2"}))
    bundle = forms.ModelChoiceField(queryset=Bundle.objects.select_related("platform").order_by("name", "id"),
                                    empty_label="— pick a bundle —")

    canary = forms.BooleanField(required=False, initial=True, label="Canary",
                                help_text="One unit per upgrade path before any wave")
    waves = forms.CharField(initial="1, 5, 25, 100", label="Waves (%)",
                            help_text="Cumulative percentages of the units, increasing; 100 is added if missing")
    cap_rack = _number(placeholder="no cap")
    cap_power_feed = _number(placeholder="no cap")
    cap_row = _number(placeholder="no cap")
    cap_nvlink_domain = _number(placeholder="no cap")
    max_unavailable_per_site = _number(placeholder="no limit")
    max_unavailable_per_pool = _number(placeholder="no limit")
    soak_minutes = _number()
    success_threshold = forms.FloatField(required=False, initial=95, label="Success threshold (%)",
                                         widget=forms.NumberInput(attrs={"min": 0, "max": 100, "step": "any"}))
    max_failures = _number()
    max_failure_ratio = forms.FloatField(required=False, initial=0.05, help_text="0.05 = 5 % of a wave",
                                         widget=forms.NumberInput(attrs={"min": 0, "max": 1, "step": "any"}))
    min_sample = _number()
    on_failure = forms.ChoiceField(choices=[("pause", "Pause"), ("abort", "Abort")], initial="pause")
    require_window = forms.BooleanField(required=False, label="Activate only in a maintenance window")
    retry_max_attempts = _number()
    retry_backoff = forms.CharField(required=False, initial="10, 60, 300", label="Retry backoff (s)",
                                    help_text="Wait before each retry; the last value repeats")
    seed = forms.IntegerField(required=False, initial=0, help_text="Changes the order of units, not the rules")

    def __init__(self, data: QueryDict | None = None, *, preview: bool = False, **kwargs: Any) -> None:
        defaults = Strategy()
        kwargs.setdefault("initial", {
            "soak_minutes": defaults.soak_seconds // 60, "max_failures": defaults.max_failures,
            "min_sample": defaults.min_sample, "retry_max_attempts": defaults.retry_max_attempts})
        super().__init__(data, **kwargs)
        self.preview = preview
        if preview:  # the live preview needs no name yet
            self.fields["name"].required = False
        self.fields["bundle"].label_from_instance = lambda b: f"{b.name} · {b.platform.name}"  # type: ignore[attr-defined]
        for name in CAP_DOMAINS:
            self.fields[f"cap_{name}"].label = CAP_DOMAINS[name]
        # The target selector is the GPU list's filter, widgets and all.
        self.selector = gpu_filter(data if data is not None else QueryDict())
        self.strategy: Strategy | None = None

    # The selector filters the wizard shows (the others, exact lookups for scripts, have no place on the page).
    SELECTOR_SHOWN = ("q", "site", "model", "row", "rack", "server", "vbios", "driver", "masked", "state")

    @property
    def selector_fields(self) -> list[forms.BoundField]:
        return [self.selector.form[name] for name in self.SELECTOR_SHOWN]

    @property
    def strategy_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.fields if name not in ("name", "bundle")]

    def selector_params(self) -> dict[str, Any]:
        """The selector as the GPU list's query parameters (what ``Rollout.selector`` stores), empties left out."""
        params: dict[str, Any] = {}
        if self.data is None:
            return params
        for name, spec in GpuFilter.base_filters.items():
            values = [v for v in self.data.getlist(name) if v not in ("", "unknown")]
            if values:
                params[name] = values if isinstance(spec, django_filters.MultipleChoiceFilter) else values[0]
        return params

    def strategy_data(self) -> dict[str, Any]:
        """The strategy in ``StrategySerializer``'s shape from the cleaned fields (unset fields: its defaults)."""
        data = self.cleaned_data
        strategy: dict[str, Any] = {"canary": data.get("canary", False), "on_failure": data.get("on_failure"),
                                    "require_window": data.get("require_window", False)}
        if data.get("waves") is not None:
            strategy["waves"] = data["waves"]
        caps = {d: data[f"cap_{d}"] for d in CAP_DOMAINS if data.get(f"cap_{d}") is not None}
        strategy["domain_caps"] = caps
        strategy["max_unavailable"] = {"per_site": data.get("max_unavailable_per_site"),
                                       "per_pool": data.get("max_unavailable_per_pool")}
        if data.get("soak_minutes") is not None:
            strategy["soak_seconds"] = data["soak_minutes"] * 60
        for name in ("success_threshold", "max_failures", "max_failure_ratio", "min_sample", "seed"):
            if data.get(name) is not None:
                strategy[name] = data[name]
        retry: dict[str, Any] = {}
        if data.get("retry_max_attempts") is not None:
            retry["max_attempts"] = data["retry_max_attempts"]
        if data.get("retry_backoff"):
            retry["backoff_seconds"] = data["retry_backoff"]
        strategy["retry"] = retry
        return {k: v for k, v in strategy.items() if v is not None}

    def clean_waves(self) -> list[float]:
        return _number_list(self.cleaned_data["waves"], float, "percentages")

    def clean_retry_backoff(self) -> list[int]:
        return _number_list(self.cleaned_data["retry_backoff"], int, "whole seconds")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if any(name in self.errors for name in self.fields if name not in ("name", "bundle")):
            return data  # a field that is not even a number: the strategy cannot be read yet
        try:
            self.strategy = strategy_parse(self.strategy_data())
        except ValidationError as exc:
            self.add_service_errors(exc)
        return data

    def add_service_errors(self, exc: ValidationError) -> None:
        """Put a service's ValidationError (keyed ``strategy.<field>``, ``selector.<filter>``, ``name``) next to
        the field it is about; what belongs to no field becomes a form error."""
        if not hasattr(exc, "error_dict"):
            self.add_error(None, exc.messages)
            return
        for key, errors in exc.message_dict.items():
            field = self.field_for_error(key)
            if field is None:
                about = key.split(".", 1)[1].replace("_", " ") if "." in key else ""
                self.add_error(None, [f"{about}: {e}" if about else e for e in errors])
            elif field in self.selector.form.fields:
                self.selector.form.add_error(field, errors)
            elif field not in self.errors:
                self.add_error(field, errors)

    def field_for_error(self, key: str) -> str | None:
        if key in ("name", "bundle"):
            return key
        if key.startswith("selector."):
            name = key.removeprefix("selector.")
            return name if name in self.selector.form.fields else None
        key = key.removeprefix("strategy.")
        for prefix, field in _ERROR_FIELDS.items():
            if key == prefix or key.startswith(f"{prefix}."):
                return field
        name = key.split(".", 1)[0]
        return name if name in self.fields else None

    def is_valid(self) -> bool:
        # Both, always: the selector's errors show even when the strategy has some too.
        selector_ok = self.selector.is_valid()
        return super().is_valid() and selector_ok


# --- the catalog's forms: releases, bundles, baselines, pools, maintenance windows ---------------------------

COMPONENT_CHOICES = [(c, label) for c, label in FirmwareComponent.choices if c in CATALOGUED]


class ReleaseForm(forms.Form):
    component = forms.ChoiceField(choices=COMPONENT_CHOICES)
    version = forms.CharField(max_length=80)
    sha256 = forms.CharField(label="SHA-256", max_length=64, required=False,
                             help_text="Needed with a URL; with an upload Fleet computes it (a declared one must match)")
    image_url = forms.URLField(label="Image URL", required=False, max_length=500)
    image_file = forms.FileField(label="or upload the image", required=False)
    size_bytes = forms.IntegerField(min_value=0, required=False, help_text="Filled from the upload when empty")
    platforms = forms.ModelMultipleChoiceField(queryset=ServerPlatform.objects.order_by("name"), required=False,
                                               help_text="None selected: any platform")
    gpu_models = forms.ModelMultipleChoiceField(label="SKUs", queryset=GpuModel.objects.order_by("name"),
                                                required=False)
    min_from_version = forms.CharField(label="Lowest version it upgrades from", max_length=80, required=False)
    released_at = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    channel = forms.ChoiceField(choices=[(Channel.TESTING, "Testing"), (Channel.STABLE, "Stable")])
    notes = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)

    def clean_size_bytes(self) -> int:
        return self.cleaned_data["size_bytes"] or 0


class BundleForm(forms.Form):
    name = forms.CharField(max_length=100)
    platform = forms.ModelChoiceField(queryset=ServerPlatform.objects.order_by("name"))
    releases = forms.ModelMultipleChoiceField(
        queryset=Release.objects.exclude(channel=Channel.REVOKED).order_by("component", "-version_key"),
        widget=forms.SelectMultiple(attrs={"size": 14}), help_text="One per component; applied BMC first")
    notes = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)


class BaselineForm(forms.Form):
    bundle = forms.ModelChoiceField(queryset=Bundle.objects.select_related("platform").order_by("name"))
    pool = forms.ModelChoiceField(queryset=Pool.objects.order_by("name"), required=False,
                                  empty_label="All servers of the platform")
    valid_from = forms.DateTimeField(required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
                                     help_text="Empty: now")
    valid_to = forms.DateTimeField(required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
                                   help_text="Empty: until ended")


class PoolForm(forms.Form):
    name = forms.CharField(max_length=100)
    kind = forms.ChoiceField(choices=Pool.Kind.choices)
    hostnames = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False,
                                help_text="Servers, one hostname per line or comma-separated")

    def clean(self) -> dict[str, Any]:
        """``hostnames`` becomes ``servers``, the servers it names (each must exist)."""
        from inventory.models import Server

        data = super().clean()
        names = {h.strip().lower() for h in data.pop("hostnames", "").replace(",", "\n").split() if h.strip()}
        data["servers"] = list(Server.objects.filter(hostname__in=names))
        missing = names - {s.hostname for s in data["servers"]}
        if missing:
            self.add_error("hostnames", f"Unknown hostnames: {', '.join(sorted(missing)[:10])}")
        return data


class WindowForm(forms.Form):
    name = forms.CharField(max_length=100)
    kind = forms.ChoiceField(choices=WindowKind.choices)
    site = forms.ModelChoiceField(queryset=Site.objects.order_by("code"), required=False, empty_label="All sites")
    pool = forms.ModelChoiceField(queryset=Pool.objects.order_by("name"), required=False, empty_label="All pools")
    starts_at = forms.DateTimeField(required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    ends_at = forms.DateTimeField(required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    weekdays = forms.CharField(required=False, max_length=20, help_text="Weekly: ISO weekdays, e.g. 2,4")
    start_time = forms.TimeField(required=False, widget=forms.TimeInput(attrs={"type": "time"}))
    duration_minutes = forms.IntegerField(required=False, min_value=1)
    timezone_name = forms.CharField(label="Time zone", initial="UTC", max_length=64)
