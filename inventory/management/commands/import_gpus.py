"""``manage.py import_gpus PATH [PATH ...] [--server HOSTNAME | --server-from-filename] [--format ...] [--dry-run]``:
import GPUs from files (or every file in a directory), all together or, on any error, not at all."""

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
from inventory.imports import ImportFile, gpus_import_many


class Command(BaseCommand):
    help = ("Import GPUs from nvidia-smi -q -x XML, nvidia-smi --query-gpu CSV or Fleet CSV. The whole file is "
            "imported or, on any error, nothing; importing the same file twice changes nothing.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", metavar="PATH",
                            help="Files or directories (every file in it) to import together; '-' reads standard "
                                 "input.")
        servers = parser.add_mutually_exclusive_group()
        servers.add_argument("--server", default="", metavar="HOSTNAME",
                             help="The server the file came from (nvidia-smi output does not name it). A server "
                                  "Fleet doesn't know is created without a rack position. Without a server, new "
                                  "GPUs are created unplaced and known GPUs keep their placement. One file only.")
        servers.add_argument("--server-from-filename", action="store_true",
                             help="Each file's server is its name without the extension (node0042.xml is from "
                                  "node0042), as `nvidia-smi -q -x > $(hostname).xml` on every host leaves them.")
        parser.add_argument("--format", dest="fmt", default="auto", choices=["auto", *FORMATS],
                            help="Default: detected from the content.")
        parser.add_argument("--dry-run", action="store_true", help="Show what would change; write nothing.")

    def handle(self, *args: Any, paths: list[str], server: str, server_from_filename: bool, fmt: str,
               dry_run: bool, **options: Any) -> None:
        files = [file for path in paths for file in self._expand(path)]
        if server and len(files) > 1:
            raise CommandError("--server names the server of one file; with several, use --server-from-filename.")
        files = [ImportFile("<stdin>" if name == "-" else name, self._read(name),
                            Path(name).stem if server_from_filename else server) for name in files]
        filename = files[0].filename if len(files) == 1 else f"{len(files)} files"
        with audit_source(AuditSource.CLI):
            result = gpus_import_many(files=files, fmt=fmt, actor=SystemActor(f"cli:{_os_user()}"), dry_run=dry_run)
        for notice in result.notices:
            self.stderr.write(f"notice: {notice}")
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

    def _expand(self, path: str) -> list[str]:
        if path != "-" and Path(path).is_dir():
            names = sorted(str(p) for p in Path(path).iterdir() if p.is_file() and not p.name.startswith("."))
            if not names:
                raise CommandError(f"{path}: no files in this directory.")
            return names
        return [path]

    def _read(self, path: str) -> bytes:
        limit = settings.FLEET_IMPORT_MAX_BYTES
        if path == "-":
            return sys.stdin.buffer.read(limit + 1)
        file = Path(path)
        try:
            size = file.stat().st_size
            if size > limit:
                raise CommandError(f"{path}: {size:,} bytes is larger than the import limit of {limit:,} bytes "
                                   "(FLEET_IMPORT_MAX_BYTES).")
            return file.read_bytes()
        except OSError as exc:
            raise CommandError(f"{path}: {exc.strerror or exc}") from exc


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
