"""``dcgmi diag -j`` documents, read structurally.

Two shapes exist in the field:

- DCGM 3.x: ``{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name", "results":
  [{"gpu_ids": "0,1" | 0, "status", "warnings", "info"}]}]}], "version", "Driver Version Detected",
  "GPU Device Serials", "runtime_error"}}``. A result without ``gpu_ids`` (the Deployment checks) covers every
  GPU of the run.
- DCGM 4.x: ``{"DCGM Diagnostic": {"test_categories": [... "results": [{"entity_group", "entity_group_id",
  "entity_id", "status", "warnings": [{"error_id", "error_category", "error_severity", "warning"}]}],
  "test_summary"}], "runtime_error"}, "entity_groups": [{"entity_group", "entities": [{"entity_id",
  "serial_num", "device_id"}]}], "metadata": {"version", "Driver Version Detected"}}``.

Test names differ between versions (``Memory Bandwidth`` / ``memory_bandwidth``); they are kept as given and
compared by :func:`name_key`. Unknown tests, categories and fields are kept verbatim: a new test never makes a
document unreadable. What cannot be read at all (not JSON, no diagnostic root) raises :class:`DiagParseError`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

ROOT_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
NOT_SUPPORTED = {"", "<<<NOT_SUPPORTED>>>", "N/A", "[N/A]", "Not Supported"}

_STATUS = {
    "pass": "pass", "passed": "pass", "success": "pass",
    "fail": "fail", "failed": "fail", "failure": "fail", "error": "fail",
    "warn": "warn", "warning": "warn",
    "skip": "skip", "skipped": "skip", "not applicable": "skip", "n/a": "skip",
    "not run": "not_run", "notrun": "not_run", "not_run": "not_run", "incomplete": "not_run",
}


class DiagParseError(ValueError):
    """The text is not a ``dcgmi diag -j`` document."""


def status_of(raw: Any) -> str:
    """pass / fail / warn / skip / not_run. A word never seen before is ``not_run``: never read as a pass."""
    return _STATUS.get(str(raw or "").strip().lower(), "not_run")


def name_key(name: str) -> str:
    """One spelling for a test across DCGM versions: ``Memory Bandwidth`` == ``memory_bandwidth``."""
    return re.sub(r"[^a-z0-9]+", "_", name.strip().lower()).strip("_")


@dataclass
class EntityResult:
    entity_id: int | None  # None: the result covers every GPU of the run (3.x Deployment checks)
    status: str
    status_raw: str
    error_ids: list[int]
    messages: list[str]
    raw: dict[str, Any]


@dataclass
class DiagTest:
    category: str
    name: str
    results: list[EntityResult]
    raw: dict[str, Any]


@dataclass
class DiagDocument:
    major: int
    dcgm_version: str
    driver_version: str
    runtime_error: str
    tests: list[DiagTest]
    gpu_ids: list[int]  # every GPU entity the document names
    serials: dict[int, str] = field(default_factory=dict)
    bus_ids: dict[int, str] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)


def _json(text: str | bytes | dict[str, Any]) -> Any:
    if isinstance(text, dict):
        return text
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DiagParseError(f"The file is not UTF-8 text: {exc}.") from exc
    start = text.find("{")  # dcgmi may print a banner ("Successfully ran diagnostic...") before its JSON
    if start < 0:
        raise DiagParseError("No JSON object found: is this the output of `dcgmi diag -j`?")
    try:
        return json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise DiagParseError(f"Not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}.") from exc


def _ids(value: Any) -> list[int]:
    if value is None or value == "":
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [i for v in value for i in _ids(v)]
    out = []
    for part in str(value).split(","):
        part = part.strip()
        if part:
            if not part.isdigit():
                raise DiagParseError(f"GPU id {part!r} is not a number.")
            out.append(int(part))
    return out


def _messages(value: Any) -> tuple[list[str], list[int]]:
    """Texts and error ids from ``warnings``/``errors``/``info`` in any of their shapes (string, list of strings,
    list of objects with ``warning``/``message``/``error_id``/``error_code``)."""
    texts: list[str] = []
    ids: list[int] = []
    items = value if isinstance(value, list) else [value]
    for item in items:
        if item is None or item == "":
            continue
        if isinstance(item, dict):
            text = item.get("warning") or item.get("message") or item.get("error") or ""
            if text:
                texts.append(str(text))
            ids.extend(item[key] for key in ("error_id", "error_code") if isinstance(item.get(key), int))
        else:
            texts.append(str(item))
    return texts, ids


def _entity_result(result: dict[str, Any], entity_id: int | None) -> EntityResult:
    warnings, ids = _messages(result.get("warnings"))
    errors, more_ids = _messages(result.get("errors"))
    return EntityResult(entity_id=entity_id, status=status_of(result.get("status")),
                        status_raw=str(result.get("status") or ""), error_ids=ids + more_ids,
                        messages=errors + warnings, raw=result)


def _tests(categories: Any) -> list[DiagTest]:
    tests: list[DiagTest] = []
    if not isinstance(categories, list):
        return tests
    for category in categories:
        if not isinstance(category, dict):
            continue
        for test in category.get("tests") or []:
            if not isinstance(test, dict):  # 3.1.0 wrote `null` between tests
                continue
            results: list[EntityResult] = []
            for result in test.get("results") or []:
                if not isinstance(result, dict):
                    continue
                group = str(result.get("entity_group") or "GPU")
                if group.upper() != "GPU":
                    continue  # CPU / NVSwitch entities: kept in the document, not placed on GPUs
                if "entity_id" in result:
                    results.append(_entity_result(result, _ids(result["entity_id"])[0]))
                elif result.get("gpu_ids") not in (None, ""):
                    results.extend(_entity_result(result, gid) for gid in _ids(result["gpu_ids"]))
                else:
                    results.append(_entity_result(result, None))
            tests.append(DiagTest(category=str(category.get("category") or ""), name=str(test.get("name") or ""),
                                 results=results, raw=test))
    return tests


def _first(mapping: dict[str, Any], *keys: str) -> str:
    for key in keys:
        value = mapping.get(key)
        if value not in (None, ""):
            return str(value)
    return ""


def parse_diag(text: str | bytes | dict[str, Any]) -> DiagDocument:
    data = _json(text)
    if not isinstance(data, dict):
        raise DiagParseError("The document is not a JSON object.")
    root_key = next((k for k in ROOT_KEYS if k in data), None)
    if root_key is None:
        raise DiagParseError(f"Neither {ROOT_KEYS[0]!r} (DCGM 4.x) nor {ROOT_KEYS[1]!r} (DCGM 3.x) is in the "
                             "document: is this the output of `dcgmi diag -j`?")
    root = data[root_key]
    if isinstance(root, list):  # seen in the field: the category list straight under the root key
        root = {"test_categories": root}
    if not isinstance(root, dict):
        raise DiagParseError(f"{root_key!r} holds neither an object nor a list of categories.")
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    tests = _tests(root.get("test_categories") or root.get("tests_categories"))
    serials: dict[int, str] = {}
    bus_ids: dict[int, str] = {}
    named: set[int] = set()
    for group in data.get("entity_groups") or []:
        if not isinstance(group, dict) or str(group.get("entity_group", "GPU")).upper() != "GPU":
            continue
        for entity in group.get("entities") or []:
            if isinstance(entity, dict) and isinstance(entity.get("entity_id"), int):
                eid = entity["entity_id"]
                named.add(eid)
                serial = str(entity.get("serial_num") or entity.get("serial") or "").strip()
                if serial not in NOT_SUPPORTED:
                    serials[eid] = serial
                bus = str(entity.get("pci_bus_id") or entity.get("bus_id") or "").strip()
                if bus:
                    bus_ids[eid] = bus
    for key, serial in (root.get("GPU Device Serials") or {}).items() if isinstance(
            root.get("GPU Device Serials"), dict) else ():
        if str(key).isdigit() and str(serial).strip() not in NOT_SUPPORTED:
            serials[int(key)] = str(serial).strip()
            named.add(int(key))
    for gid in _ids(root.get("GPU Device IDs") or []):
        named.add(gid)
    named |= {r.entity_id for t in tests for r in t.results if r.entity_id is not None}
    version = _first(metadata, "version") or _first(root, "version", "DCGM Version")
    driver = (_first(metadata, "Driver Version Detected", "driver_version")
              or _first(root, "Driver Version Detected", "driver_version_detected", "driver_version"))
    runtime_error = _first(root, "runtime_error") or _first(data, "runtime_error")
    major = int(version.split(".")[0]) if version[:1].isdigit() else (4 if root_key == ROOT_KEYS[0] else 3)
    return DiagDocument(major=major, dcgm_version=version, driver_version=driver, runtime_error=runtime_error,
                        tests=tests, gpu_ids=sorted(named), serials=serials, bus_ids=bus_ids, raw=data)


# Tests by level (both spellings), to infer a level the uploader did not give: the deepest test present wins.
LEVEL_TESTS = {
    4: {"memtest", "pulse_test", "eud", "eud_test", "cpu_eud", "nvbandwidth"},
    3: {"targeted_stress", "targeted_power", "memory_bandwidth", "sm_stress"},
    2: {"diagnostic", "pcie", "memory", "gpu_memory", "context_create", "nccl_tests"},
}


def infer_level(doc: DiagDocument) -> int:
    present = {name_key(t.name) for t in doc.tests if any(r.status in ("pass", "fail", "warn") for r in t.results)}
    for level in (4, 3, 2):
        if present & LEVEL_TESTS[level]:
            return level
    return 1
