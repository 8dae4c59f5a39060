"""``manage.py bmc_simulator --port 8100 --bmcs 64 --profile hgx-h100 [--task-seconds 2] [--seed 1]``:
the BMC simulator in the foreground (the same as ``python -m firmware.simulator``)."""

from django.core.management.base import BaseCommand

from fleet.bmcsim import cli


class Command(BaseCommand):
    help = "Serve many virtual Redfish BMCs on one port (firmware rollout tests, demo and benchmark)."

    def add_arguments(self, parser):
        cli.add_arguments(parser)

    def handle(self, *args, **options):
        cli.run(options, out=self.stdout)
