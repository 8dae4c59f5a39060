from django.apps import AppConfig


class DecommissionConfig(AppConfig):
    name = "decommission"

    def ready(self) -> None:
        from decommission.approvals import approvals_register

        approvals_register()
        from decommission.guards import gpu_certified_guard
        from inventory.lifecycle import register_guard
        from inventory.models import GpuState

        register_guard(GpuState.SANITIZED, gpu_certified_guard)
        register_guard(GpuState.DISPOSED, gpu_certified_guard)
