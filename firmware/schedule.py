"""Celery beat entries of the firmware app, merged into CELERY_BEAT_SCHEDULE by the settings.

Plain data (no Django imports): the settings module reads it before apps are loaded.
"""

import os

_TICK = float(os.environ.get("FLEET_ROLLOUT_TICK_SECONDS", "5"))

BEAT_SCHEDULE: dict[str, dict] = {
    # Picks due rollout targets (SELECT ... FOR UPDATE SKIP LOCKED), evaluates wave gates, enqueues steps.
    # A tick not started within one period is dropped: the next one does the same work.
    "rollout-tick": {"task": "firmware.tasks.rollout_tick_task", "schedule": _TICK, "options": {"expires": _TICK}},
    # Rewrites the compliance tables (set-based, ~1-2 s at 100,000 GPUs) for the drift report and labels.
    "compliance-recompute": {"task": "firmware.tasks.compliance_recompute_task", "schedule": 600.0},
    # Reads every BMC's Redfish FirmwareInventory (chunked fan-out) so observed versions stay current.
    "firmware-inventory-scan": {"task": "firmware.tasks.firmware_inventory_scan_task", "schedule": 6 * 3600.0},
}
