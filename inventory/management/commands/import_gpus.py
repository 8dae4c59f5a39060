"""``manage.py import_gpus PATH [--server HOSTNAME] [--format ...] [--dry-run]``: import GPUs from a file."""

from __future__ import annotations

import getpass
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.audit import SystemActor, audit_source
from fleet.models import AuditSource
from inventory.importers import FORMATS
from inventory.imports import gpus_import


class Command(BaseCommand):
    help = ("Import GPUs from nvidia-smi -q -x XML, nvidia-smi --query-gpu CSV or Fleet CSV. The whole file is "
            "imported or, on any error, nothing; importing the same file twice changes nothing.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="The file to import ('-' reads standard input).")
        parser.add_argument("--server", default="", metavar="HOSTNAME",
                            help="The server the file came from (nvidia-smi output does not name it). A server "
                                 "Fleet doesn't know is created without a rack position. Without a server, new "
                                 "GPUs are created unplaced and known GPUs keep their placement.")
        parser.add_argument("--format", dest="fmt", default="auto", choices=["auto", *FORMATS],
                            help="Default: detected from the content.")
        parser.add_argument("--dry-run", action="store_true", help="Show what would change; write nothing.")

    def handle(self, *args: Any, path: str, server: str, fmt: str, dry_run: bool, **options: Any) -> None:
        content, filename = self._read(path)
        with audit_source(AuditSource.CLI):
            result = gpus_import(content=content, filename=filename, fmt=fmt, server_hint=server,
                                 actor=SystemActor(f"cli:{_os_user()}"), dry_run=dry_run)
        if result.errors:
            raise CommandError(f"{filename}: nothing imported, {len(result.errors)} error(s):\n"
                               + "\n".join(str(error) for error in result.errors))
        if options["verbosity"] >= 2:
            for row in result.rows:
                changes = ", ".join(f"{k} {v[0]!r} -> {v[1]!r}" for k, v in row["changes"].items())
                self.stdout.write(f"  line {row['line'] or '-'}: {row['action']:<9} {row['identity']} {changes}")
        prefix = "Dry run, nothing written: would have" if dry_run else "Imported"
        self.stdout.write(self.style.SUCCESS(
            f"{prefix} {result.created} created, {result.updated} updated, {result.moved} moved, "
            f"{result.unchanged} unchanged ({filename}, {result.fmt})."))
        if result.models_created:
            self.stdout.write(f"New GPU models: {', '.join(result.models_created)}.")
        if result.servers_created:
            self.stdout.write(self.style.WARNING(
                f"New servers needing a rack position: {', '.join(result.servers_created)}."))

    def _read(self, path: str) -> tuple[bytes, str]:
        limit = settings.FLEET_IMPORT_MAX_BYTES
        if path == "-":
            return sys.stdin.buffer.read(limit + 1), "<stdin>"
        file = Path(path)
        try:
            size = file.stat().st_size
            if size > limit:
                raise CommandError(f"{path}: {size:,} bytes is larger than the import limit of {limit:,} bytes "
                                   "(FLEET_IMPORT_MAX_BYTES).")
            return file.read_bytes(), path
        except OSError as exc:
            raise CommandError(f"{path}: {exc.strerror or exc}") from exc


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
