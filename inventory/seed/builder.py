"""Building the demo fleet: locations, servers, GPUs with their history and firmware, and the audit trail."""

from __future__ import annotations

import datetime as dt
import random
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.utils import timezone

from fleet.audit import Actor, actor_fields, current_source
from fleet.models import AuditAction, AuditEvent
from inventory import services
from inventory.models import (
    FirmwareComponent,
    FirmwareObservation,
    Gpu,
    GpuModel,
    GpuMove,
    GpuStateChange,
    Hall,
    MoveKind,
    NvlinkDomain,
    PowerFeed,
    Rack,
    Row,
    Server,
    ServerPlatform,
    Site,
)
from inventory.seed.catalog import (
    BURN_IN_SHARE,
    DAY,
    DRAIN_REASONS,
    DRAINED_SHARE,
    HGX_BUSES,
    HOUR,
    IN_SERVER_SHARE,
    LAG,
    MASKED_SERVER_SHARE,
    RACKS_PER_ROW,
    RMA_REASONS,
    ROWS_PER_HALL,
    SERVERS_PER_RACK,
    SITES,
    SKUS,
    SLOTS,
    UNPLACED_WEIGHTS,
    S,
    Sku,
)
from inventory.seed.writer import Writer


@dataclass
class SeedResult:
    gpus: int = 0
    servers: int = 0
    sites: int = 0
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows written
    audit_events: int = 0
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # phase -> seconds
    backend: str = ""

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())


def _weighted(rng: random.Random, choices: Sequence[tuple[str, float]]) -> str:
    return rng.choices([c for c, _ in choices], weights=[w for _, w in choices])[0]


def _apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Split ``total`` by ``weights`` (largest remainder): the parts always add up to ``total``."""
    norm = sum(weights) or 1
    exact = [total * w / norm for w in weights]
    parts = [int(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (parts[i] - exact[i], i))
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    return parts


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


@dataclass
class _ServerPlan:
    site: int  # index into SITES
    sku: Sku
    row_no: int
    node: int  # position in the row, 1-based (the ``n03`` of ``sjc1-r07-n03``)
    rack: int  # index, then id
    row: int  # index, then id
    site_id: int
    deployed: dt.datetime  # in service since (burn-in servers: due to enter service)
    id: int = 0
    burn_in: bool = False
    masked: bool = False
    driver: str = ""
    vbios: str = ""
    driver_upgraded: dt.datetime | None = None  # from the oldest driver to the current one
    last_seen: dt.datetime | None = None  # last inventory scrape

    @property
    def hostname(self) -> str:
        return f"{SITES[self.site][0]}-r{self.row_no:02d}-n{self.node:02d}"


GPU_COLUMNS = ("id", "serial", "serial_raw", "uuid", "uuid_raw", "identity_masked", "model_id", "board_part_number",
               "asset_tag", "warranty_end", "state", "state_changed_at", "server_id", "module_id", "pci_bus_id",
               "minor_number", "site_id", "row_id", "rack_id", "vbios_version", "inforom_image", "driver_version",
               "created_at", "updated_at")
STATE_COLUMNS = ("gpu_id", "from_state", "to_state", "actor_name", "reason", "at")
MOVE_COLUMNS = ("gpu_id", "kind", "from_server_id", "from_pci_bus_id", "from_module_id", "to_server_id",
                "to_pci_bus_id", "to_module_id", "actor_name", "reason", "at")
FIRMWARE_COLUMNS = ("gpu_id", "server_id", "component", "version", "source", "first_seen", "last_seen")
AUDIT_COLUMNS = ("at", "actor_id", "actor_name", "source", "action", "content_type_id", "object_id", "object_repr",
                 "changes", "message")
UNPLACED = (None, None, "", None, None, None, None)  # server, module, bus, minor, site, row, rack
MASKED_SERIAL, MASKED_UUID = "0000000000000", "GPU-00000000-0000-0000-0000-000000000000"


@dataclass
class _Audited:
    model: type[models.Model]
    columns: Sequence[str]
    rows: list[tuple]
    repr_of: Callable[[tuple], str]
    skip_empty: bool = False


class Builder:
    def __init__(self, *, gpus: int, seed: int, actor: Actor, writer: Writer) -> None:
        self.n, self.seed, self.actor, self.w = gpus, seed, actor, writer
        self.rng = random.Random(seed)
        self.now = timezone.now()
        self.anchor = self.now.replace(hour=0, minute=0, second=0, microsecond=0)
        fields = actor_fields(actor)
        self.actor_id, self.actor_name = getattr(fields["actor"], "pk", None), fields["actor_name"]
        self.source = current_source()
        self.audited: list[_Audited] = []
        self.phases: dict[str, float] = {}
        self.site_codes: dict[int, str] = {}
        self.states: list[tuple] = []
        self.moves: list[tuple] = []
        self.firmware: list[tuple] = []

    def insert(self, model: type[models.Model], columns: Sequence[str], rows: list[tuple],
               repr_of: Callable[[tuple], str], skip_empty: bool = False) -> None:
        """Write rows and remember them for their ``create`` audit events (written last, streamed)."""
        self.w.write(model, columns, rows)
        self.audited.append(_Audited(model, columns, rows, repr_of, skip_empty))

    def phase(self, name: str, started: float) -> float:
        now = time.perf_counter()
        self.phases[name] = now - started
        return now

    def build(self) -> SeedResult:
        t = time.perf_counter()
        gpu_models, platforms = self.catalog()
        plans = self.locations()
        self.servers(plans, platforms)
        t = self.phase("locations and servers", t)
        gpus = self.gpus(plans, gpu_models)
        t = self.phase("generate gpus", t)
        self.insert(Gpu, GPU_COLUMNS, gpus, repr_of=lambda r: r[1] or r[3] or r[2] or f"GPU #{r[0]}",
                    skip_empty=True)
        self.w.write(GpuStateChange, STATE_COLUMNS, self.states)
        self.w.write(GpuMove, MOVE_COLUMNS, self.moves)
        self.w.write(FirmwareObservation, FIRMWARE_COLUMNS, self.firmware)
        t = self.phase("write gpus and history", t)
        self.w.write(AuditEvent, AUDIT_COLUMNS, self.audit_rows(len(plans)))
        self.phase("audit", t)
        return SeedResult(gpus=len(gpus), servers=len(plans), sites=len(self.site_codes), rows=dict(self.w.counts),
                          audit_events=self.w.counts.get(AuditEvent._meta.db_table, 0), phases=self.phases,
                          backend="COPY" if self.w.pg else "bulk_create")

    # --- audit ---------------------------------------------------------------------------------
    def audit_rows(self, servers: int) -> Iterable[tuple]:
        """One ``create`` event per created object with the ``changes`` the services write, then a summary."""
        message = f"demo fleet (seed_demo --gpus {self.n} --seed {self.seed})"
        base = (self.now, self.actor_id, self.actor_name, self.source, AuditAction.CREATE)
        # Look content types up before the COPY starts: no other query may run on its connection meanwhile.
        cts = {a.model: ContentType.objects.get_for_model(a.model).pk for a in self.audited}
        gpu_ct = ContentType.objects.get_for_model(Gpu).pk
        return self._audit_rows(servers, message, base, cts, gpu_ct)

    def _audit_rows(self, servers: int, message: str, base: tuple, cts: dict, gpu_ct: int) -> Iterable[tuple]:
        for audited in self.audited:
            ct = cts[audited.model]
            empty = (None, "") if audited.skip_empty else (None,)
            columns = audited.columns
            for row in audited.rows:
                changes = {c: [None, _jsonable(v)] for c, v in zip(columns, row, strict=True) if v not in empty}
                yield (*base, ct, str(row[0]), audited.repr_of(row)[:200], changes, message)
        yield (self.now, self.actor_id, self.actor_name, self.source, AuditAction.IMPORT, gpu_ct, "", "demo fleet",
               {"gpus": [None, self.n], "servers": [None, servers], "sites": [None, len(self.site_codes)],
                "seed": [None, self.seed]},
               f"seed_demo: {self.n} GPUs in {servers} servers at {len(self.site_codes)} sites (seed {self.seed})")

    # --- catalog and locations -----------------------------------------------------------------
    def catalog(self) -> tuple[dict[str, GpuModel], dict[str, ServerPlatform]]:
        """GPU models and platforms: reused when present (matched by name), else created through the service."""
        gpu_models, platforms = {}, {}
        for sku in SKUS:
            gpu_models[sku.sku] = GpuModel.objects.filter(name=sku.name).first() or services.record_create(
                model_class=GpuModel, actor=self.actor, sku=sku.sku, name=sku.name, architecture=sku.architecture,
                memory_gib=sku.memory_gib, tdp_w=sku.tdp_w, slowdown_temp_c=sku.slowdown_c,
                shutdown_temp_c=sku.shutdown_c)
            platforms[sku.sku] = ServerPlatform.objects.filter(name=sku.platform).first() or services.record_create(
                model_class=ServerPlatform, actor=self.actor, name=sku.platform, vendor=sku.vendor,
                gpu_model=gpu_models[sku.sku], gpu_slots=SLOTS, height_u=sku.height_u)
        return gpu_models, platforms

    def locations(self) -> list[_ServerPlan]:
        """Sites > halls > rows (one platform and A/B power feeds per row) > racks of 4 HGX servers."""
        rng, w = self.rng, self.w
        n_servers = int(self.n * IN_SERVER_SHARE) // SLOTS
        per_site = _apportion(n_servers, [s[3] for s in SITES])
        site_ids = w.ids(Site, len(SITES))
        self.site_codes = {site_ids[i]: s[0] for i, s in enumerate(SITES)}
        sites = [(site_ids[i], code, name, tz, Decimal(f"{rng.uniform(0.05, 0.15):.4f}"),
                  Decimal(f"{rng.uniform(1.1, 1.5):.2f}")) for i, (code, name, tz, _, _) in enumerate(SITES)]
        halls: list[tuple] = []
        rows: list[tuple] = []
        feeds: list[tuple] = []
        racks: list[tuple] = []
        plans: list[_ServerPlan] = []
        for si, (code, _name, _tz, _share, mix) in enumerate(SITES):
            remaining, per_row = per_site[si], SERVERS_PER_RACK * RACKS_PER_ROW
            row_skus = [sku for sku, n in zip(SKUS, _apportion(-(-remaining // per_row), mix), strict=True)
                        for _ in range(n)]
            rng.shuffle(row_skus)  # one platform per row, in the site's mix
            for row_no, sku in enumerate(row_skus, start=1):
                if (row_no - 1) % ROWS_PER_HALL == 0:
                    halls.append((site_ids[si], f"DH{(row_no - 1) // ROWS_PER_HALL + 1}"))
                in_row = min(remaining, per_row)
                remaining -= in_row
                rows.append((len(halls) - 1, site_ids[si], f"r{row_no:02d}"))
                budget = Decimal(round(SERVERS_PER_RACK * sku.server_kw * 1.1))
                feeds.extend((site_ids[si], f"r{row_no:02d}-{side}", budget * RACKS_PER_ROW) for side in "AB")
                deployed = self.anchor - rng.randint(*sku.age_days) * DAY
                for first in range(0, in_row, SERVERS_PER_RACK):
                    position = first // SERVERS_PER_RACK + 1
                    racks.append((len(rows) - 1, site_ids[si], f"{code}-r{row_no:02d}-k{position:02d}", position,
                                  48, sku.cooling, budget, len(feeds) - 2))
                    plans.extend(_ServerPlan(si, sku, row_no, node + 1, len(racks) - 1, len(rows) - 1, site_ids[si],
                                             deployed + rng.randint(0, 20) * DAY)
                                 for node in range(first, min(first + SERVERS_PER_RACK, in_row)))
        hall_ids, row_ids, feed_ids, rack_ids = (w.ids(m, len(x)) for m, x in
                                                 ((Hall, halls), (Row, rows), (PowerFeed, feeds), (Rack, racks)))
        code = self.site_codes
        self.insert(Site, ["id", "code", "name", "timezone", "electricity_price_kwh", "pue"], sites,
                    repr_of=lambda r: r[1])
        self.insert(Hall, ["id", "site_id", "name"], [(hall_ids[i], *h) for i, h in enumerate(halls)],
                    repr_of=lambda r: f"{code[r[1]]}/{r[2]}")
        self.insert(Row, ["id", "hall_id", "site_id", "name"],
                    [(row_ids[i], hall_ids[r[0]], r[1], r[2]) for i, r in enumerate(rows)],
                    repr_of=lambda r: f"{code[r[2]]}/{r[3]}")
        self.insert(PowerFeed, ["id", "site_id", "name", "capacity_kw"],
                    [(feed_ids[i], *f) for i, f in enumerate(feeds)], repr_of=lambda r: f"{code[r[1]]}/{r[2]}")
        self.insert(Rack, ["id", "row_id", "site_id", "name", "position", "height_u", "cooling", "power_budget_kw"],
                    [(rack_ids[i], row_ids[r[0]], *r[1:7]) for i, r in enumerate(racks)], repr_of=lambda r: r[3])
        w.write(Rack.power_feeds.through, ["rack_id", "powerfeed_id"],
                [(rack_ids[i], feed_ids[r[7] + side]) for i, r in enumerate(racks) for side in (0, 1)])
        for p in plans:
            p.rack, p.row = rack_ids[p.rack], row_ids[p.row]
        return plans

    def servers(self, plans: list[_ServerPlan], platforms: dict[str, ServerPlatform]) -> None:
        """One HGX server per plan, its NVLink domain (the baseboard) and its BMC/SBIOS/HMC firmware."""
        rng, w = self.rng, self.w
        ids, domain_ids = w.ids(Server, len(plans)), w.ids(NvlinkDomain, len(plans))
        burn = set(rng.sample(range(len(plans)), min(len(plans), round(self.n * BURN_IN_SHARE / SLOTS))))
        rest = [i for i in range(len(plans)) if i not in burn]
        n_masked = max(1 if len(plans) >= 10 else 0, round(len(plans) * MASKED_SERVER_SHARE))
        masked = set(rng.sample(rest, min(len(rest), n_masked)))
        domains, servers = [], []
        for i, p in enumerate(plans):
            p.id, p.burn_in, p.masked = ids[i], i in burn, i in masked
            if p.burn_in:
                p.deployed = self.anchor + rng.randint(1, 10) * DAY  # leaves burn-in in 1-10 days
            p.driver, p.vbios = _weighted(rng, p.sku.drivers), _weighted(rng, p.sku.vbios)
            if p.driver == p.sku.drivers[-1][0] and p.deployed < self.anchor - 120 * DAY:
                p.driver_upgraded = self.anchor - rng.randint(10, 90) * DAY
            p.last_seen = self.anchor - dt.timedelta(minutes=rng.randint(5, 600))
            serial = (f"S{rng.randrange(10**11, 10**12)}" if p.sku.vendor == "Supermicro"
                      else "".join(rng.choices("0123456789BCDFGHJKLMNPQRSTVWXYZ", k=7)))
            unit = 3 + (p.node - 1) % SERVERS_PER_RACK * (p.sku.height_u + 2)
            domains.append((domain_ids[i], p.site_id, f"{p.hostname}/HGX_Baseboard_0"))
            servers.append((ids[i], p.hostname, serial, platforms[p.sku.sku].pk,
                            f"10.{16 + p.site}.{p.row_no}.{10 + p.node}", p.rack, unit, domain_ids[i], p.site_id,
                            p.row))
            seen = p.deployed - LAG[S.BURN_IN] * DAY
            for component, choices in ((FirmwareComponent.BMC, p.sku.bmc), (FirmwareComponent.SBIOS, p.sku.sbios),
                                       (FirmwareComponent.HMC, p.sku.hmc)):
                self.firmware.append((None, p.id, component, _weighted(rng, choices), "redfish", seen,
                                      max(seen, p.last_seen)))
        self.insert(NvlinkDomain, ["id", "site_id", "name"], domains, repr_of=lambda r: r[2])
        self.insert(Server, ["id", "hostname", "serial", "platform_id", "bmc_address", "rack_id", "rack_unit",
                             "nvlink_domain_id", "site_id", "row_id"], servers, repr_of=lambda r: r[1])

    # --- GPUs ----------------------------------------------------------------------------------
    def gpus(self, plans: list[_ServerPlan], gpu_models: dict[str, GpuModel]) -> list[tuple]:
        """Eight GPUs per server, then the GPUs outside servers; with state history, moves and firmware.

        RMA and decommissioning GPUs came out of an in-service slot; the GPU now in that slot was a spare
        that went back through burn-in, so slot history, state history and firmware drift agree.
        """
        rng = self.rng
        n_in = len(plans) * SLOTS
        out = dict(zip(UNPLACED_WEIGHTS, _apportion(max(0, self.n - n_in), list(UNPLACED_WEIGHTS.values())),
                       strict=True))
        eligible = [i for i in range(n_in) if not plans[i // SLOTS].burn_in]
        drained = set(rng.sample(eligible, min(len(eligible), round(self.n * DRAINED_SHARE))))
        candidates = [i for i in eligible if i not in drained and not plans[i // SLOTS].masked]
        replaced: dict[int, dt.datetime] = {}  # slot -> when its first GPU was pulled
        for slot in rng.sample(candidates, min(len(candidates), out[S.RMA] + out[S.DECOMMISSIONING])):
            deployed = plans[slot // SLOTS].deployed
            span = max(0, (self.anchor - deployed).days - 9)
            replaced[slot] = deployed + (7 + rng.randint(0, span)) * DAY + rng.randint(0, 23) * HOUR
        self.ids = self.w.ids(Gpu, self.n)
        self.suffixes = rng.sample(range(10**7), self.n)  # serial = model prefix + unique 7 digits
        self.tags = 0
        gpus: list[tuple] = []
        for slot in range(n_in):
            p, k = plans[slot // SLOTS], slot % SLOTS
            gpus.append(self.placed(len(gpus), p, k, gpu_models[p.sku.sku], drained=slot in drained,
                                    replaced_at=replaced.get(slot)))
        formers = list(replaced.items())
        mix = [sum(p.sku is sku for p in plans) or 1 for sku in SKUS]
        for state in (S.RMA, S.DECOMMISSIONING, S.SPARE, S.RECEIVED, S.ORDERED):
            for _ in range(out[state]):
                if state in (S.RMA, S.DECOMMISSIONING) and formers:
                    slot, removed = formers.pop()
                    p = plans[slot // SLOTS]
                    gpus.append(self.former(len(gpus), p, slot % SLOTS, gpu_models[p.sku.sku], state, removed))
                else:
                    sku = rng.choices(SKUS, weights=mix)[0]
                    gpus.append(self.unplaced(len(gpus), sku, gpu_models[sku.sku], state))
        return gpus

    def history(self, gpu_id: int, steps: Sequence[tuple[str, dt.datetime, str]]) -> dt.datetime:
        """State rows for ``steps`` of (to_state, at, reason); returns when the last one happened."""
        before = ""
        for to_state, at, reason in steps:
            self.states.append((gpu_id, before, to_state, self.actor_name, reason, at))
            before = to_state
        return steps[-1][1]

    def move(self, gpu_id: int, kind: str, at: dt.datetime, p: _ServerPlan, k: int, *, out: bool = False) -> None:
        place = (p.id, f"00000000:{HGX_BUSES[k]}:00.0", k + 1)
        empty = (None, "", None)
        self.moves.append((gpu_id, kind, *(place if out else empty), *(empty if out else place), self.actor_name,
                           "", at))

    def observe(self, gpu_id: int, versions: Sequence[tuple[str, str, dt.datetime, dt.datetime]]) -> None:
        for component, version, first, last in versions:
            self.firmware.append((gpu_id, None, component, version, "nvidia-smi-xml", first, last))

    def identity(self, i: int, sku: Sku, *, serial: bool = True, uuid_known: bool = True) -> tuple:
        """(serial, serial_raw, uuid, uuid_raw, identity_masked); a UUID is drawn either way (stable streams).
        The ``*_raw`` columns hold what a tool reported only when it was masked (as the importer keeps them)."""
        drawn = f"GPU-{uuid.UUID(int=self.rng.getrandbits(128))}"
        sn = f"{sku.serial_prefix}{self.suffixes[i]:07d}" if serial else None
        uid = drawn if uuid_known else None
        return sn, "", uid, "", False

    def tag(self) -> str:
        self.tags += 1
        return f"FA{self.tags:07d}"

    def row(self, i: int, ident: tuple, gm: GpuModel, sku: Sku, state: str, changed: dt.datetime,
            received: dt.datetime | None, placement: tuple, firmware: tuple[str, str, str], tag: bool = True) -> tuple:
        years = 5 if sku.vendor == "Dell" else 3
        warranty = (received + years * 365 * DAY).date() if received else None
        return (self.ids[i], *ident, gm.pk, sku.board_part_number, self.tag() if tag else None, warranty, state,
                changed, *placement, *firmware, self.now, self.now)

    def placed(self, i: int, p: _ServerPlan, k: int, gm: GpuModel, *, drained: bool,
               replaced_at: dt.datetime | None) -> tuple:
        rng, gpu_id, sku = self.rng, self.ids[i], p.sku
        vbios, driver = p.vbios, p.driver
        if replaced_at is not None:  # came from the spares pool when the first GPU of this slot was pulled
            received = replaced_at - rng.randint(30, 200) * DAY
            installed = replaced_at + DAY
            vbios = sku.vbios[-1][0]  # the spares pool is flashed to the newest VBIOS
            steps = [(S.RECEIVED, received, ""), (S.SPARE, received + 3 * DAY, "intake test passed"),
                     (S.BURN_IN, installed, "replacement"), (S.IN_SERVICE, installed + DAY, "")]
            self.move(gpu_id, MoveKind.FROM_SPARES, installed, p, k)
        else:
            installed = p.deployed - LAG[S.BURN_IN] * DAY
            received = p.deployed - LAG[S.RECEIVED] * DAY
            steps = [(S.RECEIVED, received, ""), (S.BURN_IN, installed, "")]
            if not p.burn_in:
                steps.append((S.IN_SERVICE, p.deployed, "burn-in passed"))
            self.move(gpu_id, MoveKind.INSTALL, installed, p, k)
        if drained:
            at = max(p.deployed + DAY, self.anchor - rng.randint(1, 20) * DAY - rng.randint(0, 23) * HOUR)
            steps.append((S.DRAINED, at, rng.choice(DRAIN_REASONS)))
        changed = self.history(gpu_id, steps)
        if p.masked:  # a pass-through host: nvidia-smi reports zeroes; half of them mask the UUID too
            uid = f"GPU-{uuid.UUID(int=self.rng.getrandbits(128))}"
            ident = (None, MASKED_SERIAL, None if p.node % 2 else uid, MASKED_UUID if p.node % 2 else "", True)
        else:
            ident = self.identity(i, sku)
        observed = [(FirmwareComponent.GPU_VBIOS, vbios, installed, p.last_seen),
                    (FirmwareComponent.GPU_INFOROM_IMAGE, sku.inforom, installed, p.last_seen)]
        if p.driver_upgraded and installed < p.driver_upgraded:
            observed += [(FirmwareComponent.DRIVER, sku.drivers[0][0], installed, p.driver_upgraded),
                         (FirmwareComponent.DRIVER, driver, p.driver_upgraded, p.last_seen)]
        else:
            observed.append((FirmwareComponent.DRIVER, driver, installed, p.last_seen))
        self.observe(gpu_id, observed)
        placement = (p.id, k + 1, f"00000000:{HGX_BUSES[k]}:00.0", k, p.site_id, p.row, p.rack)
        return self.row(i, ident, gm, sku, steps[-1][0], changed, received, placement,
                        (vbios, sku.inforom, driver), tag=not p.masked)

    def former(self, i: int, p: _ServerPlan, k: int, gm: GpuModel, state: str, removed: dt.datetime) -> tuple:
        """An RMA or decommissioning GPU: installed with its server, drained, pulled at ``removed``."""
        rng, gpu_id, sku = self.rng, self.ids[i], p.sku
        installed, received = p.deployed - LAG[S.BURN_IN] * DAY, p.deployed - LAG[S.RECEIVED] * DAY
        reason = rng.choice(RMA_REASONS) if state == S.RMA else "end of life after failed repair"
        changed = self.history(gpu_id, [(S.RECEIVED, received, ""), (S.BURN_IN, installed, ""),
                                        (S.IN_SERVICE, p.deployed, "burn-in passed"),
                                        (S.DRAINED, removed - DAY, rng.choice(DRAIN_REASONS)),
                                        (state, removed, reason)])
        self.move(gpu_id, MoveKind.INSTALL, installed, p, k)
        self.move(gpu_id, MoveKind.REMOVE, removed, p, k, out=True)
        upgraded_later = p.driver_upgraded is not None and removed < p.driver_upgraded
        driver = sku.drivers[0][0] if upgraded_later else p.driver
        self.observe(gpu_id, [(FirmwareComponent.GPU_VBIOS, p.vbios, installed, removed),
                              (FirmwareComponent.GPU_INFOROM_IMAGE, sku.inforom, installed, removed),
                              (FirmwareComponent.DRIVER, driver, installed, removed)])
        return self.row(i, self.identity(i, sku), gm, sku, state, changed, received, UNPLACED,
                        (p.vbios, sku.inforom, driver))

    def unplaced(self, i: int, sku: Sku, gm: GpuModel, state: str) -> tuple:
        """Spares (tested at intake), GPUs just received, GPUs on order; and RMA/decommissioning GPUs of fleets
        too small to have had a replacement."""
        rng, gpu_id = self.rng, self.ids[i]
        received = self.anchor - rng.randint(10, 400) * DAY - rng.randint(0, 23) * HOUR
        vbios = inforom = ""
        if state == S.ORDERED:
            received = None
            steps = [(S.ORDERED, self.anchor - rng.randint(1, 60) * DAY, "PO demo")]
        elif state == S.RECEIVED:
            received = self.anchor - rng.randint(1, 10) * DAY
            steps = [(S.RECEIVED, received, "")]
        elif state == S.SPARE:
            steps = [(S.RECEIVED, received, ""), (S.SPARE, received + 3 * DAY, "intake test passed")]
        else:
            steps = [(S.RECEIVED, received, ""), (S.BURN_IN, received + 7 * DAY, ""),
                     (S.IN_SERVICE, received + 14 * DAY, ""), (S.DRAINED, received + 30 * DAY, ""),
                     (state, received + 31 * DAY, "")]
        if state not in (S.ORDERED, S.RECEIVED):
            vbios, inforom = _weighted(rng, sku.vbios), sku.inforom
            tested = received + 2 * DAY
            self.observe(gpu_id, [(FirmwareComponent.GPU_VBIOS, vbios, tested, tested),
                                  (FirmwareComponent.GPU_INFOROM_IMAGE, inforom, tested, tested)])
        changed = self.history(gpu_id, steps)
        ident = self.identity(i, sku, serial=state != S.ORDERED, uuid_known=state not in (S.ORDERED, S.RECEIVED))
        return self.row(i, ident, gm, sku, state, changed, received, UNPLACED, (vbios, inforom, ""),
                        tag=state != S.ORDERED)
