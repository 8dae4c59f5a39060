"""In-memory state of many virtual BMCs: firmware components, update tasks, resets and activation.

Pure stdlib and no HTTP: the server calls these methods, tests may call them directly. Each BMC has its own lock;
``Simulator._lock`` guards only the BMC table, the configuration and the statistics. Tasks advance lazily with
the injectable clock: every access to a BMC first settles the tasks whose time is up.

An image goes through: update task Running -> task Completed -> pending ("Staged" if the request asked to stage
it, then "AwaitingActivation" after StartUpdate/Activate) -> active on the reset its component needs (see
profiles.py), or at once if it needs none. The inventory Version changes only at that last step.
"""

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable

from . import profiles
from .config import SimConfig
from .faults import REQUEST_KINDS, Holds, hits
from .messages import RedfishError, message
from .records import Component, Pending, Target, Task
from .stats import Stats

STAGED = "Staged"
AWAITING_ACTIVATION = "AwaitingActivation"
STAGE_APPLY_TIMES = ("OnStartUpdateRequest",)
APPLY_TIMES = ("Immediate", "OnReset", "OnTargetReset", "AtMaintenanceWindowStart", "InMaintenanceWindowOnReset",
               *STAGE_APPLY_TIMES)
# What each reset activates, by activation kind (profiles.py).
_RESET_URIS = {
    profiles.BMC_RESET: ("/redfish/v1/Managers/{manager}/Actions/Manager.Reset", "GracefulRestart"),
    profiles.HOST_REBOOT: ("/redfish/v1/Systems/{system}/Actions/ComputerSystem.Reset", "ForceRestart"),
    profiles.CHASSIS_POWER_CYCLE: ("/redfish/v1/Chassis/{chassis}/Actions/Chassis.Reset", "PowerCycle"),
    profiles.AC_POWER_CYCLE: ("/redfish/v1/Chassis/{chassis}/Actions/Chassis.Reset", "FullPowerCycle"),
}
SYSTEM_RESET_TYPES = ("On", "ForceOn", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart",
                      "PowerCycle", "Nmi", "PushPowerButton")
CHASSIS_RESET_TYPES = ("On", "ForceOn", "ForceOff", "GracefulShutdown", "PowerCycle", "FullPowerCycle")
MANAGER_RESET_TYPES = ("GracefulRestart", "ForceRestart")


class Bmc:
    def __init__(self, bmc_id: str, profile: profiles.Profile, bmc_class: str, versions: dict[str, str]) -> None:
        unknown = set(versions) - {c.id for c in profile.components}
        if unknown:
            raise ValueError(f"{bmc_id}: profile {profile.name} has no components {sorted(unknown)}")
        self.id = bmc_id
        self.profile = profile
        self.bmc_class = bmc_class
        self.lock = threading.Lock()
        self.components = {c.id: Component(c, versions.get(c.id, c.version)) for c in profile.components}
        self.power = dict.fromkeys(profile.systems, "On")
        self.tasks: dict[int, Task] = {}
        self.running: list[Task] = []
        self.next_task_id = 1
        self.watcher: Callable[[Bmc], None] | None = None  # told when the reboot window changes (listeners.py)
        self._unreachable_until = 0.0
        self.sessions: dict[str, str] = {}  # token -> session id
        self.next_session_id = 1
        self.requests = 0  # per-BMC request number, the identity of request-fault draws
        self.reboot_mode = ""  # what the current reboot window answers ("" = the configured reboot_mode); set it
        # before unreachable_until, whose setter tells the watcher
        self.last_reset = 0.0  # clock of the last reset of the system (System LastResetTime)
        self.manager_reset: dict[str, float] = {}  # manager id -> clock of its last reset (its LastResetTime)
        self.extra: dict = {}  # plugins' state, by plugin name
        self.wall_offset = 0.0
        self.clock_skew = 0.0  # seconds this BMC's own clock is off (DateTime, LastResetTime, task times)

    @property
    def unreachable_until(self) -> float:
        """Clock value at which the current reboot window ends. Setting it (a window opens, or a test ends one)
        tells the watcher: the server closes or reopens the BMC's listening port (listeners.py)."""
        return self._unreachable_until

    @unreachable_until.setter
    def unreachable_until(self, value: float) -> None:
        self._unreachable_until = value
        if self.watcher is not None:
            self.watcher(self)

    def wall(self, clock_value: float) -> float:
        """A simulator clock reading as this BMC's own wall clock (epoch seconds, skew included)."""
        return clock_value + self.wall_offset + self.clock_skew

    def reset_uri(self, activation: str, manager: str = "") -> tuple[str, str]:
        uri, reset_type = _RESET_URIS[activation]
        return uri.format(manager=manager or self.profile.managers[0], system=self.profile.systems[0],
                          chassis=self.profile.chassis[0]), reset_type


class Simulator:
    def __init__(self, *, clock: Callable[[], float] | None = None, plugins: Iterable = (),
                 **config: object) -> None:
        self.plugins = list(plugins)
        self.clock = clock or time.monotonic
        self.wall_offset = time.time() - self.clock()  # clock -> epoch seconds, for task times
        self.config = SimConfig().merged(config)
        self.stats = Stats()
        self.holds = Holds()
        self._bmcs: dict[str, Bmc] = {}
        self._lock = threading.Lock()
        # told (added ids, removed ids) after the BMC table changed: the server opens and closes their ports
        self.on_table: Callable[[list[str], list[str]], None] | None = None

    def _table_changed(self, added: list[str], removed: list[str]) -> None:
        if self.on_table is not None and (added or removed):
            self.on_table(added, removed)

    # --- configuration and the BMC table -----------------------------------------------------------------------
    def configure(self, changes: dict) -> SimConfig:
        with self._lock:
            self.config = self.config.merged(changes)
            return self.config

    def create_bmcs(self, *, count: int = 0, ids: Iterable[str] = (), prefix: str = "bmc-", start: int = 1,
                    profile: str = "hgx-h100", versions: dict[str, str] | None = None,
                    bmc_class: str = "") -> list[str]:
        """Create BMCs (or reset existing ones to their initial state); returns their ids."""
        if profile not in profiles.PROFILES:
            raise ValueError(f"unknown profile {profile!r}; known: {sorted(profiles.PROFILES)}")
        width = max(4, len(str(start + count - 1)))
        new_ids = list(ids) + [f"{prefix}{n:0{width}d}" for n in range(start, start + count)]
        bmcs = [Bmc(i, profiles.PROFILES[profile], bmc_class or profile, versions or {}) for i in new_ids]
        for bmc in bmcs:
            bmc.last_reset = self.clock()
            bmc.manager_reset = dict.fromkeys(bmc.profile.managers, bmc.last_reset)
            bmc.wall_offset = self.wall_offset
            bmc.clock_skew = self.config.clock_skew_seconds
            for plugin in self.plugins:
                plugin.on_bmc_created(self, bmc)
        with self._lock:
            self._bmcs.update((b.id, b) for b in bmcs)
        self._table_changed(new_ids, [])
        return new_ids

    def delete_bmc(self, bmc_id: str) -> bool:
        with self._lock:
            deleted = self._bmcs.pop(bmc_id, None) is not None
        if deleted:
            self._table_changed([], [bmc_id])
        return deleted

    def clear(self) -> None:
        """Forget every BMC and the statistics; the configuration stays."""
        with self._lock:
            ids = list(self._bmcs)
            self._bmcs.clear()
        self._table_changed([], ids)
        self.stats.clear()

    def bmc(self, bmc_id: str) -> Bmc | None:
        return self._bmcs.get(bmc_id)

    def bmc_ids(self) -> list[str]:
        with self._lock:
            return list(self._bmcs)

    # --- per-request helpers (the caller holds bmc.lock) ---------------------------------------------------------
    def settle(self, bmc: Bmc) -> float:
        now = self.clock()
        if bmc.running:
            for task in [t for t in bmc.running if now >= t.created + t.duration]:
                if not any(t.outcome == "stuck" for t in task.targets):
                    self._finish(bmc, task, now)
        purge = self.config.purge_tasks_after
        if purge > 0:  # a BMC that forgets finished tasks (the pending image stays)
            for task_id in [i for i, t in bmc.tasks.items() if t.ended is not None and now - t.ended >= purge]:
                del bmc.tasks[task_id]
                self.stats.count_fault("purged")
        return now

    def new_task(self, bmc: Bmc, *, name: str, seconds: float, on_done: Callable[[], None] | None = None) -> Task:
        """A plugin's task (shown by TaskService like an update task; ``on_done`` runs when it completes)."""
        now = self.clock()
        task = Task(bmc.next_task_id, [], name, False, now, seconds, on_done=on_done, name=name)
        bmc.next_task_id += 1
        bmc.tasks[task.id] = task
        if seconds <= 0:
            self._finish(bmc, task, now)
        else:
            task.state = "Running"
            bmc.running.append(task)
        return task

    def reboot_window(self, bmc: Bmc, seconds: float, mode: str = "") -> None:
        """The BMC reboots: for ``seconds`` it answers as ``mode`` (refused, 503, 404, mixed) says."""
        bmc.reboot_mode = mode
        bmc.unreachable_until = max(bmc.unreachable_until, self.clock() + seconds)
        self.stats.count_fault("reboot_window")

    def rebooting(self, bmc: Bmc) -> str:
        """The mode of the reboot window the BMC is in now (refused, 503, 404, mixed), or "" when it is up."""
        if self.clock() >= bmc.unreachable_until:
            return ""
        config = self.config
        return bmc.reboot_mode or ("503" if config.unreachable == "503" else config.reboot_mode)

    def request_fault(self, bmc: Bmc, method: str, path: str):
        """The request fault rule that hits this request, if any; counts the BMC's request number."""
        bmc.requests += 1
        config = self.config
        for index, rule in enumerate(config.faults):
            if rule.kind in REQUEST_KINDS and rule.matches_request(bmc.id, method, path) \
                    and hits(rule, config.seed, index, bmc.id, bmc.requests):
                self.stats.count_fault(rule.kind)
                return rule
        return None

    # --- update ---------------------------------------------------------------------------------------------------
    def update(self, bmc: Bmc, *, targets: list[str], image: str, versions: dict[str, str], apply_time: str,
               stage: bool) -> Task:
        """Start an update task. ``versions`` maps component Id -> version; ``targets`` are the components."""
        if apply_time not in APPLY_TIMES:
            raise RedfishError(400, "Base.1.13.0.ActionParameterValueNotInList", apply_time,
                               "@Redfish.OperationApplyTime", "UpdateService.SimpleUpdate")
        now = self.settle(bmc)
        components = []
        for target in targets:
            component = bmc.components.get(target)
            if component is None or not component.spec.updateable:
                raise RedfishError(400, "Base.1.13.0.ActionParameterValueNotInList", target, "Targets",
                                   "UpdateService.SimpleUpdate")
            components.append(component)
        for component in components:
            self.stats.count_update(bmc.id, component.spec.id, versions[component.spec.id], image)
        busy = [c.spec.id for c in components if c.busy_task is not None]
        if busy:
            raise RedfishError(503, "Update.1.0.TargetsBusy", ", ".join(busy))
        task = Task(bmc.next_task_id, [], image, stage or apply_time in STAGE_APPLY_TIMES, now,
                    self.config.task_seconds_for(bmc.bmc_class))
        bmc.next_task_id += 1
        for component in components:
            target = self._draw(bmc, component, versions[component.spec.id])
            task.targets.append(target)
            # as the NVIDIA BMC's update tasks name them (samples/redfish/nvidia-dgx): the image and the component,
            # then the component and the version it will carry
            task.messages.append(message("Update.1.0.TransferringToComponent", image, component.spec.id))
            task.messages.append(message("Update.1.0.TargetDetermined", component.spec.id, target.to_version))
            component.busy_task = task.id
        bmc.tasks[task.id] = task
        self._forget_old_tasks(bmc)
        if task.duration <= 0 and not any(t.outcome == "stuck" for t in task.targets):
            self._finish(bmc, task, now)
        else:
            bmc.running.append(task)
        return task

    def _draw(self, bmc: Bmc, component: Component, to_version: str) -> Target:
        target = Target(component.spec.id, component.version, to_version)
        identity = (bmc.id, target.component, target.from_version, to_version)
        attempt = self.stats.updates.get((bmc.id, target.component, to_version), 0)
        config = self.config
        for index, rule in enumerate(config.faults):
            if rule.kind in REQUEST_KINDS or not rule.matches_update(*identity):
                continue
            if not hits(rule, config.seed, index, *identity, attempt):
                continue
            self.stats.count_fault(rule.kind)
            if rule.kind == "no_version_change":
                target.no_change = True
            elif target.outcome == "ok":
                target.outcome = "fail" if rule.kind == "fail" else "stuck"
                target.message_id = rule.message_id
        return target

    def _forget_old_tasks(self, bmc: Bmc) -> None:
        excess = len(bmc.tasks) - self.config.max_tasks_per_bmc
        if excess > 0:  # tasks are in creation order: the oldest finished ones go
            for task_id in [i for i, t in itertools.islice(bmc.tasks.items(), excess + len(bmc.running)) if t.done][:excess]:
                del bmc.tasks[task_id]

    def _finish(self, bmc: Bmc, task: Task, now: float) -> None:
        failed = False
        for target in task.targets:
            component = bmc.components[target.component]
            component.busy_task = None
            if target.outcome == "fail":
                failed = True
                task.messages.append(message(target.message_id, target.to_version, target.component))
                continue
            spec = component.spec
            state = STAGED if task.staged else AWAITING_ACTIVATION
            component.pending = Pending(target.to_version, task.image, state, task.id, target.no_change)
            task.messages.append(message("Update.1.0.UpdateSuccessful", target.component, target.to_version))
            if task.staged:
                task.messages.append(message("Update.1.0.AwaitToActivate", target.to_version, target.component))
            elif spec.activation == profiles.NONE:
                self._activate_component(component)
            else:
                task.messages.append(message("Base.1.13.0.ResetRequired", *bmc.reset_uri(spec.activation, spec.manager)))
        self._end(bmc, task, now, "Exception" if failed else "Completed", "Critical" if failed else "OK")
        if task.on_done is not None and not failed:
            task.on_done()

    def _end(self, bmc: Bmc, task: Task, now: float, state: str, status: str) -> None:
        task.state, task.status, task.ended = state, status, now
        if task in bmc.running:
            bmc.running.remove(task)
        self.stats.count_task(state)

    def cancel_task(self, bmc: Bmc, task: Task, message_id: str = "TaskEvent.1.0.TaskCancelled") -> None:
        if task.done:
            return
        for target in task.targets:
            bmc.components[target.component].busy_task = None
        task.messages.append(message(message_id, task.id))
        self._end(bmc, task, self.clock(), "Cancelled" if message_id.endswith("Cancelled") else "Exception",
                  "Warning" if message_id.endswith("Cancelled") else "Critical")

    # --- activation -----------------------------------------------------------------------------------------------
    def start_update(self, bmc: Bmc, targets: list[str] | None) -> list[str]:
        """UpdateService.StartUpdate / Activate: staged images move on to their activation (or become active)."""
        self.settle(bmc)
        moved = []
        for component in bmc.components.values():
            pending = component.pending
            if pending and pending.state == STAGED and (targets is None or component.spec.id in targets):
                pending.state = AWAITING_ACTIVATION
                moved.append(component.spec.id)
                if component.spec.activation == profiles.NONE:
                    self._activate_component(component)
        return moved

    def _activate(self, bmc: Bmc, kinds: set[str], manager: str = "") -> None:
        now = self.clock()
        if manager:
            self.stats.count_manager_reset(bmc.id, manager)
            bmc.manager_reset[manager] = now
            kinds_counted = {f"{profiles.BMC_RESET}:{manager}"} if manager != bmc.profile.managers[0] else kinds
            self.stats.count_reset(bmc.id, kinds_counted)
        else:
            self.stats.count_reset(bmc.id, kinds)
            bmc.last_reset = now
            if profiles.BMC_RESET in kinds:  # an AC power cycle restarts every manager
                bmc.manager_reset = dict.fromkeys(bmc.profile.managers, now)
        for plugin in self.plugins:
            plugin.on_reset(self, bmc, "manager" if manager else "system")
        for component in bmc.components.values():
            spec, pending = component.spec, component.pending
            if pending is None or pending.state != AWAITING_ACTIVATION or spec.activation not in kinds:
                continue
            if spec.activation == profiles.BMC_RESET and manager and spec.manager != manager:
                continue
            self._activate_component(component)

    def _activate_component(self, component: Component) -> None:
        pending = component.pending
        assert pending is not None
        if not pending.no_change:
            component.version = pending.version
        component.pending = None
        self.stats.count_activation()

    def reset_system(self, bmc: Bmc, system_id: str, reset_type: str) -> None:
        self.settle(bmc)
        if reset_type not in SYSTEM_RESET_TYPES:
            raise RedfishError(400, "Base.1.13.0.ActionParameterValueNotInList", reset_type, "ResetType",
                               "ComputerSystem.Reset")
        was_on = bmc.power[system_id] == "On"
        if reset_type in ("ForceOff", "GracefulShutdown") or (reset_type == "PushPowerButton" and was_on):
            bmc.power[system_id] = "Off"
        elif reset_type != "Nmi" and not (reset_type in ("On", "ForceOn") and was_on):
            bmc.power[system_id] = "On"
            self._activate(bmc, {profiles.HOST_REBOOT})

    def reset_chassis(self, bmc: Bmc, chassis_id: str, reset_type: str) -> None:
        now = self.settle(bmc)
        if reset_type not in CHASSIS_RESET_TYPES:
            raise RedfishError(400, "Base.1.13.0.ActionParameterValueNotInList", reset_type, "ResetType",
                               "Chassis.Reset")
        if reset_type in ("ForceOff", "GracefulShutdown"):
            bmc.power = dict.fromkeys(bmc.power, "Off")
            return
        if reset_type in ("On", "ForceOn") and all(p == "On" for p in bmc.power.values()):
            return
        bmc.power = dict.fromkeys(bmc.power, "On")
        kinds = {profiles.CHASSIS_POWER_CYCLE, profiles.HOST_REBOOT}
        if reset_type == "FullPowerCycle":
            kinds |= {profiles.AC_POWER_CYCLE, profiles.BMC_RESET}
            self._bmc_goes_down(bmc, now)
        self._activate(bmc, kinds)

    def reset_manager(self, bmc: Bmc, manager_id: str, reset_type: str) -> None:
        now = self.settle(bmc)
        if reset_type not in MANAGER_RESET_TYPES:
            raise RedfishError(400, "Base.1.13.0.ActionParameterValueNotInList", reset_type, "ResetType",
                               "Manager.Reset")
        if manager_id == bmc.profile.managers[0]:  # the BMC that answers Redfish reboots
            self._bmc_goes_down(bmc, now)
        else:  # a second manager (the HGX HMC behind the host BMC): its own tasks abort, the BMC stays up
            for task in [t for t in bmc.running if any(
                    bmc.components[x.component].spec.manager == manager_id for x in t.targets)]:
                self.cancel_task(bmc, task, "TaskEvent.1.0.TaskAborted")
        self._activate(bmc, {profiles.BMC_RESET}, manager=manager_id)

    def _bmc_goes_down(self, bmc: Bmc, now: float) -> None:
        """A BMC reboot: unreachable for a while, running tasks aborted, sessions lost."""
        bmc.reboot_mode = ""
        bmc.unreachable_until = now + self.config.bmc_reset_seconds
        for task in list(bmc.running):
            self.cancel_task(bmc, task, "TaskEvent.1.0.TaskAborted")
        bmc.sessions.clear()

    # --- views ----------------------------------------------------------------------------------------------------
    def snapshot(self, bmc: Bmc) -> dict:
        """Internal state of one BMC as JSON (``GET /_sim/bmcs/<id>``)."""
        with bmc.lock:
            now = self.settle(bmc)
            return {
                "id": bmc.id, "profile": bmc.profile.name, "bmc_class": bmc.bmc_class, "power": dict(bmc.power),
                "unreachable_for": max(0.0, bmc.unreachable_until - now), "clock_skew": bmc.clock_skew,
                "busy_targets": sorted(c.spec.id for c in bmc.components.values() if c.busy_task is not None),
                "task_ids": sorted(bmc.tasks),
                "components": {cid: {"version": c.version, "activation": c.spec.activation,
                                     "pending": pending_json(c.pending), "busy_task": c.busy_task}
                               for cid, c in bmc.components.items()},
                "tasks": dict(Counter(t.state for t in bmc.tasks.values())),
                **{k: v for plugin in self.plugins for k, v in plugin.snapshot(self, bmc).items()},
            }

    def tasks_json(self, bmc: Bmc) -> dict:
        """The control API's view of a BMC's tasks (what its Redfish answers do not show: the image and targets)."""
        with bmc.lock:
            self.settle(bmc)
            return {str(t.id): {"image": t.image, "state": t.state, "name": t.name,
                                "targets": [{"component": x.component, "from": x.from_version, "to": x.to_version,
                                             "outcome": x.outcome} for x in t.targets]}
                    for t in bmc.tasks.values()}

    def versions(self, bmc_id: str) -> dict[str, str]:
        bmc = self._bmcs[bmc_id]
        with bmc.lock:
            self.settle(bmc)
            return {cid: c.version for cid, c in bmc.components.items()}


def pending_json(pending: Pending | None) -> dict | None:
    if pending is None:
        return None
    return {"Version": pending.version, "ImageURI": pending.image, "State": pending.state,
            "TaskId": str(pending.task_id)}
