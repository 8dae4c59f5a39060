"""``python manage.py import_history PATH [--create-missing]``: a fleet's failure history from a CSV."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.audit import SystemActor, audit_source
from fleet.models import AuditSource
from procurement.services.history import history_import


class Command(BaseCommand):
    help = ("Import failure history: CSV serial,model,site,in_service_at,failed_at,removed_at,cause[,batch]. "
            "Whole file or nothing; re-import changes nothing. Causes are mapped through a synonym table "
            "(DBE, OTB, XID 79, ...); unknown labels are kept as class other and listed in the notice.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path")
        parser.add_argument("--create-missing", action="store_true", help="Create unknown sites and models")

    def handle(self, *args, path: str, create_missing: bool, **options) -> None:  # type: ignore[no-untyped-def]
        try:
            text = Path(path).read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"{path}: {exc}") from exc
        with audit_source(AuditSource.CLI):
            result = history_import(text=text, create_missing=create_missing, actor=SystemActor("import_history"))
        if not result.ok:
            shown = "\n".join(f"{path}: {e}" for e in result.errors[:50])
            more = f"\n... and {len(result.errors) - 50} more" if len(result.errors) > 50 else ""
            raise CommandError(f"{len(result.errors)} error(s), nothing imported:\n{shown}{more}")
        self.stdout.write(f"{result.rows} rows: {result.created} GPUs created ({result.failures} failures), "
                          f"{result.unchanged} unchanged; new sites {result.created_sites or 'none'}, "
                          f"new models {result.created_models or 'none'}.")
        self.stdout.write(f"Notice: {result.notice}.")
