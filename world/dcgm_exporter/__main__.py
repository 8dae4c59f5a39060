"""``python -m world.dcgm_exporter --port 9400 (--gpus-file F | --fleet-url URL [--token T] | --synthetic N) [--demo]``.

The GPU list is re-read every ``--reload`` seconds (60). ``--demo``: each GPU's values follow the demo fleet's
seeded levels and problems (``telemetry.synth``, plain Python), so the live scrapes continue ``make run``'s
backfilled history; otherwise random plausible values, new on every scrape.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import random
import sys
import threading
import time

from .gpus import Gpu, gpus_from_api, gpus_from_file
from .server import ExporterServer
from .text import dcgm_text_for, synthetic_gpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m world.dcgm_exporter", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument("--bind", default="127.0.0.1")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--gpus-file", help="uuid,hostname,pci_bus_id,model per line (or a JSON list)")
    source.add_argument("--fleet-url", help="Fleet's base URL: GPUs from GET /api/v1/gpus/")
    source.add_argument("--synthetic", type=int, metavar="N", help="N made-up GPUs, 8 per host")
    parser.add_argument("--token", default="", help="API token for --fleet-url")
    parser.add_argument("--demo", action="store_true", help="the demo fleet's values (telemetry.synth)")
    parser.add_argument("--max-gpus", type=int, default=100_000)
    parser.add_argument("--reload", type=float, default=60.0, help="seconds between re-reads of the GPU list")
    parser.add_argument("--uuid-label", default="UUID", help="the UUID label's name (uuid: --use-old-namespace)")
    args = parser.parse_args(argv)

    def load() -> list[Gpu]:
        if args.gpus_file:
            return gpus_from_file(args.gpus_file)
        if args.fleet_url:
            return gpus_from_api(args.fleet_url, token=args.token)
        return synthetic_gpus(args.synthetic, seed=1)

    state: dict = {"gpus": [], "fleet": None, "at": -1e9}
    lock = threading.Lock()
    scrapes = itertools.count(1)

    def body() -> bytes:
        with lock:
            if time.monotonic() - state["at"] > args.reload:
                try:
                    gpus = load()
                except (OSError, ValueError) as exc:  # Fleet not up yet, file not written yet: serve what we had
                    print(f"dcgm-exporter simulator: GPU list: {exc}", file=sys.stderr)
                    gpus = state["gpus"]
                if args.demo:
                    from telemetry.synth import demo_fleet  # plain Python: the demo's shared levels

                    state["fleet"] = demo_fleet([gpu[0] for gpu in gpus])  # the whole fleet's, as the backfill's
                state["gpus"], state["at"] = gpus[: args.max_gpus], time.monotonic()
            gpus, fleet = state["gpus"], state["fleet"]
        seed = next(scrapes)
        readings = None
        if fleet is not None:
            from telemetry.synth import demo_reading

            rng, now = random.Random(seed), dt.datetime.now(tz=dt.UTC)
            readings = [demo_reading(fleet[gpu[0]], at=now, heat=0.0, started=True, rng=rng) for gpu in gpus]
        return dcgm_text_for(gpus, seed=seed, health_fields=True, readings=readings,
                             uuid_label=args.uuid_label).encode()

    server = ExporterServer(body, bind=args.bind, port=args.port)
    print(f"dcgm-exporter simulator on {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
