"""``manage.py ingest_telemetry PATH [PATH ...] --format ...``: telemetry files through the one ingest service.

The service writes into the inbox (on PostgreSQL); the beat's merge makes pushed data visible within ~15 s.
A command line has no beat to wait for: the command merges the inbox before it returns, so what it reports
as written is on the GPU pages and in the API when it exits (``--no-merge`` leaves it to the beat)."""

from __future__ import annotations

import getpass
import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.audit import SystemActor, audit_source
from fleet.models import AuditSource
from telemetry.models import IngestKind
from telemetry.sample import TelemetryParseError
from telemetry.services import FORMATS, ingest_source_for, telemetry_ingest, telemetry_merge


class Command(BaseCommand):
    help = ("Ingest dcgm-exporter text, nvidia-smi XML/CSV or kernel-log files. Each file is written whole or not "
            "at all; samples of unknown GPUs are counted and reported, never written.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", metavar="PATH")
        parser.add_argument("--format", dest="fmt", required=True, choices=FORMATS)
        parser.add_argument("--host", default="", metavar="HOSTNAME",
                            help="The host the files come from (nvidia-smi output and kernel logs do not name it)")
        parser.add_argument("--source", default="cli", metavar="NAME", help="Ingest source to report under")
        parser.add_argument("--json", action="store_true", help="Print one JSON summary per file")
        parser.add_argument("--no-merge", action="store_true",
                            help="Leave the samples in the inbox for the beat's merge (visible within ~15 s "
                                 "while beat runs) instead of merging them before the command returns")

    def handle(self, *args: Any, **options: Any) -> None:
        actor = SystemActor(f"cli:{getpass.getuser()}")
        with audit_source(AuditSource.CLI):
            source = ingest_source_for(name=options["source"], kind=IngestKind.FILE, actor=actor)
            failed = written = 0
            for name in options["paths"]:
                path = Path(name)
                try:
                    if path.stat().st_size > settings.FLEET_TELEMETRY_MAX_BYTES:
                        raise TelemetryParseError(f"the file is over {settings.FLEET_TELEMETRY_MAX_BYTES} bytes",
                                                  reason="body_too_large")
                    result = telemetry_ingest(source=source, content=path.read_bytes(), fmt=options["fmt"],
                                              host=options["host"] or None, filename=path.name, actor=actor)
                except OSError as exc:
                    failed += 1
                    self.stderr.write(f"{name}: cannot read: {exc.strerror or exc}")
                    continue
                except TelemetryParseError as exc:
                    failed += 1
                    where = f"line {exc.line_no}: " if exc.line_no else ""
                    self.stderr.write(f"{name}: nothing written: {where}{exc.message} ({exc.reason})")
                    continue
                summary = result.summary()
                written += summary["samples"]
                for notice in summary["notices"]:
                    self.stderr.write(f"{name}: notice: {notice}")
                if options["json"]:
                    self.stdout.write(json.dumps({"file": name, **summary}))
                else:
                    rejected = ", ".join(f"{k} {v}" for k, v in summary["rejected"].items()) or "none"
                    unknown = f" (e.g. {', '.join(summary['unknown_examples'][:3])})" if summary["unknown"] else ""
                    self.stdout.write(f"{name}: {summary['samples']} samples, {summary['xid_events']} new XID events, "
                                      f"{summary['unknown']} unknown GPUs{unknown}, rejected: {rejected}")
            if written and not options["no_merge"]:
                merged = telemetry_merge()
                self.stdout.write(f"Merged {merged.samples} samples from the inbox: visible now.")
            elif written:
                self.stdout.write("Samples left in the inbox (--no-merge): visible after the beat's next merge.")
            if failed:
                raise CommandError(f"{failed} of {len(options['paths'])} files were not ingested.")
