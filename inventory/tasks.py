"""Inventory's Celery tasks: none of its own. Its background work (bulk GPU transitions) runs as a ``fleet.jobs``
job kind registered in ``InventoryConfig.ready()``, whose chunks ``fleet.tasks`` runs."""
