"""``manage.py certificate_public_key``: the public keys an auditor needs (retired ones too), as JSON."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from decommission.services import public_keys_document, signing_key_current, signing_key_rotate
from fleet.audit import SystemActor, audit_source
from fleet.models import AuditSource


class Command(BaseCommand):
    help = "Print every certificate signing public key (JSON, for verify_certificate --key)."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--rotate", action="store_true", help="Make a new signing key first (old ones verify)")

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        with audit_source(AuditSource.CLI):
            if opts["rotate"]:
                signing_key_rotate(actor=SystemActor("certificate_public_key"))
            else:
                signing_key_current(actor=SystemActor("certificate_public_key"))
        self.stdout.write(json.dumps(public_keys_document(), indent=2))
