"""A dcgm-exporter stand-in (the world, not Fleet): ``python -m world.dcgm_exporter --port 9400``.

Serves ``/metrics`` in dcgm-exporter's text format for a list of GPUs read from a file or from Fleet's REST API
(never from Fleet's database: no Django here). Prometheus can scrape it like the real exporter (the telemetry tests
do); Fleet's embedded store can scrape it too (``make run``'s demo). ``text`` builds the body; ``server`` serves it.
"""

from .gpus import gpus_from_api, gpus_from_file, write_gpus_file
from .server import ExporterServer
from .text import DEFAULT_COUNTERS, HEALTH_COUNTERS, dcgm_text_for, synthetic_gpus

__all__ = ["DEFAULT_COUNTERS", "HEALTH_COUNTERS", "ExporterServer", "dcgm_text_for", "gpus_from_api",
           "gpus_from_file", "synthetic_gpus", "write_gpus_file"]
