"""``dcgmi diag -j`` documents of DCGM 3.x and 4.x, real and schema-built (tests/fixtures/dcgm-diag/SOURCES.md)."""

from __future__ import annotations

import json

import pytest

from acceptance.parsers import DiagParseError, infer_level, name_key, parse_diag, status_of
from tests.acceptance.helpers import fixture

# Every whole document captured from a real dcgmi (sources in tests/fixtures/dcgm-diag/SOURCES.md), with what a
# person reads in it: DCGM version, GPUs, tests, per-GPU results, and the results by status word.
REAL_DOCUMENTS = {
    "dcgm3-virtualclient-r2.json": ("", 1, 11, 11, {"pass": 11}),
    "dcgm3-virtualclient-r3-skip.json": ("", 1, 16, 16, {"pass": 15, "skip": 1}),
    "dcgm3-virtualclient-failed-malformed.json": ("", 1, 11, 11, {"pass": 10, "fail": 1}),
    "dcgm3.1.0-nvidia-jsonresult-8gpu.txt": ("3.1.0", 8, 10, 80, {"pass": 80}),
    "dcgm4.2.3-glimmer-gb10-level1.json": ("4.2.3", 1, 1, 1, {"fail": 1}),
    "dcgm4.2.3-glimmer-gb10-level2-partial-skip.json": ("4.2.3", 1, 3, 3, {"fail": 1, "skip": 2}),
    "dcgm4.5.2-glimmer-gb10-level2-plugins-gated.json": ("4.5.2", 1, 3, 3, {"fail": 1, "skip": 2}),
    "dcgm4.5.2-glimmer-gb10-level2-plugins-allowed.json": ("4.5.2", 1, 3, 3, {"fail": 1, "pass": 2}),
}


def plain_reading(text: str) -> tuple[str, int, int, int, dict[str, int]]:
    """The same numbers read with nothing but ``json``: not through the parser under test."""
    data = json.loads(text[text.index("{"):])  # 3.1.0 prints a banner line first
    root = data.get("DCGM Diagnostic", data.get("DCGM GPU Diagnostic"))
    categories = root if isinstance(root, list) else root["test_categories"]
    tests = [t for c in categories for t in c["tests"] if t is not None]
    results = [r for t in tests for r in t["results"]]
    gpus: set[int] = set()
    statuses: dict[str, int] = {}
    count = 0
    for r in results:
        if "entity_id" in r:  # 4.x: one result per entity
            ids = [r["entity_id"]]
        elif "gpu_ids" in r:  # 3.x: "0,1,2" or an integer
            ids = [int(i) for i in str(r["gpu_ids"]).split(",")]
        else:  # 3.x Deployment checks without ids: one result for the whole run
            ids = []
        gpus.update(ids)
        count += max(len(ids), 1)
        statuses[r["status"].lower()] = statuses.get(r["status"].lower(), 0) + max(len(ids), 1)
    for group in data.get("entity_groups", []):
        gpus.update(e["entity_id"] for e in group["entities"] if group["entity_group"] == "GPU")
    version = data.get("metadata", {}).get("version") or (root.get("version", "") if isinstance(root, dict) else "")
    return version, len(gpus), len(tests), count, statuses


@pytest.mark.parametrize("name", sorted(REAL_DOCUMENTS))
def test_every_real_document_parses_to_what_it_says(name):
    text = fixture(name)
    assert plain_reading(text) == REAL_DOCUMENTS[name]  # the table above agrees with the file
    doc = parse_diag(text)
    version, gpus, tests, results, statuses = REAL_DOCUMENTS[name]
    assert doc.dcgm_version == version and doc.major == (int(version[0]) if version else 3)
    assert len(doc.gpu_ids) == gpus and len(doc.tests) == tests
    assert sum(len(t.results) for t in doc.tests) == results
    parsed: dict[str, int] = {}
    for t in doc.tests:
        for r in t.results:
            parsed[r.status] = parsed.get(r.status, 0) + 1
    assert parsed == statuses
    assert doc.raw == json.loads(text[text.index("{"):])  # kept whole, verbatim


def test_real_dcgm4_gb10_config_failure_skips_and_not_supported_serial():
    level1 = parse_diag(fixture("dcgm4.2.3-glimmer-gb10-level1.json"))
    assert (level1.driver_version, level1.gpu_ids, level1.serials) == ("580.82.09", [0], {})  # <<<NOT_SUPPORTED>>>
    software = level1.tests[0].results[0]
    assert (software.status, software.error_ids) == ("fail", [29]) and "Persistence mode" in software.messages[0]
    assert software.raw["warnings"][0]["error_severity"] == 5  # kept for a reader; the run still failed
    gated = parse_diag(fixture("dcgm4.5.2-glimmer-gb10-level2-plugins-gated.json"))
    allowed = parse_diag(fixture("dcgm4.5.2-glimmer-gb10-level2-plugins-allowed.json"))
    assert by_test(gated)["memory"] == by_test(gated)["pcie"] == [(0, "skip")]
    assert infer_level(gated) == 1  # level 2 was asked for, but no level-2 test ran
    assert by_test(allowed)["memory"] == by_test(allowed)["pcie"] == [(0, "pass")]
    assert infer_level(allowed) == 2
    assert allowed.tests[0].raw["test_summary"]["warnings"][0]["error_id"] == 29  # 4.5.2's summary, verbatim


def by_test(doc):
    return {t.name: [(r.entity_id, r.status) for r in t.results] for t in doc.tests}


def test_dcgm3_level2_one_gpu_deployment_results_cover_every_gpu():
    doc = parse_diag(fixture("dcgm3-virtualclient-r2.json"))
    assert doc.major == 3 and doc.gpu_ids == [0] and doc.runtime_error == ""
    tests = by_test(doc)
    assert tests["Denylist"] == [(None, "pass")]  # no gpu_ids: the whole run
    assert tests["PCIe"] == [(0, "pass")] and tests["GPU Memory"] == [(0, "pass")]
    assert len(doc.tests) == 11 and infer_level(doc) == 2


def test_dcgm3_level3_with_a_skipped_test():
    doc = parse_diag(fixture("dcgm3-virtualclient-r3-skip.json"))
    assert by_test(doc)["EUD Test"] == [(0, "skip")]
    assert by_test(doc)["Memory Bandwidth"] == [(0, "pass")]
    assert infer_level(doc) == 3  # the skipped EUD test does not make it a level-4 run


def test_dcgm3_failed_test_with_string_warning_and_categories_without_key():
    doc = parse_diag(fixture("dcgm3-virtualclient-failed-malformed.json"))
    failed = [(t.name, r) for t in doc.tests for r in t.results if r.status == "fail"]
    assert [name for name, _ in failed] == ["CUDA Main Library"]
    assert "libcuda.so" in failed[0][1].messages[0]


def test_dcgm3_1_0_real_output_with_banner_nulls_and_integer_gpu_ids():
    doc = parse_diag(fixture("dcgm3.1.0-nvidia-jsonresult-8gpu.txt"))
    assert doc.dcgm_version == "3.1.0" and doc.major == 3
    assert doc.gpu_ids == list(range(8))
    assert by_test(doc)["Inforom"] == [(i, "pass") for i in range(8)]  # "0,1,...,7" expanded
    assert by_test(doc)["software"] == [(i, "pass") for i in range(8)]  # integer gpu_ids
    assert len(doc.tests) == 10  # the nulls between tests are not tests


def test_dcgm4_entities_serials_metadata_and_error_ids():
    doc = parse_diag(fixture("dcgm4-schema-level3-memory-fail.json"))
    assert (doc.major, doc.dcgm_version, doc.driver_version) == (4, "4.2.3", "570.124.06")
    assert doc.serials == {i: f"165432107{i:04d}" for i in range(4)}
    memory = next(t for t in doc.tests if t.name == "memory")
    bad = next(r for r in memory.results if r.entity_id == 1)
    assert bad.status == "fail" and bad.error_ids == [95] and "memory mismatch" in bad.messages[0]
    assert by_test(doc)["pcie"][1] == (1, "skip")
    assert infer_level(doc) == 3


def test_dcgm4_real_diagnostic_test_object_from_issue_215():
    test = json.loads(fixture("dcgm4-issue215-diagnostic-test.json"))
    doc = parse_diag({"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [test]}]},
                      "metadata": {"version": "4.1.1"}})
    assert by_test(doc)["diagnostic"] == [(i, "pass") for i in range(8)]
    assert doc.gpu_ids == list(range(8)) and doc.serials == {}


def test_unknown_tests_and_fields_are_kept_verbatim():
    doc = parse_diag(fixture("dcgm4-schema-level3-unknown-test.json"))
    sweep = next(t for t in doc.tests if t.name == "hbm_channel_sweep")
    assert sweep.category == "Future" and sweep.raw["new_field"] == {"x": 1}
    assert sweep.results[0].raw["hbm_channels_checked"] == 32
    assert doc.raw["future_top_level"] == {"anything": True}


def test_runtime_error_and_not_run():
    doc = parse_diag(fixture("dcgm4-schema-runtime-error.json"))
    assert "killed by signal 9" in doc.runtime_error
    assert {s for _, s in by_test(doc)["targeted_stress"]} == {"not_run"}


@pytest.mark.parametrize("text", ["", "Error: unable to connect to host engine", "{not json", "[1, 2]",
                                  '{"DCGM Health": {}}'])
def test_what_is_not_a_diagnostic_is_refused(text):
    with pytest.raises(DiagParseError):
        parse_diag(text)


def test_status_words_and_test_names():
    assert [status_of(w) for w in ("PASS", "Fail", "Warn", "SKIP", "Not Run", "Inconclusive", None)] == [
        "pass", "fail", "warn", "skip", "not_run", "not_run", "not_run"]
    assert name_key("Memory Bandwidth") == name_key("memory_bandwidth") == "memory_bandwidth"
