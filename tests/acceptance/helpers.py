"""Acceptance test helpers: fixture documents and a passing run for any set of GPUs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from acceptance import services
from fleet.audit import SYSTEM

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "dcgm-diag"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def doc4(statuses: dict[int, str], *, serials: dict[int, str] | None = None, tests: tuple[str, ...] = (
        "software", "memory", "diagnostic", "targeted_stress"), version: str = "4.2.3") -> dict[str, Any]:
    """A DCGM 4.x document (NVIDIA's schema) where every test of GPU ``i`` has ``statuses[i]``."""
    def result(i: int, test: str) -> dict[str, Any]:
        status = statuses[i] if test != "software" else "Pass"
        out: dict[str, Any] = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": i, "status": status}
        if status == "Fail":
            out["warnings"] = [{"error_category": 3, "error_id": 95, "error_severity": 2,
                                "warning": f"A memory mismatch was detected on GPU {i}"}]
        return out
    doc: dict[str, Any] = {"DCGM Diagnostic": {"test_categories": [
        {"category": "Tests", "tests": [{"name": t, "results": [result(i, t) for i in sorted(statuses)]}
                                        for t in tests]}]},
        "metadata": {"version": version, "Driver Version Detected": "570.124.06"}}
    if serials:
        doc["entity_groups"] = [{"entity_group": "GPU", "entity_group_id": 1, "entities": [
            {"entity_id": i, "serial_num": s} for i, s in serials.items()]}]
    return doc


def pass_run(gpus, *, level: int = 3, ran_at=None):
    """One passing level-``level`` run for ``gpus`` (placed by serial)."""
    gpus = list(gpus)
    document = doc4({i: "Pass" for i in range(len(gpus))}, serials={i: g.serial for i, g in enumerate(gpus)})
    return services.diag_ingest(document=json.dumps(document), server=None, level=level, ran_at=ran_at,
                                source="test", actor=SYSTEM)
