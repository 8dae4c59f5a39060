"""``manage.py seed_demo --gpus N [--seed S]``: fill an empty inventory with a deterministic demo fleet."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.audit import SystemActor, audit_source
from fleet.models import AuditSource
from inventory.demo import SeedError, demo_seed


class Command(BaseCommand):
    help = ("Fill an EMPTY inventory with a realistic demo fleet (sites, racks, HGX servers, GPUs, firmware, "
            "history), the same for the same --gpus and --seed. Refuses a database that already has an inventory.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--gpus", type=int, default=2000, help="How many GPUs (default 2000).")
        parser.add_argument("--seed", type=int, default=1, help="Random seed (default 1).")

    def handle(self, *args: Any, gpus: int, seed: int, **options: Any) -> None:
        if gpus < 0:
            raise CommandError("--gpus must be 0 or more.")
        try:
            with audit_source(AuditSource.CLI):
                result = demo_seed(gpus=gpus, seed=seed, actor=SystemActor("seed_demo"))
        except SeedError as exc:
            raise CommandError(str(exc)) from exc
        if options["verbosity"] >= 2:
            for phase, seconds in result.phases.items():
                self.stdout.write(f"  {phase:<40} {seconds:7.2f} s")
        self.stdout.write(self.style.SUCCESS(
            f"Seeded {result.gpus:,} GPUs in {result.servers:,} servers at {result.sites} sites "
            f"({result.total_rows:,} rows, {result.audit_events:,} audit events, {result.backend}) "
            f"in {result.seconds:.1f} s."))
