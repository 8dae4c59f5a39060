from django.apps import AppConfig


class ProcurementConfig(AppConfig):
    name = "procurement"
    verbose_name = "Procurement"

    def ready(self) -> None:
        from procurement.panels import panels_register

        panels_register()
