"""``manage.py bootstrap [--demo-gpus N]``: first-run set-up, safe to run on every start (``make run`` does).

1. Role groups and their permissions (``roles_sync``).
2. The admin account, if missing: ``FLEET_ADMIN_USER`` / ``FLEET_ADMIN_PASSWORD``, else ``admin`` with a
   generated password written to ``var/admin-password`` (mode 600). An existing account is never changed.
3. The firmware component specs (how each component updates and activates), if missing.
4. With ``--demo-gpus N`` and an empty inventory: the demo fleet (``seed_demo``), one demo user per role
   (``viewer``, ``operator``, ``approver``) sharing a generated password kept in ``var/demo-password``, the
   firmware catalog with baselines and drift (``firmware_demo_seed``), 24 hours of telemetry with a heat wave
   moving through the racks (``telemetry_demo_backfill``, which also registers the Procfile's demo exporter as
   a scrape source), and a small rollout on BMCs of the Procfile's simulator (``rollout_demo_create``) that
   beat's tick carries out.

A second run changes nothing and prints where the passwords are.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from acceptance.demo import acceptance_demo_seed
from decommission.demo import decommission_demo_seed
from firmware.demo import firmware_demo_seed, rollout_demo_create
from firmware.services.catalog import component_specs_ensure
from fleet.audit import SYSTEM
from fleet.roles import ADMIN, APPROVER, OPERATOR, VIEWER, roles_sync, user_set_role
from inventory.demo import inventory_is_empty
from inventory.models import Gpu
from procurement.demo import procurement_demo_seed
from telemetry.demo import telemetry_demo_backfill
from telemetry.health import health_evaluate

DEMO_ROLES = (VIEWER, OPERATOR, APPROVER)


def _write_secret(path: Path, value: str) -> None:
    """Write ``value`` to ``path`` readable by the owner only (created 600, never world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    path.chmod(0o600)


class Command(BaseCommand):
    help = "Create the role groups and the admin account, and load the demo fleet into an empty inventory."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--demo-gpus", type=int, default=0,
                            help="Load a demo fleet of this many GPUs when the inventory is empty (default 0: none).")
        parser.add_argument("--demo-seed", type=int, default=1, help="Random seed of the demo fleet (default 1).")

    def handle(self, *args: Any, demo_gpus: int, demo_seed: int, **options: Any) -> None:
        self.url = f"http://127.0.0.1:{os.environ.get('PORT', '8000')}/"
        self.var = Path(settings.VAR_DIR)
        self.credentials: list[str] = []
        roles_sync()
        self.admin()
        component_specs_ensure(actor=SYSTEM)
        if demo_gpus > 0:
            self.demo(demo_gpus, demo_seed)
        # Last, so the demo's output does not scroll them away before `make run` starts the servers; printed
        # only by the run that creates the accounts (later runs say where the passwords are kept).
        for line in self.credentials:
            self.stdout.write(self.style.SUCCESS(line))

    def admin(self) -> None:
        username = os.environ.get("FLEET_ADMIN_USER", "").strip() or "admin"
        given = os.environ.get("FLEET_ADMIN_PASSWORD", "")
        path = self.var / "admin-password"
        User = get_user_model()
        if User.objects.filter(username=username).exists():
            where = "FLEET_ADMIN_PASSWORD" if given else (str(path) if path.exists() else "unchanged, set by you")
            self.stdout.write(f"Admin account '{username}' exists (password: {where}). Log in at {self.url}")
            return
        password = given or secrets.token_urlsafe(12)
        with transaction.atomic():
            user = User.objects.create_superuser(username=username, email="", password=password)
            user_set_role(user, ADMIN)
        if given:
            self.stdout.write(self.style.SUCCESS(
                f"Created admin account '{username}' with the password from FLEET_ADMIN_PASSWORD. Log in at {self.url}"))
            return
        _write_secret(path, password)
        self.stdout.write(self.style.SUCCESS(f"Created admin account; password saved in {path}"))
        self.credentials.append(f"Log in at {self.url} as {username} / {password}")

    def demo(self, gpus: int, seed: int) -> None:
        if not inventory_is_empty():
            self.stdout.write(f"Inventory is not empty ({Gpu.objects.count():,} GPUs): demo fleet not loaded.")
            demo_path = self.var / "demo-password"
            if demo_path.exists():
                self.stdout.write(f"Demo users {', '.join(DEMO_ROLES)}: password in {demo_path}")
            return
        call_command("seed_demo", gpus=gpus, seed=seed, stdout=self.stdout, stderr=self.stderr)
        User = get_user_model()
        password = secrets.token_urlsafe(12)
        created: list[AbstractBaseUser] = []
        with transaction.atomic():
            for role in DEMO_ROLES:
                if not User.objects.filter(username=role).exists():
                    user = User.objects.create_user(username=role, password=password)
                    user_set_role(user, role)
                    created.append(user)
        if created:
            path = self.var / "demo-password"
            _write_secret(path, password)
            names = ", ".join(u.get_username() for u in created)
            self.stdout.write(self.style.SUCCESS(f"Demo users {names} (one per role), password saved in {path}"))
            self.credentials.append(f"Demo users: log in as viewer / {password} (same password for {names})")
        self.demo_firmware_and_telemetry()

    def demo_firmware_and_telemetry(self) -> None:
        firmware = firmware_demo_seed(actor=SYSTEM)
        self.stdout.write(f"Firmware catalog: {firmware}")
        telemetry = telemetry_demo_backfill(hours=24, actor=SYSTEM)
        self.stdout.write(f"Telemetry: {telemetry['samples']:,} samples over 24 h for {telemetry['gpus']:,} GPUs")
        health = health_evaluate()  # the Health page is populated from the start; beat re-evaluates every 5 minutes
        flags = ", ".join(f"{n} {kind}" for kind, n in health["candidates"].items()) or "none"
        self.stdout.write(f"Health: {health['raised']} GPUs flagged ({flags})")
        self.stdout.write(f"Procurement: {procurement_demo_seed(actor=SYSTEM)}")
        self.stdout.write(f"Acceptance: {acceptance_demo_seed(actor=SYSTEM)}")
        rollout = rollout_demo_create(simulator_url=settings.FLEET_DEMO_BMC_URL, actor=SYSTEM)
        if rollout is not None:
            self.stdout.write(f"Demo rollout '{rollout.name}' ({rollout.get_state_display()}) on the BMC simulator "
                              f"at {settings.FLEET_DEMO_BMC_URL}")
        decommission = decommission_demo_seed(simulator_url=settings.FLEET_DEMO_BMC_URL, actor=SYSTEM)
        if decommission:
            self.stdout.write(f"Decommission: DR-{decommission['closed']} closed and certified, "
                              f"DR-{decommission['in_progress']} in progress on the BMC simulator")
