"""The plan: which servers a rollout updates and in which waves (see the package's docstring)."""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection

from firmware.models import Bundle, BundleItem, version_key
from firmware.services.plan.strategy import DOMAINS, Strategy, selector_filter, strategy_parse
from inventory.filters import filter_has_criteria
from inventory.models import FirmwareObservation, Gpu, Server

PLANNER_VERSION = 1
# Components whose current version is a column of the GPU row (denormalised from observations).
GPU_COLUMNS = {"gpu_vbios": "vbios_version", "gpu_inforom_image": "inforom_image"}


# --- the plan -----------------------------------------------------------------------------------------------------

@dataclass
class PlannedServer:
    id: int
    hostname: str
    unit_key: str
    site_id: int | None
    bmc_class: str
    domains: dict[str, Any]  # {"site": "fra1", "row": ..., "rack": ..., "power_feed": ..., "nvlink_domain": ...}
    path: str  # upgrade path hash
    current: dict[str, list[str]]  # component -> versions seen now
    compliant: bool


@dataclass
class PlannedWave:
    index: int
    name: str
    server_ids: list[int]
    units: int
    per_domain: dict[str, dict[str, int]]

    def as_json(self, *, with_servers: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {"index": self.index, "name": self.name, "servers": len(self.server_ids),
                                "units": self.units, "per_domain": self.per_domain}
        if with_servers:
            data["server_ids"] = self.server_ids
        return data


@dataclass
class Plan:
    bundle_id: int
    waves: list[PlannedWave]
    servers: dict[int, PlannedServer]
    skipped: list[int]  # already compliant server ids
    paths: dict[str, dict[str, Any]]  # path hash -> {"servers": n, "platform", "site", "firmware": {...}}
    plan_hash: str

    @property
    def target_count(self) -> int:
        return sum(len(w.server_ids) for w in self.waves)

    def summary(self) -> dict[str, Any]:
        return {"planner_version": PLANNER_VERSION, "targets": self.target_count, "skipped": len(self.skipped),
                "upgrade_paths": len(self.paths), "waves": len(self.waves)}

    def as_json(self, *, sample: int = 20) -> dict[str, Any]:
        """The preview: waves with per-domain counts, the compliant servers that will be skipped, the paths."""
        return {
            "plan_hash": self.plan_hash,
            **self.summary(),
            "wave_plan": [w.as_json() for w in self.waves],
            "skipped_sample": [self.servers[i].hostname for i in self.skipped[:sample]],
            "paths": [{"path": key, **value} for key, value in sorted(self.paths.items())],
        }


def _hash(*parts: object) -> str:
    return hashlib.blake2b(":".join(str(p) for p in parts).encode(), digest_size=8).hexdigest()


def _candidates(bundle: Bundle, selector: dict[str, Any] | None) -> list[dict[str, Any]]:
    servers = Server.objects.filter(platform_id=bundle.platform_id)
    if (selector or {}).get("_server_ids") is not None:  # explicit servers: exactly these
        servers = servers.filter(id__in=[int(i) for i in selector["_server_ids"]])  # type: ignore[index]
    filterset = selector_filter(selector)
    if filter_has_criteria(filterset):
        servers = servers.filter(id__in=filterset.qs.exclude(server_id=None).values("server_id"))
    return list(servers.order_by("id").values(
        "id", "hostname", "site_id", "site__code", "row_id", "row__name", "rack_id", "rack__name",
        "nvlink_domain_id", "nvlink_domain__name", "platform__name"))


def _current_versions(bundle: Bundle, items: list[BundleItem], server_ids: set[int]) -> dict[int, dict[str, set[str]]]:
    """server id -> component -> versions seen now (all GPUs of the server for per-GPU components)."""
    current: dict[int, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    components = {item.component for item in items}
    gpu_columns = {c: GPU_COLUMNS[c] for c in components if c in GPU_COLUMNS}
    if gpu_columns:
        columns = list(gpu_columns.values())
        rows = (Gpu.objects.filter(server__platform_id=bundle.platform_id).exclude(server_id=None)
                .values_list("server_id", *columns).distinct())
        for server_id, *versions in rows:
            if server_id in server_ids:
                for component, version in zip(gpu_columns, versions, strict=True):
                    if version:
                        current[server_id][component].add(version)
    other = components - set(gpu_columns)
    if other:
        observations = FirmwareObservation.objects.filter(server__platform_id=bundle.platform_id,
                                                          component__in=other)
        if connection.vendor == "postgresql":  # the latest per (server, component) in SQL: DISTINCT ON
            rows = (observations.order_by("server_id", "component", "-last_seen", "-id")
                    .distinct("server_id", "component").values_list("server_id", "component", "version"))
            for server_id, component, version in rows:
                if server_id in server_ids:
                    current[server_id][component].add(version)
        else:
            latest: dict[tuple[int, str], tuple[Any, str]] = {}
            for server_id, component, version, seen in observations.values_list(
                    "server_id", "component", "version", "last_seen"):
                key = (server_id, component)
                if server_id in server_ids and (key not in latest or seen > latest[key][0]):
                    latest[key] = (seen, version)
            for (server_id, component), (_seen, version) in latest.items():
                current[server_id][component].add(version)
    return current


def _feeds() -> dict[int, str]:
    """rack id -> its first power feed's name (racks fed by two feeds count under the first, by id)."""
    from inventory.models import Rack

    feeds: dict[int, str] = {}
    for rack_id, feed_name in Rack.power_feeds.through.objects.order_by("rack_id", "powerfeed_id").values_list(
            "rack_id", "powerfeed__name"):
        feeds.setdefault(rack_id, feed_name)
    return feeds


def plan_servers(*, bundle: Bundle, selector: dict[str, Any] | None) -> dict[int, PlannedServer]:
    items = list(bundle.items.select_related("release").order_by("order", "id"))
    if not items:
        raise ValidationError({"bundle": ["The bundle has no releases."]})
    rows = _candidates(bundle, selector)
    current = _current_versions(bundle, items, {r["id"] for r in rows})
    feeds = _feeds()
    wanted = {item.component: version_key(item.release.version) for item in items}
    keys: dict[str, str] = {}  # version -> key: a fleet has few distinct versions
    servers: dict[int, PlannedServer] = {}
    for row in rows:
        versions = current.get(row["id"], {})
        seen = {c: sorted(versions.get(c, ())) for c in sorted(wanted)}
        compliant = all(len(v) == 1 and (keys.get(v[0]) or keys.setdefault(v[0], version_key(v[0]))) == wanted[c]
                        for c, v in seen.items())
        site = row["site__code"] or "-"
        path = _hash(row["platform__name"], json.dumps(seen, sort_keys=True), site)
        unit = f"nvl:{row['nvlink_domain_id']}" if row["nvlink_domain_id"] else f"srv:{row['id']}"
        servers[row["id"]] = PlannedServer(
            id=row["id"], hostname=row["hostname"], unit_key=unit, site_id=row["site_id"],
            bmc_class=row["platform__name"] or "",
            domains={"site": site, "row": row["row__name"] and f"{site}/{row['row__name']}",
                     "rack": row["rack__name"], "power_feed": feeds.get(row["rack_id"]) if row["rack_id"] else None,
                     "nvlink_domain": row["nvlink_domain__name"]},
            path=path, current=seen, compliant=compliant)
    return servers


def _per_domain(servers: list[PlannedServer]) -> dict[str, dict[str, int]]:
    counts: dict[str, Counter[str]] = {d: Counter() for d in DOMAINS}
    for server in servers:
        for domain in DOMAINS:
            if server.domains.get(domain):
                counts[domain][server.domains[domain]] += 1
    return {d: dict(sorted(c.items())) for d, c in counts.items() if c}


def _fits(unit: list[PlannedServer], counts: dict[str, Counter[str]], caps: dict[str, int]) -> bool:
    need: dict[str, Counter[str]] = defaultdict(Counter)
    for server in unit:
        for domain in caps:
            name = server.domains.get(domain)
            if name and domain != "nvlink_domain":
                need[domain][name] += 1
        if caps.get("nvlink_domain") and server.domains.get("nvlink_domain"):
            need["nvlink_domain"][server.domains["nvlink_domain"]] = 1  # a domain counts once: it is one unit
    for domain, names in need.items():
        for name, n in names.items():
            have = counts[domain][name]
            if have and have + n > caps[domain]:
                return False  # an empty domain takes a unit bigger than the cap (else it would never go)
    return True


def _add(unit: list[PlannedServer], counts: dict[str, Counter[str]], caps: dict[str, int]) -> None:
    for domain in caps:
        names = {s.domains.get(domain) for s in unit} if domain == "nvlink_domain" else None
        if names is not None:
            for name in names - {None}:
                counts[domain][name] += 1
            continue
        for server in unit:
            if server.domains.get(domain):
                counts[domain][server.domains[domain]] += 1


def plan_preview(*, bundle: Bundle, selector: dict[str, Any] | None, strategy: Strategy | dict[str, Any] | None
                 ) -> Plan:
    """The plan for ``bundle`` over the servers ``selector`` picks, without writing anything (the dry run)."""
    if not isinstance(strategy, Strategy):
        strategy = strategy_parse(strategy)
    servers = plan_servers(bundle=bundle, selector=selector)
    units: dict[str, list[PlannedServer]] = defaultdict(list)
    for server in servers.values():
        units[server.unit_key].append(server)
    # A unit is skipped only when all its servers are compliant (an NVLink domain is updated whole).
    todo = {k: v for k, v in units.items() if not all(s.compliant for s in v)}
    skipped = sorted(s.id for k, v in units.items() if k not in todo for s in v)
    order = sorted(todo, key=lambda k: (_hash(strategy.seed, k), k))

    waves: list[list[str]] = []
    if strategy.canary and order:
        covered: set[str] = set()
        canary: list[str] = []
        by_path: dict[str, str] = {}
        for key in order:  # first unit in hash order holding each path
            for server in todo[key]:
                by_path.setdefault(server.path, key)
        for path in sorted(by_path):
            if path in covered:
                continue
            key = by_path[path]
            canary.append(key)
            covered |= {s.path for s in todo[key]}
        waves.append(sorted(canary, key=order.index))
    chosen = {k for w in waves for k in w}
    remaining = [k for k in order if k not in chosen]
    total = len(remaining)
    cumulative = [math.ceil(total * p / 100) for p in strategy.waves]
    caps = strategy.domain_caps
    placed = 0
    for target in cumulative:
        quota = target - placed
        if quota <= 0 or not remaining:
            continue
        wave, deferred = [], []
        counts: dict[str, Counter[str]] = defaultdict(Counter)
        for n, key in enumerate(remaining):
            if len(wave) >= quota:
                deferred.extend(remaining[n:])
                break
            if not caps or _fits(todo[key], counts, caps):
                wave.append(key)
                if caps:
                    _add(todo[key], counts, caps)
            else:
                deferred.append(key)
        waves.append(wave)
        placed += len(wave)
        remaining = deferred
    while remaining:  # units the caps pushed out of the last wave
        wave, deferred = [], []
        counts = defaultdict(Counter)
        for key in remaining:
            if _fits(todo[key], counts, caps):
                wave.append(key)
                _add(todo[key], counts, caps)
            else:
                deferred.append(key)
        waves.append(wave)
        remaining = deferred

    planned: list[PlannedWave] = []
    for index, keys in enumerate(waves):
        members = [s for k in keys for s in sorted(todo[k], key=lambda s: s.id)]
        is_canary = strategy.canary and index == 0
        name = "canary" if is_canary else f"wave {index if strategy.canary else index + 1}"
        planned.append(PlannedWave(index=index, name=name, server_ids=[s.id for s in members], units=len(keys),
                                   per_domain=_per_domain(members)))
    paths: dict[str, dict[str, Any]] = {}
    for server in servers.values():
        entry = paths.setdefault(server.path, {"servers": 0, "platform": server.bmc_class,
                                               "site": server.domains["site"], "firmware": server.current})
        entry["servers"] += 1
    digest = hashlib.sha256(json.dumps({
        "planner": PLANNER_VERSION, "bundle": bundle.pk,
        "items": [(i.component, i.release_id) for i in bundle.items.order_by("order", "id")],
        "strategy": strategy.as_json(), "waves": [w.server_ids for w in planned], "skipped": skipped,
    }, sort_keys=True).encode()).hexdigest()
    return Plan(bundle_id=bundle.pk, waves=planned, servers=servers, skipped=skipped, paths=paths, plan_hash=digest)


