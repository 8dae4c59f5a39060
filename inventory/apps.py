from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "inventory"

    def ready(self) -> None:
        from fleet.jobs import register_job_kind
        from inventory import services

        register_job_kind(services.BULK_TRANSITION_JOB, services.gpu_bulk_transition_job_chunk)
        from inventory.heatmap_layers import heatmap_layer_register
        from inventory.scheduler.heatmap import CATEGORIES, scheduler_heatmap_values

        heatmap_layer_register("scheduler", label="Workload scheduler", unit="node state",
                               values=scheduler_heatmap_values, categories=CATEGORIES)
