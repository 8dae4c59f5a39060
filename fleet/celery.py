import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleet.settings")

app = Celery("fleet")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Task modules that are not ``<app>.tasks``: telemetry is a package of the inventory app, and its health
# evaluation and the firmware catalog's compliance task live in their own modules.
app.autodiscover_tasks(["inventory.telemetry"])
app.autodiscover_tasks(["inventory.telemetry"], related_name="tasks_health")
app.autodiscover_tasks(["firmware"], related_name="tasks_catalog")
