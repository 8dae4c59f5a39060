from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    """Thermal and health history, an app of its own on top of inventory (label ``telemetry``; its tables were
    always named ``telemetry_*``, migration 0001 only took the models over from the inventory app's state)."""

    name = "telemetry"
    label = "telemetry"
    verbose_name = "Telemetry"

    def ready(self) -> None:
        from telemetry.panels import panels_register

        panels_register()
        from inventory.scheduler.gpus import register_return_check
        from telemetry.scheduler_guard import gpu_health_passed

        register_return_check(gpu_health_passed)
