from django.apps import AppConfig


class ProcurementConfig(AppConfig):
    name = "procurement"
    verbose_name = "Procurement"

    def ready(self) -> None:
        from procurement.panels import panels_register

        panels_register()
        from procurement.approvals import approvals_register

        approvals_register()
