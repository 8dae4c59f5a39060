"""Telemetry's demo seeding (``make run``): SYNTHETIC history for the demo fleet and its scrape source."""

from __future__ import annotations

import csv
import datetime as dt
import io
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from fleet.audit import Actor
from inventory.models import Gpu
from telemetry.models import IngestKind, IngestSource
from telemetry.selectors import gpus_with_identity
from telemetry.services.merge import telemetry_merge
from telemetry.services.sources import ingest_source_for, ingest_source_update
from telemetry.store import SampleRow, get_store

DEMO_SOURCE = "demo-exporter"
DEMO_URL = "http://127.0.0.1:9400/metrics"
# The demo exporter (``python -m world.dcgm_exporter --gpus-file var/demo-exporter-gpus.csv --demo``, Procfile)
# reads its GPUs from this file, written here: the world's stand-in never reads Fleet's database.
DEMO_GPUS_FILE = "demo-exporter-gpus.csv"  # in FLEET_VAR_DIR (var/)


def demo_gpus_file_write(path: Path | None = None) -> Path:
    """Write every placed GPU with a UUID as ``uuid,hostname,pci_bus_id,model`` lines for the demo exporter."""
    path = path or Path(settings.VAR_DIR) / "demo-exporter-gpus.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(gpus_with_identity())
    tmp = path.with_suffix(".tmp")
    tmp.write_text(out.getvalue())
    tmp.replace(path)
    return path


def telemetry_demo_backfill(*, hours: int = 24, actor: Actor | None = None, now: dt.datetime | None = None,
                            step_s: int = 300) -> dict[str, int]:
    """Write ``hours`` of SYNTHETIC history for the demo fleet (every placed GPU with a UUID), one sample per GPU
    every ``step_s`` seconds, through the normal write path (an hour of steps per batch and transaction), then
    roll it up; and register the ``demo-exporter`` scrape source (``python -m world.dcgm_exporter --demo``, the
    Procfile's ``exporter``) and write its GPU list (:data:`DEMO_GPUS_FILE`).

    Each GPU's level and problems come from ``synth.demo_fleet`` (shared with the demo exporter, so the live
    scrapes continue this history): about 0.5 % of the GPUs get a row-remap failure, a hardware XID (79, 48 +
    171, 74, 95), an application XID (13, 43: recorded, never flagged), a double-bit ECC error every 100
    minutes, or run 10-20 C hotter than their rack peers at the same power. A heat wave crosses the racks
    during the period (gone at both ends), so the heatmap playback shows heat moving.
    """
    import math
    import random

    from telemetry.rollup import rollup_range
    from telemetry.synth import DEMO_XID_GAP, DEMO_XIDS, demo_fleet, demo_reading

    now = now or timezone.now()
    end = now.replace(second=0, microsecond=0) - dt.timedelta(minutes=now.minute % 5)
    start = end - dt.timedelta(hours=hours)
    gpus = list(Gpu.objects.filter(server__isnull=False, uuid__isnull=False)
                .order_by("rack_id", "server_id", "module_id", "id").values_list("id", "rack_id", "uuid"))
    demo = demo_fleet([uuid for _, _, uuid in gpus])
    racks = sorted({rack for _, rack, _ in gpus if rack is not None})
    rack_pos = {rack: i / max(len(racks), 1) for i, rack in enumerate(racks)}
    rng = random.Random(1)
    steps = int(hours * 3600 // step_s)
    onsets = {uuid: int(gpu.onset * steps) for uuid, gpu in demo.items() if gpu.role}
    per_batch = max(1, 3600 // step_s)  # an hour of steps per write: one transaction, and on SQLite few commits
    store = get_store()
    samples, rows, rolled = 0, [], start
    for step in range(steps):
        ts = start + dt.timedelta(seconds=step * step_s)
        wave_at = -0.15 + 1.3 * step / max(steps - 1, 1)  # the wave's position along the racks, off them at both ends
        heats = {rack: 22 * math.exp(-((abs(pos - wave_at) * 12) ** 2)) for rack, pos in rack_pos.items()}
        for gpu_id, rack, uuid in gpus:
            heat = heats.get(rack, 0.0)
            r = demo_reading(demo[uuid], at=ts, heat=heat, started=step >= onsets.get(uuid, steps), rng=rng)
            row = SampleRow(ts, gpu_id, r.power_w, r.throttle_mask, r.gpu_temp_c, r.mem_temp_c, r.tlimit_c,
                            r.sm_clock_mhz, r.ecc_sbe, r.ecc_dbe, r.remap_corr, r.remap_unc, r.remap_failure, 0,
                            False, r.xid)
            if step == onsets.get(uuid) and demo[uuid].role in DEMO_XIDS:  # the XIDs before the gauge's last one
                earlier = DEMO_XIDS[demo[uuid].role][:-1]
                rows.extend(row._replace(ts=ts - DEMO_XID_GAP * (len(earlier) - i), xid=xid)
                            for i, xid in enumerate(earlier))
            rows.append(row)
        # The first step alone: it holds every GPU's first counter values (baseline counter rows), which SQLite's
        # 5-minute rollup joins with each sample group of its window (an hour: 5 s; one step: 0.3 s).
        if rows and (step == 0 or step % per_batch == per_batch - 1 or step == steps - 1):
            with transaction.atomic():
                samples += store.write_samples(rows).samples
            rows = []
            telemetry_merge()  # PostgreSQL: the inbox, an hour at a time (the latest values move with each)
            # Rolled up as it goes, an hour at a time like beat's tick: one 24-hour rollup took 34 s on SQLite.
            done = ts + dt.timedelta(seconds=step_s)
            rollup_range(start=rolled, end=done)
            rolled = done
    ingest_source_for(name=DEMO_SOURCE, kind=IngestKind.SCRAPE, actor=actor)
    source = IngestSource.objects.get(name=DEMO_SOURCE)
    if not source.url:
        ingest_source_update(source=source, actor=actor, url=DEMO_URL, kind=IngestKind.SCRAPE)
    demo_gpus_file_write()
    return {"gpus": len(gpus), "samples": samples, "steps": steps}
