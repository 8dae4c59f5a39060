"""The control API under ``/_sim/`` (JSON, no auth): configuration, BMCs, statistics, the manual clock, and what
plugins add (``Plugin.control``, listed in the index through ``Plugin.index``)."""

import json
from collections.abc import Callable
from urllib.parse import parse_qs

from .config import REBOOT_MODES
from .profiles import PROFILES
from .records import ManualClock
from .state import Simulator

INDEX = {
    "GET /_sim/config": "the configuration",
    "POST /_sim/config": "change configuration keys (faults replaces the whole rule list; images: ImageURI or file "
                         "name -> the version it carries, or {component Id: version} for a bundle)",
    "GET /_sim/bmcs": "every BMC with its base URL (on its own port)",
    "POST /_sim/bmcs": "create or reset BMCs: {count, prefix, start, ids, profile, versions, bmc_class}",
    "GET /_sim/bmcs/<id>": "one BMC's state: versions, pending images, power, tasks",
    "DELETE /_sim/bmcs/<id>": "remove a BMC",
    "GET /_sim/stats[?bmc=<id>]": "request, update-request (per bmc/component/version), task, reset, fault counts",
    "POST /_sim/stats/reset": "zero the statistics",
    "GET /_sim/counters[?bmc=<id>]": "mutating requests received and processed, per BMC and 'METHOD /path'",
    "POST /_sim/counters/reset": "zero the counters",
    "POST /_sim/bmcs/<id>/reboot": "{seconds, mode}: a reboot window (refused, 503, 404, mixed)",
    "POST /_sim/reset": "forget every BMC and the statistics (the configuration stays)",
    "GET /_sim/profiles": "platform profiles and their components",
    "POST /_sim/clock/advance": "{seconds}: move a manual clock on (a simulator started with a ManualClock)",
    "POST /_sim/bmcs/<id>/clock": "{skew_seconds}: set how far this BMC's own clock is off",
    "GET /_sim/bmcs/<id>/tasks": "every task the BMC keeps, with its image, targets and versions",
    "GET /_sim/holds": "requests parked by hold rules (waiting) and how many were ever held",
    "POST /_sim/holds/release": "let every parked request go on",
}


def dispatch(sim: Simulator, bmc_url: Callable[[str], str], method: str, path: str, query: str,
             body: bytes) -> tuple[int, object]:
    """``bmc_url(id)``: a BMC's base URL, as the server listens for it."""
    parts = tuple(p for p in path.split("/")[2:] if p)
    try:
        data = json.loads(body) if body else {}
    except ValueError:
        return 400, {"error": "malformed JSON"}
    try:
        return _route(sim, bmc_url, method, parts, parse_qs(query), data)
    except (ValueError, TypeError, KeyError) as exc:
        return 400, {"error": str(exc)}


def _route(sim: Simulator, bmc_url: Callable[[str], str], method: str, parts: tuple[str, ...], query: dict, data):
    match method, parts:
        case "GET", ():
            return 200, index(sim)
        case "GET", ("config",):
            return 200, sim.config.as_json()
        case "POST", ("config",):
            return 200, sim.configure(data).as_json()
        case "GET", ("bmcs",):
            members = [{"id": i, "url": bmc_url(i)} for i in sim.bmc_ids()]
            return 200, {"Members": members, "count": len(members)}
        case "POST", ("bmcs",):
            ids = sim.create_bmcs(**data)
            return 201, {"ids": ids, "urls": [bmc_url(i) for i in ids]}
        case "GET", ("bmcs", bmc_id) if sim.bmc(bmc_id):
            return 200, sim.snapshot(sim.bmc(bmc_id))
        case "DELETE", ("bmcs", bmc_id) if sim.delete_bmc(bmc_id):
            return 204, None
        case "GET", ("stats",):
            return 200, sim.stats.as_json(query.get("bmc", [None])[0])
        case "GET", ("counters",):
            return 200, sim.stats.counters_json(query.get("bmc", [None])[0])
        case "POST", ("counters", "reset"):
            sim.stats.clear_counters()
            return 204, None
        case "POST", ("bmcs", bmc_id, "reboot") if sim.bmc(bmc_id):
            bmc = sim.bmc(bmc_id)
            mode = str(data.get("mode", ""))
            if mode and mode not in REBOOT_MODES:
                raise ValueError(f"mode must be one of {REBOOT_MODES}")
            with bmc.lock:
                sim.reboot_window(bmc, float(data.get("seconds", 5)), mode)
            return 204, None
        case "POST", ("bmcs", bmc_id, "clock") if sim.bmc(bmc_id):
            bmc = sim.bmc(bmc_id)
            with bmc.lock:
                bmc.clock_skew = float(data["skew_seconds"])
            return 200, {"skew_seconds": bmc.clock_skew}
        case "GET", ("bmcs", bmc_id, "tasks") if sim.bmc(bmc_id):
            return 200, sim.tasks_json(sim.bmc(bmc_id))
        case "GET", ("holds",):
            return 200, sim.holds.as_json()
        case "POST", ("holds", "release"):
            return 200, {"released": sim.holds.release()}
        case "POST", ("stats", "reset"):
            sim.stats.clear()
            return 204, None
        case "POST", ("reset",):
            sim.clear()
            return 204, None
        case "GET", ("profiles",):
            return 200, {name: {"components": {c.id: {"version": c.version, "activation": c.activation,
                                                      "updateable": c.updateable} for c in p.components},
                                "systems": p.systems, "chassis": p.chassis, "managers": p.managers}
                         for name, p in PROFILES.items()}
        case "POST", ("clock", "advance"):
            if not isinstance(sim.clock, ManualClock):
                return 409, {"error": "the simulator runs on the wall clock"}
            sim.clock.advance(float(data["seconds"]))
            return 200, {"now": sim.clock()}
    for plugin in sim.plugins:
        answer = plugin.control(sim, method, parts, data)
        if answer is not None:
            return answer
    return 404, {"error": f"no such control endpoint: {method} /_sim/{'/'.join(parts)}", "endpoints": index(sim)}


def index(sim: Simulator) -> dict[str, str]:
    """The core's control endpoints and the loaded plugins'."""
    return {**INDEX, **{k: v for plugin in sim.plugins for k, v in plugin.index.items()}}
