"""Runtime configuration of the simulator, changed with ``POST /_sim/config`` or ``Simulator.configure``."""

from dataclasses import asdict, dataclass, field, fields, replace

from .faults import FaultRule, parse_rules

REBOOT_MODES = ("refused", "503", "404", "mixed")


@dataclass(frozen=True)
class SimConfig:
    seed: int = 0
    task_seconds: float = 0.0  # how long an update task runs; 0 = Completed in the 202 reply itself
    task_seconds_by_class: dict[str, float] = field(default_factory=dict)  # bmc_class -> seconds
    bmc_reset_seconds: float = 1.0  # a Manager.Reset or FullPowerCycle leaves the BMC unreachable this long
    unreachable: str = "drop"  # while unreachable: "drop" closes the connection unanswered; "503" answers 503
    retry_after_seconds: int = 1  # Retry-After on running tasks and 503s
    require_auth: bool = True  # Redfish requests (except the service root and login) need Basic auth or a session
    username: str = ""  # if set, Basic auth and sessions must use these credentials; else any are accepted
    password: str = ""
    # ImageURI or file name -> the version it carries, or for a bundle {component Id: version} (redfish.py)
    images: dict[str, str | dict[str, str]] = field(default_factory=dict)
    max_tasks_per_bmc: int = 1000  # finished tasks beyond this are forgotten (oldest first)
    faults: tuple[FaultRule, ...] = ()
    reboot_mode: str = "refused"  # inside a reboot window opened by a fault or on demand: refused, 503, 404, mixed
    purge_tasks_after: float = 600.0  # finished tasks vanish from TaskService after this many seconds (0 = never)
    clock_skew_seconds: float = 0.0  # how far new BMCs' own clocks are off (per BMC: POST /_sim/bmcs/<id>/clock)

    def task_seconds_for(self, bmc_class: str) -> float:
        return float(self.task_seconds_by_class.get(bmc_class, self.task_seconds))

    def merged(self, changes: dict) -> "SimConfig":
        """A copy with ``changes`` applied; ``faults`` replaces the whole list. Raises ValueError."""
        known = {f.name: f for f in fields(self)}
        unknown = set(changes) - set(known)
        if unknown:
            raise ValueError(f"unknown config keys: {sorted(unknown)}")
        values = {}
        for key, value in changes.items():
            if key == "faults":
                values[key] = parse_rules(value)
            elif key == "images":
                values[key] = _images(value)
            elif key == "task_seconds_by_class":
                if not isinstance(value, dict):
                    raise ValueError(f"{key} must be an object")
                values[key] = dict(value)
            else:
                kind = type(getattr(self, key))
                try:
                    values[key] = kind(value) if kind is not bool else _boolean(value)
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"{key}: {exc}") from None
        config = replace(self, **values)
        if config.unreachable not in ("drop", "503"):
            raise ValueError("unreachable must be 'drop' or '503'")
        if config.reboot_mode not in REBOOT_MODES:
            raise ValueError(f"reboot_mode must be one of {REBOOT_MODES}")
        return config

    def as_json(self) -> dict:
        data = asdict(self)
        data["faults"] = [asdict(rule) for rule in self.faults]
        return data


def _images(value: object) -> dict[str, str | dict[str, str]]:
    if not isinstance(value, dict):
        raise ValueError("images must be an object")
    images: dict[str, str | dict[str, str]] = {}
    for image, version in value.items():
        if isinstance(version, dict) and version and all(
                isinstance(k, str) and isinstance(v, str) and v for k, v in version.items()):
            images[str(image)] = dict(version)
        elif isinstance(version, str) and version:
            images[str(image)] = version
        else:
            raise ValueError(f"images[{image!r}]: a version, or an object of component Id -> version")
    return images


def _boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"expected true or false, got {value!r}")
