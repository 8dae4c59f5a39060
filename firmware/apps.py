from django.apps import AppConfig


class FirmwareConfig(AppConfig):
    name = "firmware"

    def ready(self) -> None:
        from firmware.approvals import approvals_register

        approvals_register()
