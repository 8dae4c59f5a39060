"""``python manage.py ingest_diag PATH --host HOSTNAME [--level N]``: record a ``dcgmi diag -j`` result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from acceptance.services import diag_ingest
from fleet.audit import SystemActor, audit_source
from fleet.models import AuditSource
from inventory.models import Server


class Command(BaseCommand):
    help = "Record a dcgmi diag -j result (DCGM 3.x or 4.x) against a host's GPUs; nothing is written when refused."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="The JSON file dcgmi diag -j wrote ('-' for standard input)")
        parser.add_argument("--host", default="", help="Hostname the run was on (GPUs are placed by its slots "
                                                       "when the document has no serials)")
        parser.add_argument("--level", type=int, choices=[1, 2, 3, 4], help="dcgmi diag -r level (default: read "
                                                                             "from the tests)")

    def handle(self, *args: Any, **options: Any) -> None:
        path = options["path"]
        try:
            text = self.stdin.read() if path == "-" else Path(path).read_bytes()
        except OSError as exc:
            raise CommandError(f"{path}: {exc.strerror}") from exc
        server = None
        if options["host"]:
            server = Server.objects.filter(hostname=options["host"].strip().lower()).first()
            if server is None:
                raise CommandError(f"No server named {options['host']!r}.")
        try:
            with audit_source(AuditSource.CLI):
                run = diag_ingest(document=text, server=server, level=options["level"], source="command",
                                  actor=SystemActor("ingest_diag"))
        except ValidationError as exc:
            raise CommandError(f"{path}: " + " ".join(exc.messages)) from exc
        verdicts = ", ".join(f"GPU {v.entity_id} {v.verdict}" for v in run.gpus.order_by("entity_id"))
        self.stdout.write(f"Run #{run.pk} recorded: level {run.level}, DCGM {run.dcgm_version or '?'}; {verdicts}")
