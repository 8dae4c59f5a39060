"""The scheduler adapter, in the layer that owns servers: firmware, telemetry and decommission all use it.

``configured()`` is the backend named by ``FLEET_SCHEDULER`` ("" = none: everything works as without a
scheduler, pages say "no scheduler"); ``node_name(server)`` maps a server to its node (its hostname unless the
server's ``scheduler_node`` override is set). Drains and resumes are recorded side effects: ``holds``.
"""

from __future__ import annotations

from django.conf import settings

from inventory.scheduler.base import (
    DISPLAY_STATES,
    DOWN,
    DRAINED,
    DRAINING,
    NodeState,
    Scheduler,
    SchedulerError,
)

_backend: tuple[tuple, Scheduler | None] | None = None


def configured() -> Scheduler | None:
    """The configured backend (one per process and configuration), or None without a scheduler."""
    global _backend
    key = (settings.FLEET_SCHEDULER, settings.SLURM_CONF, settings.FLEET_SCHEDULER_TIMEOUT_SECONDS,
           settings.FLEET_SCHEDULER_CACHE_SECONDS, settings.FLEET_SLURM_RESERVATION_USER)
    if _backend is None or _backend[0] != key:
        _backend = (key, _make(*key))
    return _backend[1]


def forget() -> None:
    """Drop this process's backend: the next ``configured()`` makes a new one (it copies the environment, e.g.
    ``PATH``, when it is made)."""
    global _backend
    _backend = None


def _make(kind: str, conf: str, timeout: float, cache: float, reservation_user: str) -> Scheduler | None:
    if not kind:
        return None
    if kind == "slurm":
        from inventory.scheduler.slurm import SlurmScheduler

        return SlurmScheduler(conf=conf, timeout=timeout, cache_seconds=cache, reservation_user=reservation_user)
    raise ValueError(f"FLEET_SCHEDULER={kind!r}: one of '' (none), 'slurm' (kubernetes: not yet, docs/scheduler.md)")


def node_name(server) -> str:  # type: ignore[no-untyped-def]
    return (getattr(server, "scheduler_node", "") or server.hostname.split(".")[0]).strip()


def fleet_reason_prefix() -> str:
    return settings.FLEET_SCHEDULER_REASON_PREFIX


__all__ = ["DISPLAY_STATES", "DOWN", "DRAINED", "DRAINING", "NodeState", "Scheduler", "SchedulerError",
           "configured", "fleet_reason_prefix", "forget", "node_name"]
