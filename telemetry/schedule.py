"""Celery beat entries of telemetry, merged into CELERY_BEAT_SCHEDULE by the settings.

Plain data (no Django imports): the settings module reads it before apps are loaded.
"""

BEAT_SCHEDULE: dict[str, dict] = {
    # Claims due scrape sources and sends them 256 per message (dcgm-exporter's default interval is 30 s).
    "telemetry-scrape": {"task": "telemetry.tasks.telemetry_scrape_task", "schedule": 30.0},
    # Merges the ingest inbox into the raw, counter, XID and latest-value tables: the live heatmap and
    # "current" columns lag ingest by at most this much (plus the merge's own time).
    "telemetry-merge": {"task": "telemetry.tasks.telemetry_merge_task", "schedule": 15.0},
    # Rolls up complete 5-minute buckets (after FLEET_TELEMETRY_ROLLUP_GRACE) and hours.
    "telemetry-rollup": {"task": "telemetry.tasks.telemetry_rollup_task", "schedule": 60.0},
    # Creates partitions ahead, drops expired ones.
    "telemetry-partitions": {"task": "telemetry.tasks.telemetry_partitions_task", "schedule": 3600.0},
    # Compacts raw days older than FLEET_TELEMETRY_COMPACT_AFTER_DAYS into one row per GPU and day.
    "telemetry-compact": {"task": "telemetry.tasks.telemetry_compact_task", "schedule": 3600.0},
    # Raises, refreshes and clears health flags (RMA criteria, error-rate and thermal outliers), set-based.
    "health-evaluate": {"task": "telemetry.tasks.health_evaluate_task", "schedule": 300.0},
}
