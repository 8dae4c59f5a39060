from django.apps import AppConfig


class ProcurementConfig(AppConfig):
    name = "procurement"
