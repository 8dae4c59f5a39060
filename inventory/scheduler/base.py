"""The scheduler seam: what Fleet asks of a workload scheduler (Slurm now, Kubernetes later) about one node.

A backend answers in these terms only, so the rollout engine, the health actions and the decommission executor
never see a scheduler's own vocabulary:

- ``drain(node, reason)``: stop placing new work on the node (Slurm: State=DRAIN; Kubernetes: cordon + taint);
  running work goes on until it ends (Kubernetes: evict per the policy, then wait);
- ``resume(node, only_if_reason)``: put it back in service, but only if the reason it is out for is still
  ``only_if_reason`` (Slurm: State=RESUME; Kubernetes: uncordon). Returns whether it was sent;
  ``resume_many({node: reason}, live=...)`` does it for many nodes with one read (or the caller's reading);
- ``node_state(nodes)``: state, flags, reason (and who set it), partitions and the jobs running there; one read of
  the scheduler answers for any number of nodes (callers ask once per batch, not once per node);
- ``jobs_on(node)`` / ``requeue(jobs)``: what runs there, and send it back to the queue;
- ``reserve(name, nodes, start, seconds)`` / ``unreserve(name)``: a maintenance reservation, both idempotent by
  name (a name the scheduler already has is created; one it no longer has is deleted).
"""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

# Display states, the ones pages, the API and the dashboard show.
IDLE, ALLOCATED, MIXED, DRAINING, DRAINED, DOWN, RESERVED, UNKNOWN = (
    "idle", "allocated", "mixed", "draining", "drained", "down", "reserved", "unknown")
DISPLAY_STATES = (IDLE, ALLOCATED, MIXED, DRAINING, DRAINED, DOWN, RESERVED, UNKNOWN)


class SchedulerError(Exception):
    """The scheduler could not be asked or refused (its message is kept): callers wait and try again."""


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str  # the scheduler's base state, lower case ("idle", "allocated", "mixed", "down", ...)
    flags: tuple[str, ...] = ()  # upper case ("DRAIN", "RESERVED", "MAINTENANCE", "NOT_RESPONDING", ...)
    reason: str = ""
    reason_user: str = ""
    reason_at: dt.datetime | None = None
    partitions: tuple[str, ...] = ()
    jobs: tuple[int, ...] = field(default_factory=tuple)

    @property
    def drain(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def down(self) -> bool:
        return self.state in ("down", "fail", "future", "unknown") or "DOWN" in self.flags or "FAIL" in self.flags

    @property
    def reserved(self) -> bool:
        return "RESERVED" in self.flags or "MAINTENANCE" in self.flags

    @property
    def display(self) -> str:
        if self.down:
            return DOWN
        if self.drain:
            return DRAINING if self.jobs or self.state in ("allocated", "mixed", "completing") else DRAINED
        if self.reserved:
            return RESERVED
        return self.state if self.state in (IDLE, ALLOCATED, MIXED) else UNKNOWN

    def drained_by(self, prefix: str, *, fleet_reserved: bool = False) -> str:
        """Who took the node out: "fleet" (our reason), "other" (drained/down/reserved for another reason), "".
        ``fleet_reserved``: the node is in one of Fleet's own maintenance reservations (not someone else's)."""
        if self.drain and self.reason.startswith(prefix):
            return "fleet"
        if self.drain or self.down or (self.reserved and not fleet_reserved):
            return "other"
        return ""


class Scheduler(ABC):
    name = ""

    @abstractmethod
    def node_state(self, nodes: Iterable[str] | None = None) -> dict[str, NodeState]:
        """The named nodes (every node if None); a node the scheduler does not know is absent."""

    def jobs_on(self, node: str) -> list[int]:
        state = self.node_state([node]).get(node)
        return list(state.jobs) if state else []

    def invalidate(self) -> None:  # noqa: B027 - a no-op unless the backend caches
        """Forget cached reads: the next read asks the scheduler."""

    @abstractmethod
    def drain(self, node: str, reason: str) -> None: ...

    def resume(self, node: str, only_if_reason: str) -> bool:
        return node in self.resume_many({node: only_if_reason})

    def resume_many(self, reasons: Mapping[str, str], *, live: Mapping[str, NodeState] | None = None) -> set[str]:
        """RESUME each node still drained for its reason in ``reasons``: per ``live``, a reading the caller took
        under the nodes' locks just before, or one read now. Slurm has no compare-and-set: a person changing a
        reason between the reading and the request is a race no backend of the CLI can close. Returns the nodes
        resumed."""
        if live is None:
            self.invalidate()
            live = self.node_state(list(reasons))
        sent = set()
        for node, reason in reasons.items():
            state = live.get(node)
            if state is not None and state.drain and state.reason == reason:
                self.send_resume(node)
                sent.add(node)
        return sent

    @abstractmethod
    def send_resume(self, node: str) -> None:
        """Put the node back in service, unconditionally: callers checked whose it is (``resume_many``)."""

    @abstractmethod
    def requeue(self, jobs: Sequence[int]) -> None: ...

    @abstractmethod
    def reserve(self, name: str, nodes: Sequence[str], start: dt.datetime, seconds: int) -> None: ...

    @abstractmethod
    def unreserve(self, name: str) -> None: ...
