import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleet.settings")

app = Celery("fleet")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Telemetry is a package of the inventory app, not an installed app: its ``tasks`` module is not found by the
# per-app discovery above.
app.autodiscover_tasks(["inventory.telemetry"])
