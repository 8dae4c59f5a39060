"""Every beat entry names a task the worker registers (a task module outside ``<app>.tasks`` is easy to miss)."""

from django.conf import settings

from fleet.celery import app


def test_every_beat_entry_names_a_registered_task() -> None:
    app.loader.import_default_modules()
    missing = {name: entry["task"] for name, entry in settings.CELERY_BEAT_SCHEDULE.items()
               if entry["task"] not in app.tasks}
    assert missing == {}
