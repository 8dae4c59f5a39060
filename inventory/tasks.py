"""Inventory's Celery tasks. Its bulk GPU transitions run as a ``fleet.jobs`` job kind registered in
``InventoryConfig.ready()``, whose chunks ``fleet.tasks`` runs; the scheduler refresh (beat) is here."""

from celery import shared_task


@shared_task
def scheduler_refresh_task() -> dict[str, int]:
    """Beat: copy the scheduler's node states (and finish recorded drains and resumes); nothing without one."""
    from inventory.scheduler.refresh import scheduler_refresh

    return scheduler_refresh()
