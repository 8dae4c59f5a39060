"""Inventory's demo seeding (``make run``, ``manage.py seed_demo`` / ``bootstrap --demo-gpus``): the entry points of
the demo fleet. The fleet itself is built by :mod:`inventory.seed` (a package: what the fleet is made of, what to
write, how to write it fast), which the benchmarks use as well. Demo only: no service imports this module."""

from inventory.seed import SeedError, SeedResult, demo_seed, inventory_is_empty

__all__ = ["SeedError", "SeedResult", "demo_seed", "inventory_is_empty"]
