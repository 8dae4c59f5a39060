from django.apps import AppConfig


class FirmwareConfig(AppConfig):
    name = "firmware"
