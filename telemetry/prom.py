"""A fast parser for the Prometheus text exposition format 0.0.4 (dcgm-exporter's ``/metrics``).

The generic ``prometheus_client`` parser reads about 25,000 lines/s; this one reads dcgm-exporter text
at several hundred thousand lines/s on one core. How:

- the text is split into lines a chunk at a time, and a sample line ``name{labels} value`` is taken apart
  with two ``str.partition`` calls and one ``float()``: C-speed scans, no per-character Python loop and no
  regex over the label text;
- the label text is not parsed per line: dcgm-exporter repeats the same label string for every metric of
  one GPU, so each distinct string is parsed and validated once and cached (a dict keyed by the raw text);
- a metric name is validated the first time it is seen and then known by one dict lookup;
- every other line (a comment, a timestamp, a ``}`` inside a label value, spaces before ``{``, a big
  integer) goes to a strict per-line parser that reads it or raises with its 1-based line number.

A syntax error anywhere rejects the whole body (:class:`TelemetryParseError`), as Prometheus rejects a
whole scrape. The body size is checked by the caller (``telemetry.parse``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from telemetry.sample import TelemetryParseError

LABEL_VALUE_MAX = 1024  # characters; a longer label value rejects the body ("label_too_long")
METRIC_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})

Number = float | int
# (metric name, label text between the braces or "", value, timestamp in ms or None)
Series = tuple[str, str, Number, int | None]

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_VALUE = r"[-+.0-9a-zA-Z]+"  # float() decides; no "_" (Python takes "1_0", Prometheus does not)
_CHUNK = 1 << 20  # characters split into lines at a time: bounded memory, negligible call overhead

_NAME_AT = re.compile(_NAME)
_SPACE_AT = re.compile(r"[ \t]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_LABEL_AT = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"([^"\\\n]*(?:\\.[^"\\\n]*)*)"[ \t]*')
_VALUE_TS = re.compile(rf"[ \t]+({_VALUE})(?:[ \t]+(-?[0-9]+))?[ \t]*\r?$")
_COMMENT = re.compile(r"#[ \t]+(HELP|TYPE)(?:[ \t]+(\S*))?(?:[ \t]+(.*?))?[ \t]*$")
_ESCAPE = re.compile(r"\\(.)")
_UNESCAPE = {"\\": "\\", '"': '"', "n": "\n"}
_SKIP: Any = object()  # a valid metric name the caller does not want
# Every scrape repeats the same metric names and HELP/TYPE lines: remember the valid ones (bounded), so a
# small body (one host) does not pay the strict parser for them each time.
_REMEMBERED = 2048
_good_names: set[str] = set()
_good_comments: set[str] = set()
_BIG = 1e16


def _unescape(match: re.Match[str]) -> str:
    return _UNESCAPE.get(match.group(1), match.group(0))  # other escapes stay as written, as in Prometheus


def _label_block(text: str, start: int, line_no: int | None) -> tuple[dict[str, str], int]:
    """Parse ``{name="value",...}`` starting at ``text[start] == "{"``; return (labels, index after "}")."""
    labels: dict[str, str] = {}
    pos = start + 1
    while True:
        pos = _SPACE_AT.match(text, pos).end()  # type: ignore[union-attr]
        if text.startswith("}", pos):
            return labels, pos + 1
        match = _LABEL_AT.match(text, pos)
        if match is None:
            raise TelemetryParseError(f"bad label at column {pos + 1}: expected name=\"value\" or '}}'",
                                      line_no=line_no)
        name, value = match.group(1), match.group(2)
        if "\\" in value:
            value = _ESCAPE.sub(_unescape, value)
        if len(value) > LABEL_VALUE_MAX:
            raise TelemetryParseError(f"label {name!r} is {len(value)} characters long (at most {LABEL_VALUE_MAX})",
                                      reason="label_too_long", line_no=line_no)
        if name in labels:
            raise TelemetryParseError(f"label {name!r} appears twice", line_no=line_no)
        labels[name] = value
        pos = match.end()
        if text.startswith(",", pos):
            pos += 1
        elif not text.startswith("}", pos):
            raise TelemetryParseError(f"expected ',' or '}}' after label {name!r}", line_no=line_no)


_label_names: set[str] = set()  # label names already validated (a handful: gpu, UUID, Hostname, ...)


def _labels(raw: str, line_no: int | None) -> dict[str, str]:
    """The label text between the braces, as a dict.

    The common case (no backslash, no blank around ``=`` or ``,``: what exporters write) is read with
    ``split``; anything else, or anything that does not check out, by the strict scanner.
    """
    if "\\" not in raw and raw.endswith(('"', '",')):
        pieces = raw.removesuffix(",")[:-1].split('",')
        if raw.count('"') == 2 * len(pieces):  # no quote inside a value
            labels = {}
            for piece in pieces:
                name, equals, value = piece.partition('="')
                if not equals or len(value) > LABEL_VALUE_MAX:
                    break
                if name not in _label_names:
                    if not _LABEL_NAME.fullmatch(name) or len(_label_names) > 10_000:
                        break
                    _label_names.add(name)
                labels[name] = value
            else:
                if len(labels) == len(pieces):  # no duplicate name
                    return labels
    text = "{" + raw + "}"
    labels, end = _label_block(text, 0, line_no)
    if end != len(text):
        raise TelemetryParseError("text after the closing '}' of the labels", line_no=line_no)
    return labels


@functools.lru_cache(maxsize=8192)
def parse_labels(raw: str) -> dict[str, str]:
    """``'gpu="0",UUID="GPU-..."'`` (the text between the braces, as :func:`iter_series` yields it) ->
    ``{"gpu": "0", "UUID": "GPU-..."}``; ``''`` -> ``{}``.

    Cached: the same dict is returned for the same text, so never mutate it (copy it).
    """
    return _labels(raw, None) if raw else {}


def _number(value: str, line_no: int | None) -> Number:
    """``'30'``, ``'113.611000'``, ``'NaN'``, ``'+Inf'``; integers beyond a float's exact range
    (``9223372036854775794``, a DCGM sentinel) keep their exact int value."""
    try:
        number: Number = float(value)
    except ValueError:
        raise TelemetryParseError(f"{value!r} is not a number", line_no=line_no) from None
    if len(value) > 15 and value.lstrip("+-").isdigit():
        number = int(value)
    return number


def _check_comment(comment: str, line_no: int | None) -> None:
    """``# HELP name doc`` and ``# TYPE name type`` are checked; any other ``#`` line is a comment."""
    match = _COMMENT.match(comment)
    if match is None:
        return
    keyword, name, rest = match.groups()
    if not name or not _NAME_AT.fullmatch(name):
        raise TelemetryParseError(f"# {keyword} needs a metric name, got {name or ''!r}", line_no=line_no)
    if keyword == "TYPE" and rest not in METRIC_TYPES:
        raise TelemetryParseError(f"# TYPE {name}: unknown type {rest or ''!r} "
                                  f"(one of {', '.join(sorted(METRIC_TYPES))})", line_no=line_no)


def _careful_line(line: str) -> tuple[str, str, dict[str, str] | None, Number, int | None, bool] | None:
    """Parse any line strictly: ``None`` for a blank line or a comment, else
    ``(name, raw, labels or None, value, ts, plain)``; ``plain`` is True for ``name{...}`` written with
    no blank before the brace (the fast path's shape). Raises without a line number."""
    stripped = line.strip()
    if not stripped:
        return None
    if stripped[0] == "#":
        _check_comment(stripped, None)
        return None
    name_match = _NAME_AT.match(line)
    if name_match is None:
        raise TelemetryParseError(f"expected a metric name, a comment or a blank line: {line[:80]!r}")
    name = name_match.group()
    pos = name_match.end()
    brace = _SPACE_AT.match(line, pos).end()  # type: ignore[union-attr]
    raw, labels = "", None
    if line.startswith("{", brace):
        labels, end = _label_block(line, brace, None)
        raw, pos = line[brace + 1:end - 1], end
    tail = _VALUE_TS.match(line, pos)
    if tail is None:
        raise TelemetryParseError(f"expected a value (and an optional timestamp) after {name!r}")
    value, ts = tail.groups()
    return name, raw, labels, _number(value, None), int(ts) if ts else None, brace == name_match.end()


def _iter(text: str, key_for: Callable[[str, dict[str, str]], Any],
          wanted: Mapping[str, Any] | None) -> Iterator[tuple[Any, Any, Number, int | None]]:
    """The engine of :func:`iter_series` and :func:`iter_keyed`: yields ``(tag, key, value, ts)``.

    ``tag`` is ``wanted[name]`` (or the name when ``wanted`` is None; names not in ``wanted`` are
    validated and skipped); ``key`` is ``key_for(raw, labels)``, made once per distinct label text.
    """
    tags: dict[str, Any] = {}  # validated metric name -> tag to yield, or _SKIP
    keys: dict[str, Any] = {}  # raw label text -> key_for(raw, labels)
    tags_get, keys_get = tags.get, keys.get
    base = 0  # lines before this chunk
    pos, size = 0, len(text)
    while pos < size:
        end = text.find("\n", pos + _CHUNK)
        end = size if end < 0 else end + 1
        chunk = text[pos:end]
        ascii_ = chunk.isascii()  # O(1); non-ASCII digits pass float(), not Prometheus
        lines = chunk.split("\n")
        if chunk.endswith("\n"):
            lines.pop()  # the empty piece after the chunk's last newline
        line = ""
        try:
            for line in lines:
                name, brace, rest = line.partition("{")
                tag = tags_get(name) if brace else None
                if tag is None and brace and name in _good_names:  # validated in an earlier body
                    tag = tags[name] = name if wanted is None else wanted.get(name, _SKIP)
                if tag is not None:
                    raw, _, tail = rest.partition("}")
                    key = keys_get(raw)
                    if key is None:
                        try:
                            key = keys[raw] = key_for(raw, _labels(raw, None))
                        except TelemetryParseError:
                            key = None  # perhaps a "}" inside a label value: the strict parser decides
                    if key is not None:
                        try:
                            value = float(tail)  # skips blanks around; refuses a timestamp after the value
                        except ValueError:
                            value = _BIG
                        # Big numbers go the strict way (integers beyond 2**53 must stay exact; NaN and Inf
                        # too), and so does "1_0", which float() takes and Prometheus does not.
                        if -1e15 < value < 1e15 and "_" not in tail and ascii_:
                            if tag is not _SKIP:
                                yield tag, key, value, None
                            continue
                if line in _good_comments:  # the same HELP and TYPE lines head every scrape
                    continue
                parsed = _careful_line(line)
                if parsed is None:
                    if line[:1] == "#" and len(_good_comments) < _REMEMBERED:
                        _good_comments.add(line)
                    continue
                name, raw, labels, value, ts, plain = parsed
                tag = tags.get(name)
                if tag is None:
                    tag = name if wanted is None else wanted.get(name, _SKIP)
                    if plain:
                        tags[name] = tag
                        if len(_good_names) < _REMEMBERED:
                            _good_names.add(name)
                key = keys_get(raw)
                if key is None:
                    key = keys[raw] = key_for(raw, labels or {})
                if tag is not _SKIP:
                    yield tag, key, value, ts
        except TelemetryParseError as exc:
            if exc.line_no is None:  # raised without a line number: find the line (by identity)
                index = next(i for i, candidate in enumerate(lines) if candidate is line)
                raise TelemetryParseError(exc.message, reason=exc.reason, line_no=base + index + 1) from None
            raise
        base += len(lines)
        pos = end


def iter_series(text: str, *, labels_cache: dict[str, dict[str, str]] | None = None) -> Iterator[Series]:
    """Yield ``(name, raw_labels, value, ts_ms)`` for every sample line; raise TelemetryParseError.

    ``raw_labels`` is the text between the braces as written (``''`` without labels); each distinct text is
    yielded as one shared str object. :func:`parse_labels` turns it into a dict; or pass
    ``labels_cache`` (a dict) and find every distinct text already parsed in it.
    """
    cache = {} if labels_cache is None else labels_cache

    def key_for(raw: str, labels: dict[str, str]) -> str:
        cache[raw] = labels
        return raw

    return _iter(text, key_for, None)


def iter_keyed[K, T](text: str, *, key_for: Callable[[str, dict[str, str]], K],
                     wanted: Mapping[str, T]) -> Iterator[tuple[T, K, Number, int | None]]:
    """The fast path for a consumer that keeps a few metrics: yield ``(wanted[name], key, value, ts_ms)``.

    ``key_for(raw_labels, labels)`` is called once per distinct label text and its result is yielded for
    every line with that text (e.g. a per-GPU accumulator); metrics not in ``wanted`` are validated, not
    yielded. One dict lookup per line does the metric and one the labels.
    """
    return _iter(text, key_for, wanted)


def parse(text: str) -> list[tuple[str, dict[str, str], Number, int | None]]:
    """Every sample as ``(name, labels, value, ts_ms)``, labels as a fresh dict. For tests and small bodies."""
    cache: dict[str, dict[str, str]] = {}
    return [(name, dict(cache[raw]) if raw else {}, value, ts)
            for name, raw, value, ts in iter_series(text, labels_cache=cache)]
