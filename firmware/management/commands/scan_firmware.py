"""``manage.py scan_firmware [HOSTNAME ...]``: read the Redfish FirmwareInventory of servers' BMCs (all servers
with a BMC address when no hostname is given) and record the versions they report."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from firmware.services.observations import firmware_inventory_scan
from fleet.audit import audit_source
from fleet.models import AuditSource
from inventory.models import Server


class Command(BaseCommand):
    help = "Record the firmware versions servers' BMCs report in their Redfish FirmwareInventory."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("hostnames", nargs="*", help="Servers to scan (default: every server with a BMC address)")

    def handle(self, *args: Any, hostnames: list[str], **options: Any) -> None:
        if hostnames:
            wanted = {h.strip().lower() for h in hostnames}
            servers = list(Server.objects.filter(hostname__in=wanted).order_by("hostname"))
            missing = wanted - {s.hostname for s in servers}
            if missing:
                raise CommandError(f"Unknown server(s): {', '.join(sorted(missing))}")
        else:
            servers = list(Server.objects.exclude(bmc_address="").order_by("hostname"))
        with audit_source(AuditSource.CLI):
            result = firmware_inventory_scan(servers=servers, actor=None)
        self.stdout.write(f"Scanned {result.scanned} of {len(servers)} servers, {result.recorded} versions recorded.")
        for hostname, error in sorted(result.failed.items()):
            self.stderr.write(f"{hostname}: {error}")
        if result.failed and not result.scanned:
            raise CommandError("No BMC answered.")
