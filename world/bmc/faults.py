"""Fault rules: what goes wrong, where, and how often.

A rule is a JSON object with a ``kind``, matchers (shell patterns, ``*`` by default) and a ``rate`` (1.0 by
default). Update faults are drawn once per target of an update request; request faults once per HTTP request.

| kind | matchers | effect |
|---|---|---|
| ``fail`` | bmc, component, from_version, to_version | the task ends in ``Exception`` with ``message_id`` (default ``Update.1.0.ApplyFailed``) for that target |
| ``stuck`` | same | the task stays ``Running`` until a Manager.Reset or a DELETE of the task |
| ``no_version_change`` | same | the update completes and activates, but the Version stays the old one |
| ``http_error`` | bmc, method, path | the request is answered with ``status`` (default 503, with Retry-After) and not processed |
| ``timeout`` | bmc, method, path | the request hangs ``seconds`` (default 30) then the connection closes unanswered; ``when`` = ``before`` (not processed, default) or ``after`` (processed, answer lost) |
| ``late`` | bmc, method, path | the client gets no answer (the connection closes after ``seconds``); the request is processed then, after the client timed out |
| ``slow`` | bmc, method, path | answered normally after ``seconds`` |
| ``reboot`` | bmc, method, path | processed and answered, then the BMC reboots for ``seconds`` (see ``reboot_mode``) |
| ``hold`` | bmc, method, path | the request waits, unprocessed, until ``POST /_sim/holds/release`` (``GET /_sim/holds`` lists the waiting ones); then it is processed and answered (a deterministic window for tests) |

``path`` matches the Redfish path after the BMC prefix, e.g. ``/redfish/v1/UpdateService/Actions/*``.
Draws are a hash of (seed, rule index, the matched identity, a per-identity attempt number), so a run with one
seed is reproducible whatever the thread interleaving, and a retry of a path failed at a rate < 1 may succeed.
"""

import hashlib
import threading
from dataclasses import dataclass, fields
from fnmatch import fnmatchcase

UPDATE_KINDS = ("fail", "stuck", "no_version_change")
REQUEST_KINDS = ("http_error", "timeout", "late", "slow", "reboot", "hold")


@dataclass(frozen=True)
class FaultRule:
    kind: str
    rate: float = 1.0
    bmc: str = "*"
    component: str = "*"
    from_version: str = "*"
    to_version: str = "*"
    method: str = "*"
    path: str = "*"
    status: int = 503
    seconds: float = 30.0
    when: str = "before"
    message_id: str = "Update.1.0.ApplyFailed"

    def matches_update(self, bmc: str, component: str, from_version: str, to_version: str) -> bool:
        return (fnmatchcase(bmc, self.bmc) and fnmatchcase(component, self.component)
                and fnmatchcase(from_version, self.from_version) and fnmatchcase(to_version, self.to_version))

    def matches_request(self, bmc: str, method: str, path: str) -> bool:
        return fnmatchcase(bmc, self.bmc) and fnmatchcase(method, self.method) and fnmatchcase(path, self.path)


_FIELDS = {f.name for f in fields(FaultRule)}


def parse_rules(raw: list[dict]) -> tuple[FaultRule, ...]:
    """Validate a JSON list of rules; raises ValueError with the offending rule."""
    if not isinstance(raw, list):
        raise ValueError("faults must be a list of rules")
    rules = []
    for item in raw:
        if not isinstance(item, dict) or item.get("kind") not in UPDATE_KINDS + REQUEST_KINDS:
            raise ValueError(f"fault rule needs a kind in {UPDATE_KINDS + REQUEST_KINDS}: {item!r}")
        unknown = set(item) - _FIELDS
        if unknown:
            raise ValueError(f"unknown fault rule keys {sorted(unknown)}: {item!r}")
        rule = FaultRule(**item)
        if not 0.0 <= float(rule.rate) <= 1.0 or rule.when not in ("before", "after"):
            raise ValueError(f"rate must be in [0, 1] and when 'before' or 'after': {item!r}")
        rules.append(rule)
    return tuple(rules)


def chance(*key: object) -> float:
    """A reproducible draw in [0, 1) from the key."""
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest) / 2**64


def hits(rule: FaultRule, seed: int, index: int, *identity: object) -> bool:
    return rule.rate >= 1.0 or (rule.rate > 0.0 and chance(seed, index, *identity) < rule.rate)


class Holds:
    """Requests parked by ``hold`` rules: tests see them arrive (``waiting``) and release them when they choose."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.waiting: list[dict] = []
        self.held = 0  # every request ever parked
        self._generation = 0

    def park(self, bmc: str, method: str, path: str, stopping: threading.Event) -> None:
        entry = {"bmc": bmc, "method": method, "path": path}
        with self._cond:
            self.waiting.append(entry)
            self.held += 1
            generation = self._generation
            while self._generation == generation and not stopping.is_set():
                self._cond.wait(0.1)
            if entry in self.waiting:
                self.waiting.remove(entry)

    def release(self) -> int:
        with self._cond:
            released = len(self.waiting)
            self._generation += 1
            self._cond.notify_all()
            return released

    def as_json(self) -> dict:
        with self._cond:
            return {"waiting": list(self.waiting), "held": self.held}
