"""The API's JSON renderer: DRF's JSONRenderer, encoded by orjson.

Why: Python's ``json`` encoder was the largest single cost of the API under load. The fleet heatmap document
(four parallel arrays over 100,000 GPUs) took 24 ms of CPU to encode with ``json.dumps`` and 2.4 ms with
``orjson.dumps`` (the same document, measured in one process); on a 100-GPU API page the encoder's share
falls from about 0.3 ms to a few hundredths. (Measured in one process with other work on the machine, load
~4-5: the ratios hold, the sizes are not quiet figures.)

The output is the same JSON DRF writes (compact, UTF-8, ``\\u2028``/``\\u2029`` escaped): dates, times and
everything orjson does not know natively go through DRF's own encoder (``default``), so a datetime still reads
``...Z``. A pretty-printed answer (the browsable API, ``; indent=``) and anything orjson refuses (an integer
wider than 64 bits) fall back to DRF's renderer as it is."""

from __future__ import annotations

from typing import Any

import orjson
from rest_framework import renderers
from rest_framework.utils.encoders import JSONEncoder

_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_NON_STR_KEYS
_default = JSONEncoder().default


class JSONRenderer(renderers.JSONRenderer):
    def render(self, data: Any, accepted_media_type: str | None = None,
               renderer_context: dict | None = None) -> bytes:
        if data is None:
            return b""
        if (self.get_indent(accepted_media_type, renderer_context or {}) is not None or self.ensure_ascii
                or not self.compact):
            return super().render(data, accepted_media_type, renderer_context)
        try:
            ret = orjson.dumps(data, default=_default, option=_OPTIONS)
        except orjson.JSONEncodeError:
            return super().render(data, accepted_media_type, renderer_context)
        # U+2028 and U+2029 escaped (a strict JavaScript subset, as DRF writes it). Both start with the byte E2:
        # one byte is looked for with memchr (0.03 ms in the 1.8 MB heatmap document, measured with other work running), the 3-byte sequences
        # are not (2.2 ms), so they are looked for only where an E2 is.
        if b"\xe2" in ret and (b"\xe2\x80\xa8" in ret or b"\xe2\x80\xa9" in ret):
            ret = ret.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
        return ret

