"""``manage.py verify_certificate FILE [--key PUBLIC_KEY_FILE]``: verify a signed certificate offline.

Exit 0 when valid; 1 with the reasons otherwise. ``--key`` takes the JSON ``certificate_public_key`` prints (or
one raw base64 Ed25519 key with ``--key-id``); without it, the public keys in Fleet's database are used."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from decommission.files import keys_from_file
from decommission.selectors import public_keys
from decommission.verify import verify_document


class Command(BaseCommand):
    help = "Verify a signed certificate file offline (exit 0 valid, 1 invalid with the reasons)."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("file")
        parser.add_argument("--key", help="Public keys file (certificate_public_key's JSON output)")

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        path = Path(opts["file"])
        try:
            doc = json.loads(path.read_bytes())
        except FileNotFoundError:
            raise CommandError(f"{path}: no such file.") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            self.stderr.write(f"INVALID {path}: not JSON ({exc})")
            sys.exit(1)
        try:
            keys = keys_from_file(Path(opts["key"])) if opts["key"] else public_keys()
        except (OSError, ValueError) as exc:
            raise CommandError(f"--key {opts['key']}: {exc}") from None
        problems = verify_document(doc, keys)
        if problems:
            for problem in problems:
                self.stderr.write(f"INVALID {path}: {problem}")
            sys.exit(1)
        cert = doc["certificate"]
        self.stdout.write(f"VALID {path}: certificate {cert['certificate_id']} ({cert['kind']}), "
                          f"key {cert['key_id']}")
