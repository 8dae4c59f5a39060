"""Command line of the simulator: ``python -m world.bmc``."""

import argparse
import json
import signal
import sys
import threading

from .profiles import PROFILES
from .records import ManualClock
from .server import SimulatorServer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100, help="0 picks a free port (printed on the first line)")
    parser.add_argument("--bmcs", type=int, default=64, help="how many BMCs to create: <prefix>0001 ...")
    parser.add_argument("--prefix", default="bmc-")
    parser.add_argument("--profile", default="hgx-h100", choices=sorted(PROFILES))
    parser.add_argument("--task-seconds", type=float, default=2.0, help="update task duration; 0 = immediate")
    parser.add_argument("--bmc-reset-seconds", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--username", default="", help="require these credentials (default: accept any)")
    parser.add_argument("--password", default="")
    parser.add_argument("--config", help="a JSON file of further configuration keys (faults, images, ...)")
    parser.add_argument("--plugin", action="append", default=[], dest="plugins",
                        help="a module defining PLUGIN (world.bmc.Plugin); repeatable")
    parser.add_argument("--manual-clock", action="store_true",
                        help="time stands still until POST /_sim/clock/advance")
    parser.add_argument("--shared-port", action="store_true",
                        help="every BMC on the main port (a rebooting BMC then resets connections, refuses none)")
    parser.add_argument("--bmc-ports", type=json.loads, default=None, metavar="JSON",
                        help='{"<bmc id>": port, ...}: listen for these BMCs on these ports (a restart keeps URLs)')


def build(options: dict) -> SimulatorServer:
    config = {}
    if options.get("config"):
        with open(options["config"], encoding="utf-8") as fh:
            config = json.load(fh)
    config |= {"task_seconds": options["task_seconds"], "bmc_reset_seconds": options["bmc_reset_seconds"],
               "seed": options["seed"], "username": options["username"], "password": options["password"]}
    return SimulatorServer(host=options["host"], port=options["port"], bmcs=options["bmcs"],
                           profile=options["profile"], prefix=options["prefix"],
                           clock=ManualClock() if options.get("manual_clock") else None,
                           plugins=options.get("plugins") or (), shared_port=bool(options.get("shared_port")),
                           bmc_ports=options.get("bmc_ports"), **config)


def run(options: dict, out=sys.stdout) -> None:
    """Serve in the foreground until SIGINT or SIGTERM. The first line printed is the base URL."""
    server = build(options)
    url = server.bind()
    out.write(f"{url}\n")
    where = "" if options.get("shared_port") else " (each on its own port: GET /_sim/bmcs)"
    out.write(f"BMC simulator: {options['bmcs']} x {options['profile']} BMCs at <base URL>/bmc/<id>/redfish/v1"
              f"{where} (ids {options['prefix']}0001...), control API at {url}/_sim/\n")
    out.flush()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.stop).start())
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m world.bmc", description="Redfish BMC simulator")
    add_arguments(parser)
    run(vars(parser.parse_args(argv)))
