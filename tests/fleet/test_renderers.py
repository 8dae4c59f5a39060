"""fleet.renderers.JSONRenderer writes the bytes DRF's own JSONRenderer writes (DRF is the oracle here)."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pytest
from django.utils.translation import gettext_lazy
from rest_framework import renderers
from rest_framework.settings import api_settings

from fleet.negotiation import JSON_RENDERER
from fleet.renderers import JSONRenderer

UTC = dt.UTC
DOCUMENTS = [
    {"gpus": list(range(1000)), "values": [None, 45, -3, 2**40] * 250, "at": dt.datetime(2026, 12, 5, 15, 0, tzinfo=UTC)},
    {"serial": "1650724012345", "uuid": uuid.UUID("4d2e5a8c-1b2f-4c6d-9e0f-123456789abc"), "price": decimal.Decimal("1.50"),
     "when": dt.datetime(2026, 12, 5, 15, 0, 1, 250000, tzinfo=UTC), "naive": dt.datetime(2026, 1, 2, 3, 4, 5),  # noqa: DTZ001 - a naive one too
     "offset": dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=2))), "day": dt.date(2026, 2, 28),
     "time": dt.time(23, 59, 58), "duration": dt.timedelta(minutes=90), "lazy": gettext_lazy("Spare"),
     "text": "Hall B \u2013 row 7 \u2028 line \u2029 para \u00e9\u4e2d", "nested": [{"a": [1.5, 0.1, 1e16, -0.0]}],
     "flags": (True, False, None), "empty": {}, "tuple": (1, 2)},
    {1: "int key", "x": {2: [3]}},
    [],
    "plain string",
    42,
]


@pytest.mark.parametrize("data", DOCUMENTS, ids=range(len(DOCUMENTS)))
def test_the_same_bytes_as_drf(data):
    assert JSONRenderer().render(data) == renderers.JSONRenderer().render(data)


def test_pretty_printing_and_none_are_drfs():
    data = {"a": [1, {"b": "c"}]}
    assert JSONRenderer().render(data, "application/json; indent=4") == \
        renderers.JSONRenderer().render(data, "application/json; indent=4")
    assert JSONRenderer().render(None) == b""


def test_an_integer_orjson_refuses_falls_back_to_drf():
    assert JSONRenderer().render({"big": 2**70}) == b'{"big":1180591620717411303424}'


def test_the_api_and_its_errors_answer_through_it():
    assert isinstance(JSON_RENDERER, JSONRenderer)
    assert api_settings.DEFAULT_RENDERER_CLASSES[0] is JSONRenderer
