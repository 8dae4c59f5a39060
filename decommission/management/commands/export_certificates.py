"""``manage.py export_certificates [--request ID] --dir DIR``: each certificate as a signed JSON file."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from decommission.files import certificate_filename, certificate_json
from decommission.models import DecommissionRequest
from decommission.selectors import certificates_for


class Command(BaseCommand):
    help = "Write every certificate (or a request's) as a signed JSON file into DIR."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--request", type=int, help="Only this request's certificates (its number, DR-<n>)")
        parser.add_argument("--dir", required=True, help="Directory to write into (created if missing)")

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        request = None
        if opts["request"] is not None:
            request = DecommissionRequest.objects.filter(pk=opts["request"]).first()
            if request is None:
                raise CommandError(f"--request {opts['request']}: no such decommission request.")
        directory = Path(opts["dir"])
        directory.mkdir(parents=True, exist_ok=True)
        count = 0
        for cert in certificates_for(request=request).iterator():
            (directory / certificate_filename(cert)).write_bytes(certificate_json(cert))
            count += 1
        self.stdout.write(f"wrote {count} certificate files to {directory}")
