"""Celery beat entries of telemetry, merged into CELERY_BEAT_SCHEDULE by the settings.

Plain data (no Django imports): the settings module reads it before apps are loaded.
"""

BEAT_SCHEDULE: dict[str, dict] = {}
