"""The demo fleet: a realistic, deterministic inventory for demos, the UI and the benchmark.

Same ``gpus`` and ``seed`` give the same sites, racks, hostnames, serials, UUIDs, states, firmware
and history. Times are offsets from midnight UTC of the day the seed runs, so two runs on one day
are identical field for field; only ``created_at``/``updated_at`` and the audit time record when
the seed really ran.

Writes: on PostgreSQL every table goes in through ``COPY`` (ids reserved from the sequences first),
elsewhere through ``bulk_create``; all in one transaction, audited: one ``create`` event per created
object, GPUs included, plus one summarising ``import`` event. Measured on the 2-core bench machine:
100,000 GPUs (1.03M rows, 128k audit events) in 23 s, 31 s with three other test suites running.

Modules: :mod:`.catalog` (what the fleet is made of), :mod:`.builder` (what to write), :mod:`.writer` (how).
"""

from __future__ import annotations

import time

from django.db import transaction

from fleet.audit import Actor
from inventory.models import Gpu, Server, Site
from inventory.seed.builder import Builder
from inventory.seed.plans import SeedResult
from inventory.seed.writer import Writer

__all__ = ["SeedError", "SeedResult", "demo_seed", "inventory_is_empty"]


class SeedError(Exception):
    """The demo fleet cannot be seeded here (the inventory is not empty, or bad arguments)."""


def inventory_is_empty() -> bool:
    return not (Gpu.objects.exists() or Server.objects.exists() or Site.objects.exists())


def demo_seed(*, gpus: int, seed: int = 1, actor: Actor, analyze: bool = True) -> SeedResult:
    """Fill an empty inventory with a demo fleet of ``gpus`` GPUs, in one transaction.

    Refuses a non-empty inventory (any site, server or GPU) with :class:`SeedError`. ``seconds``
    includes the commit, where PostgreSQL runs the deferred foreign-key checks (~20% of the time).
    """
    started = time.perf_counter()
    if gpus < 0:
        raise SeedError("--gpus must be 0 or more.")
    writer = Writer()
    with transaction.atomic():
        writer.lock()
        if not inventory_is_empty():
            raise SeedError(
                f"The inventory is not empty ({Gpu.objects.count()} GPUs, {Server.objects.count()} servers, "
                f"{Site.objects.count()} sites): seed_demo only fills an empty database. "
                "Seed a fresh database, or empty this one first (manage.py flush)."
            )
        result = Builder(gpus=gpus, seed=seed, actor=actor, writer=writer).build()
        if analyze:
            writer.analyze()
        committing = time.perf_counter()
    result.phases.update(writer.timings)
    result.phases["commit"] = time.perf_counter() - committing
    result.seconds = time.perf_counter() - started
    return result

