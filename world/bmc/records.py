"""The simulator's records: the manual clock, a component's pending image, an update target, a task."""

from collections.abc import Callable
from dataclasses import dataclass, field

from . import profiles


class ManualClock:
    """A clock for tests: ``clock.advance(5)`` moves every BMC's tasks five seconds on. ``on_advance``: called
    after each advance (the server reopens the ports of BMCs whose reboot window ended, at once)."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start
        self.on_advance: list[Callable[[], None]] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for callback in list(self.on_advance):
            callback()


@dataclass
class Pending:
    version: str
    image: str
    state: str
    task_id: int
    no_change: bool = False


@dataclass
class Component:
    spec: profiles.ComponentSpec
    version: str
    pending: Pending | None = None
    busy_task: int | None = None


@dataclass
class Target:
    component: str
    from_version: str
    to_version: str
    outcome: str = "ok"  # ok | fail | stuck
    message_id: str = ""
    no_change: bool = False


@dataclass
class Task:
    id: int
    targets: list[Target]
    image: str
    staged: bool
    created: float
    duration: float
    state: str = "New"
    status: str = "OK"
    ended: float | None = None
    messages: list[dict] = field(default_factory=list)
    on_done: Callable[[], None] | None = None  # a plugin's task: called when it completes
    name: str = ""
    monitor_read: bool = False  # the task monitor answered the finished task once (then 404)

    @property
    def done(self) -> bool:
        return self.ended is not None

    def percent(self, now: float) -> int:
        if self.done:
            return 100
        fraction = (now - self.created) / self.duration if self.duration > 0 else 1.0
        cap = 50 if any(t.outcome == "stuck" for t in self.targets) else 99
        return max(0, min(cap, int(fraction * 100)))
