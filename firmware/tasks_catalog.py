"""Celery task of the firmware catalog (autodiscovery reads ``firmware/tasks.py``, which imports this)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from fleet.audit import audit_source


@shared_task(name="firmware.tasks.compliance_recompute_task")
def compliance_recompute_task() -> dict[str, Any]:
    """Rewrite the compliance tables (beat: every 10 minutes). Safe to run twice: each run rewrites the whole
    table under an advisory lock."""
    from firmware.services.compliance import compliance_recompute

    with audit_source("worker"):
        return compliance_recompute()
