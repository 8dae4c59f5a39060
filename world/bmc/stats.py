"""Counters behind ``GET /_sim/stats``: requests, update requests per target, tasks, resets, faults."""

import threading
from collections import Counter


class Stats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        with self._lock:
            self.requests = 0
            self.updates: Counter[tuple[str, str, str]] = Counter()  # (bmc, component, version) -> requests
            self.images: Counter[str] = Counter()
            self.tasks: Counter[str] = Counter()
            self.resets: Counter[tuple[str, str]] = Counter()  # (bmc, activation kind) -> resets
            self.faults: Counter[str] = Counter()
            self.activations = 0
            self.manager_resets: Counter[tuple[str, str]] = Counter()  # (bmc, manager id) -> resets
            self.received: dict[str, Counter[str]] = {}  # bmc -> "METHOD /path" -> mutating requests received
            self.processed: dict[str, Counter[str]] = {}  # bmc -> "METHOD /path" -> mutating requests processed

    def count_request(self) -> None:
        with self._lock:
            self.requests += 1

    def count_received(self, bmc: str, key: str) -> None:
        with self._lock:
            self.received.setdefault(bmc, Counter())[key] += 1

    def count_processed(self, bmc: str, key: str) -> None:
        with self._lock:
            self.processed.setdefault(bmc, Counter())[key] += 1

    def counters_json(self, bmc: str | None = None) -> dict:
        """``GET /_sim/counters``: every mutating request received and processed, per BMC and "METHOD /path"."""
        with self._lock:
            ids = sorted(set(self.received) | set(self.processed))
            return {"bmcs": {b: {"received": dict(self.received.get(b, {})),
                                 "processed": dict(self.processed.get(b, {}))}
                             for b in ids if bmc is None or b == bmc},
                    "faults": dict(self.faults), "reboot_windows": self.faults.get("reboot_window", 0)}

    def clear_counters(self) -> None:
        with self._lock:
            self.received, self.processed = {}, {}

    def count_update(self, bmc: str, component: str, version: str, image: str) -> None:
        with self._lock:
            self.updates[(bmc, component, version)] += 1
            self.images[image] += 1

    def count_task(self, state: str) -> None:
        with self._lock:
            self.tasks[state] += 1

    def count_reset(self, bmc: str, kinds: set[str]) -> None:
        with self._lock:
            self.resets.update((bmc, kind) for kind in kinds)

    def count_manager_reset(self, bmc: str, manager: str) -> None:
        with self._lock:
            self.manager_resets[(bmc, manager)] += 1

    def count_fault(self, kind: str) -> None:
        with self._lock:
            self.faults[kind] += 1

    def count_activation(self) -> None:
        with self._lock:
            self.activations += 1

    def as_json(self, bmc: str | None = None) -> dict:
        with self._lock:
            updates: dict[str, dict[str, dict[str, int]]] = {}
            for (b, component, version), n in self.updates.items():
                if bmc is None or b == bmc:
                    updates.setdefault(b, {}).setdefault(component, {})[version] = n
            resets: dict[str, dict[str, int]] = {}
            for (b, kind), n in self.resets.items():
                if bmc is None or b == bmc:
                    resets.setdefault(b, {})[kind] = n
            return {
                "requests": self.requests,
                "update_requests": sum(n for (b, _c, _v), n in self.updates.items() if bmc is None or b == bmc),
                "updates": updates,
                "duplicate_updates": [{"bmc": b, "component": c, "version": v, "count": n}
                                      for (b, c, v), n in sorted(self.updates.items())
                                      if n > 1 and (bmc is None or b == bmc)],
                "images": dict(self.images),
                "tasks": dict(self.tasks),
                "resets": resets,
                "activations": self.activations,
                "manager_resets": {f"{b}/{m}": n for (b, m), n in sorted(self.manager_resets.items())
                                   if bmc is None or b == bmc},
                "faults": dict(self.faults),
            }
