from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "inventory"

    def ready(self) -> None:
        from fleet.jobs import register_job_kind
        from inventory import services

        register_job_kind(services.BULK_TRANSITION_JOB, services.gpu_bulk_transition_job_chunk)
