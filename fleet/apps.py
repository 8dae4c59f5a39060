from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "fleet"
    verbose_name = "Fleet core"

    def ready(self) -> None:
        from fleet.metrics import celery_signals_connect

        celery_signals_connect()
