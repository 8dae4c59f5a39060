"""Identities: UUID and (host, PCI bus id) to gpu id, cached per process."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from inventory.models import Gpu
from telemetry.sample import GpuSample, XidLine


class _Identities:
    """UUID -> gpu id and (hostname, PCI bus id) -> gpu id, per process.

    Loaded whole (100,000 GPUs: one query, ~0.2 s) and reloaded every ``MAX_AGE`` seconds (placements
    change: the host + bus map may be that stale); a UUID or host + bus that misses is looked up on its own
    at once, so a new GPU is known from its first batch.
    """

    MAX_AGE = 300.0

    def __init__(self) -> None:
        self.by_uuid: dict[str, int] = {}
        self.by_slot: dict[tuple[str, str], int] = {}
        self.loaded_at = 0.0
        self.lock = threading.Lock()

    def clear(self) -> None:
        with self.lock:
            self.by_uuid, self.by_slot, self.loaded_at = {}, {}, 0.0

    def _load(self, queryset) -> None:  # type: ignore[no-untyped-def]
        for gpu_id, uuid, hostname, bus in queryset.values_list("id", "uuid", "server__hostname", "pci_bus_id"):
            if uuid:
                self.by_uuid[uuid] = gpu_id
            if hostname and bus:
                self.by_slot[(hostname, bus)] = gpu_id

    def refresh_if_old(self) -> None:
        if time.monotonic() - self.loaded_at > self.MAX_AGE:
            with self.lock:
                self.by_uuid, self.by_slot = {}, {}
                self._load(Gpu.objects.all())
                self.loaded_at = time.monotonic()

    def look_up(self, uuids: set[str], slots: set[tuple[str, str]]) -> None:
        """Ask the database for identities that missed (new GPUs since the last load)."""
        with self.lock:
            if uuids:
                self._load(Gpu.objects.filter(uuid__in=uuids))
            hosts = {host for host, _ in slots}
            if hosts:
                self._load(Gpu.objects.filter(server__hostname__in=hosts))


_identities = _Identities()


def identity_cache_clear() -> None:
    """Forget every cached identity (tests; after a bulk re-numbering)."""
    _identities.clear()


def identity_text(sample: GpuSample | XidLine) -> str:
    return sample.uuid or f"{sample.host or '?'}:{sample.pci_bus_id or '?'}"


def _gpu_id(item: GpuSample | XidLine) -> int | None:
    gpu_id = _identities.by_uuid.get(item.uuid) if item.uuid else None
    if gpu_id is None and item.host and item.pci_bus_id:
        gpu_id = _identities.by_slot.get((item.host, item.pci_bus_id))
    return gpu_id


def map_identities(items: Sequence[GpuSample | XidLine]) -> list[int | None]:
    """Gpu ids for ``items`` (None where unknown); identities that miss the cache are looked up once."""
    _identities.refresh_if_old()
    ids = [_gpu_id(item) for item in items]
    missing = [item for item, gpu_id in zip(items, ids, strict=True) if gpu_id is None]
    if missing:
        _identities.look_up({item.uuid for item in missing if item.uuid},
                            {(item.host, item.pci_bus_id) for item in missing if item.host and item.pci_bus_id})
        ids = [gpu_id if gpu_id is not None else _gpu_id(item) for item, gpu_id in zip(items, ids, strict=True)]
    return ids
