"""One entry point for every telemetry format: size and encoding checks, then the format's parser."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from django.conf import settings

from inventory.importers.base import decode_utf8
from telemetry.dcgm import parse_dcgm
from telemetry.kernel import parse_kernel_log
from telemetry.nvsmi import parse_nvsmi_csv, parse_nvsmi_xml
from telemetry.sample import ParsedBatch, TelemetryParseError

Format = Literal["prometheus", "nvidia-smi-xml", "nvidia-smi-csv", "kernel-log"]
FORMATS: tuple[Format, ...] = ("prometheus", "nvidia-smi-xml", "nvidia-smi-csv", "kernel-log")
DEFAULT_MAX_BYTES = 64 << 20


def max_bytes() -> int:
    """``settings.FLEET_TELEMETRY_MAX_BYTES``, 64 MiB by default."""
    return int(getattr(settings, "FLEET_TELEMETRY_MAX_BYTES", DEFAULT_MAX_BYTES))


def parse_telemetry(content: bytes | str, *, fmt: Format, host: str | None, now: datetime,
                    filename: str) -> ParsedBatch:
    """Parse one uploaded or pushed body. Raises TelemetryParseError (the whole body is refused):
    ``body_too_large``, ``not_text`` (not UTF-8), ``unknown_format``, or the format's own errors.

    A ``str`` body is measured in characters (the caller decoded it, so its bytes were checked there).
    """
    limit = max_bytes()
    if len(content) > limit:
        raise TelemetryParseError(f"{filename}: the body is {len(content)} bytes; the limit is {limit}",
                                  reason="body_too_large")
    if fmt not in FORMATS:
        raise TelemetryParseError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})", reason="unknown_format")
    if isinstance(content, bytes):
        raw, text, error = decode_utf8(content, filename)
        if error is not None or text is None:
            raise TelemetryParseError(error.message if error else "not UTF-8 text", reason="not_text",
                                      line_no=error.line if error else None)
    else:
        raw, text = content.encode(), content
    if fmt == "prometheus":
        return parse_dcgm(text, now=now, default_host=host)
    if fmt == "nvidia-smi-xml":
        return parse_nvsmi_xml(raw, host=host, filename=filename)
    if fmt == "nvidia-smi-csv":
        return parse_nvsmi_csv(text, host=host)
    return parse_kernel_log(text, host=host)
