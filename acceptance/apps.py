from django.apps import AppConfig


class AcceptanceConfig(AppConfig):
    name = "acceptance"
    verbose_name = "Acceptance and burn-in"

    def ready(self) -> None:
        from acceptance.gate import burn_in_gate
        from acceptance.panels import panels_register
        from inventory.lifecycle import gate_register

        gate_register(burn_in_gate)
        panels_register()
