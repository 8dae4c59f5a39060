"""Celery beat entries of the procurement app, merged into CELERY_BEAT_SCHEDULE by the settings.

Plain data (no Django imports): the settings module reads it before apps are loaded.
"""

from celery.schedules import crontab

BEAT_SCHEDULE: dict[str, dict] = {
    # Every scope's spares forecast (about 1 s at 100,000 GPUs with 5 years of history), stored with its inputs.
    "procurement-forecast-nightly": {"task": "procurement.tasks.forecast_compute_task",
                                     "schedule": crontab(hour=2, minute=30)},
}
