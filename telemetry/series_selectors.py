"""What the history store holds for Fleet's GPUs (``FLEET_TELEMETRY_BACKEND=prometheus``), from its series index
(``/api/v1/series``): no sample is read, no range query sent.

- :func:`store_coverage`: the GPUs of a GPU, rack, row or site scope that have no series in the store, for the
  heatmap's side panels ("no samples in the store" rather than an empty chart, and which GPUs a rack's
  aggregate leaves out);
- :func:`store_label_check`: whether series carry the configured UUID label with the UUIDs of Fleet's GPUs, and
  if not, which label of the same hosts' series does (``manage.py check_history_store``, the sources page).

Both raise ``promql.StoreUnavailable`` when the store does not answer; callers show its message.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from inventory.models import Gpu
from telemetry import promql

COVERAGE_WINDOW = dt.timedelta(hours=24)  # "no series" = no sample in the last day (the playback's window)
CHECK_WINDOW = dt.timedelta(hours=1)
CHECK_SAMPLE = 50  # GPUs asked about by the label check, spread over the fleet


@dataclass(frozen=True)
class Coverage:
    gpus: int  # GPUs of the scope
    missing: list[tuple[int, str]]  # (gpu id, UUID) without a series of the UUID label in the window
    no_uuid: int  # GPUs of the scope without a UUID (the store cannot name them)
    label: str  # the UUID label asked about
    metric: str  # the dcgm-exporter metric asked about
    hours: int


def store_coverage(*, scope: str, scope_id: int, now: dt.datetime | None = None) -> Coverage | None:
    """Which GPUs of the scope the store has no series for over the last day (None with the embedded backend)."""
    if settings.FLEET_TELEMETRY_BACKEND != "prometheus":
        return None
    now = now or timezone.now()
    gpus = Gpu.objects.filter(pk=scope_id) if scope == "gpu" else Gpu.objects.filter(**{f"{scope}_id": scope_id})
    rows = list(gpus.order_by("id").values_list("id", "uuid"))
    with_uuid = [(gpu_id, uuid) for gpu_id, uuid in rows if uuid]
    found = promql.series_uuids([uuid for _, uuid in with_uuid], start=now - COVERAGE_WINDOW, end=now)
    return Coverage(gpus=len(rows), missing=[(i, u) for i, u in with_uuid if promql.uuid_key(u) not in found],
                    no_uuid=len(rows) - len(with_uuid), label=promql.labels()["uuid"],
                    metric=promql.METRIC["gpu_temp"], hours=int(COVERAGE_WINDOW.total_seconds() // 3600))


@dataclass(frozen=True)
class LabelCheck:
    ok: bool
    message: str
    checked: int = 0  # GPUs of Fleet asked about
    found: int = 0  # of them, with a series under the configured UUID label
    suggestion: dict[str, str] = field(default_factory=dict)  # a FLEET_PROMETHEUS_LABELS that would match


def _sample(size: int) -> list[tuple[str, str]]:
    """(UUID, hostname) of up to ``size`` placed GPUs with a UUID, spread evenly over the ids (deterministic)."""
    placed = Gpu.objects.filter(uuid__isnull=False, server__isnull=False)
    ids = list(placed.order_by("id").values_list("id", flat=True))
    picked = ids[:: max(1, len(ids) // size)][:size]
    return list(placed.filter(id__in=picked).order_by("id").values_list("uuid", "server__hostname"))


def store_label_check(*, now: dt.datetime | None = None) -> LabelCheck:
    """Do the store's series carry the configured UUID label (``FLEET_PROMETHEUS_LABELS``) with the UUIDs of
    Fleet's GPUs? Asks ``/api/v1/series`` about a sample of placed GPUs over the last hour; when none matches,
    asks about the same GPUs' hosts (the host label) and names the label whose values are Fleet's UUIDs."""
    now = now or timezone.now()
    names = promql.labels()
    metric = promql.METRIC["gpu_temp"]
    sample = _sample(CHECK_SAMPLE)
    if not sample:
        return LabelCheck(True, "Fleet has no placed GPU with a UUID yet: nothing to match in the history store.")
    found = promql.series_uuids([uuid for uuid, _ in sample], start=now - CHECK_WINDOW, end=now)
    where = f"{metric}{{{names['uuid']}=...}} in the last hour"
    if found:
        return LabelCheck(True, f"{len(found)} of {len(sample)} GPUs asked about have series {where}.",
                          checked=len(sample), found=len(found))
    keys = {promql.uuid_key(uuid) for uuid, _ in sample}
    hosts = sorted({host for _, host in sample})
    by_host = promql.series(f'{metric}{{{names["host"]}=~"{"|".join(promql.escape_regex(h) for h in hosts)}"}}',
                            now - CHECK_WINDOW, now)
    carriers: dict[str, int] = {}
    for item in by_host:
        for name, value in item.items():
            if name != "__name__" and promql.uuid_key(value) in keys:
                carriers[name] = carriers.get(name, 0) + 1
    head = (f"No series {where} carry the UUID of any of the {len(sample)} GPUs asked about "
            f"(the UUID label is {names['uuid']!r}).")
    if carriers:
        label = max(sorted(carriers), key=lambda name: carriers[name])
        suggestion = {"uuid": label}
        return LabelCheck(False, f"{head} Series of the same hosts carry them in label {label!r}: set "
                          f"FLEET_PROMETHEUS_LABELS='{json.dumps(suggestion)}'.", checked=len(sample),
                          suggestion=suggestion)
    if by_host:
        seen = sorted({name for item in by_host for name in item if name != "__name__"})
        return LabelCheck(False, f"{head} Series of the same hosts (label {names['host']!r}) carry labels "
                          f"{', '.join(seen)}; none holds a UUID Fleet knows.", checked=len(sample))
    return LabelCheck(False, f"{head} Nor do any carry label {names['host']!r} with their hostnames: is the store "
                      f"scraping dcgm-exporter, with {metric} enabled, and are FLEET_PROMETHEUS_LABELS right?",
                      checked=len(sample))
