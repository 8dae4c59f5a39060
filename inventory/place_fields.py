"""Places by name: the form field and filter every site, row, rack and server input uses.

A person types a name (``fra2``, ``fra2/r07`` or ``r07``, ``fra2-r07``, ``gpu-fra2-001``); scripts and old links
keep sending ids. Both resolve to the same object, or to a field error that says what was not found or which
places a name is ambiguous between. Completion: ``place_suggest`` (the ``/places/suggest/<kind>/`` view) fills
the ``<datalist>`` that ``PlaceInput`` renders next to its text box, over htmx.
"""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django.db.models import Model, Q, QuerySet
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from inventory.models import Rack, Row, Server, Site

PLACE_KINDS: dict[str, type[Model]] = {"site": Site, "row": Row, "rack": Rack, "server": Server}
SUGGESTIONS = 20

_PLACEHOLDERS = {"site": "site code", "row": "row name (site/row)", "rack": "rack name", "server": "hostname"}


def place_label(obj: Model) -> str:
    """What a person types for ``obj`` (and what a completion offers)."""
    if isinstance(obj, Site):
        return obj.code
    if isinstance(obj, Row):
        return f"{obj.site.code}/{obj.name}" if obj.site_id else obj.name
    if isinstance(obj, Rack):
        return obj.name
    if isinstance(obj, Server):
        return obj.hostname
    return str(obj)


def _name_condition(kind: str, text: str) -> Q:
    if kind == "site":
        return Q(code__iexact=text)
    if kind == "server":
        return Q(hostname=text.lower())
    site, sep, name = text.rpartition("/")
    condition = Q(name__iexact=name)
    if sep:
        condition &= Q(site__code__iexact=site)
    return condition


def place_lookup(kind: str, text: str, queryset: QuerySet | None = None) -> Model:
    """The place of ``kind`` that ``text`` names (a name, ``site/name``, or an id). ValidationError otherwise."""
    model = PLACE_KINDS[kind]
    qs = model.objects.all() if queryset is None else queryset
    text = str(text).strip()
    if kind in ("row", "rack"):
        qs = qs.select_related("site")
    matches = list(qs.filter(_name_condition(kind, text))[:5])
    if not matches and text.isdigit():
        matches = list(qs.filter(pk=int(text))[:1])
    if not matches:
        raise ValidationError(f"No {kind} named “{text}”.", code="invalid_choice")
    if len(matches) > 1:
        names = ", ".join(f"{m.site.code}/{m.name}" for m in matches)  # type: ignore[attr-defined]
        raise ValidationError(f"“{text}” names more than one {kind} ({names}): write site/name.", code="ambiguous")
    return matches[0]


def place_suggestions(kind: str, text: str) -> list[str]:
    """Names of ``kind`` starting with ``text`` (case-insensitive), for the completion list."""
    model = PLACE_KINDS[kind]
    text = text.strip()
    if kind == "site":
        qs = Site.objects.filter(code__istartswith=text).order_by("code")
    elif kind == "server":
        qs = Server.objects.filter(hostname__startswith=text.lower()).order_by("hostname")
    else:
        site, sep, name = text.rpartition("/")
        qs = model.objects.select_related("site").filter(name__istartswith=name)
        if sep:
            qs = qs.filter(site__code__iexact=site)
        qs = qs.order_by("name", "id")
    return [place_label(obj) for obj in qs[:SUGGESTIONS]]


class PlaceInput(forms.TextInput):
    """A text box with a ``<datalist>`` that htmx fills with matching names as the person types."""

    def __init__(self, kind: str, attrs: dict[str, Any] | None = None) -> None:
        self.kind = kind
        super().__init__(attrs={"placeholder": _PLACEHOLDERS[kind], "autocomplete": "off", **(attrs or {})})

    def render(self, name: str, value: Any, attrs: dict[str, Any] | None = None,
               renderer: Any = None) -> SafeString:
        list_id = f"places-{self.kind}-{name}"
        attrs = {**(attrs or {}), "list": list_id, "data-place": self.kind,
                 "hx-get": reverse("place-suggest", args=[self.kind]), "hx-params": name,
                 "hx-trigger": "input changed delay:150ms, focus once", "hx-target": f"#{list_id}",
                 "hx-swap": "innerHTML", "hx-sync": "this:replace", "hx-push-url": "false"}
        if isinstance(value, Model):
            value = place_label(value)
        box = super().render(name, value, attrs, renderer)
        return format_html("{}<datalist id=\"{}\"></datalist>", box, list_id)

    def format_value(self, value: Any) -> str | None:
        if isinstance(value, Model):
            return place_label(value)
        return super().format_value(value)


def suggestion_options(names: list[str]) -> SafeString:
    return format_html_join("", "<option value=\"{}\"></option>", ((n,) for n in names))


class PlaceField(forms.ModelChoiceField):
    """A ModelChoiceField that takes a place's name (or its id) from a text box."""

    def __init__(self, *, kind: str, queryset: QuerySet | None = None, **kwargs: Any) -> None:
        kwargs.pop("to_field_name", None)
        kwargs.setdefault("widget", PlaceInput(kind))
        self.kind = kind
        super().__init__(queryset=PLACE_KINDS[kind].objects.all() if queryset is None else queryset, **kwargs)

    def to_python(self, value: Any) -> Model | None:
        if value in self.empty_values:
            return None
        if isinstance(value, Model):
            return value
        return place_lookup(self.kind, value, self.queryset)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, Model):
            return place_label(value)
        return value

    def has_changed(self, initial: Any, data: Any) -> bool:
        return str(initial or "") != str(data or "")


class PlaceFilter(django_filters.ModelChoiceFilter):
    """``?rack=fra2-r07`` or ``?rack=12``: the FilterSets' place filters (HTML and API alike)."""

    field_class = PlaceField

    def __init__(self, *args: Any, kind: str, **kwargs: Any) -> None:
        kwargs.setdefault("queryset", PLACE_KINDS[kind].objects.all())
        kwargs["kind"] = kind
        super().__init__(*args, **kwargs)
