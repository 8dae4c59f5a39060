"""Building the demo fleet: locations, servers, GPUs with their history and firmware, and the audit trail."""

from __future__ import annotations

import datetime as dt
import random
import time
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal

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
    DRAINED_SHARE,
    HOUR,
    IN_SERVER_SHARE,
    LAG,
    MASKED_SERVER_SHARE,
    RACKS_PER_ROW,
    ROWS_PER_HALL,
    SERVERS_PER_RACK,
    SITES,
    SKUS,
    SLOTS,
    UNPLACED_WEIGHTS,
    S,
)
from inventory.seed.gpu_rows import GpuRows
from inventory.seed.plans import (
    AUDIT_COLUMNS,
    FIRMWARE_COLUMNS,
    GPU_COLUMNS,
    MOVE_COLUMNS,
    STATE_COLUMNS,
    Audited,
    SeedResult,
    ServerPlan,
    apportion,
    jsonable,
    weighted,
)
from inventory.seed.writer import Writer


class Builder(GpuRows):
    def __init__(self, *, gpus: int, seed: int, actor: Actor, writer: Writer) -> None:
        self.n, self.seed, self.actor, self.w = gpus, seed, actor, writer
        self.rng = random.Random(seed)
        self.now = timezone.now()
        self.anchor = self.now.replace(hour=0, minute=0, second=0, microsecond=0)
        fields = actor_fields(actor)
        self.actor_id, self.actor_name = getattr(fields["actor"], "pk", None), fields["actor_name"]
        self.source = current_source()
        self.audited: list[Audited] = []
        self.phases: dict[str, float] = {}
        self.site_codes: dict[int, str] = {}
        self.states: list[tuple] = []
        self.moves: list[tuple] = []
        self.firmware: list[tuple] = []

    def insert(self, model: type[models.Model], columns: Sequence[str], rows: list[tuple],
               repr_of: Callable[[tuple], str], skip_empty: bool = False) -> None:
        """Write rows and remember them for their ``create`` audit events (written last, streamed)."""
        self.w.write(model, columns, rows)
        self.audited.append(Audited(model, columns, rows, repr_of, skip_empty))

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
                changes = {c: [None, jsonable(v)] for c, v in zip(columns, row, strict=True) if v not in empty}
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

    def locations(self) -> list[ServerPlan]:
        """Sites > halls > rows (one platform and A/B power feeds per row) > racks of 4 HGX servers."""
        rng, w = self.rng, self.w
        n_servers = int(self.n * IN_SERVER_SHARE) // SLOTS
        per_site = apportion(n_servers, [s[3] for s in SITES])
        site_ids = w.ids(Site, len(SITES))
        self.site_codes = {site_ids[i]: s[0] for i, s in enumerate(SITES)}
        sites = [(site_ids[i], code, name, tz, Decimal(f"{rng.uniform(0.05, 0.15):.4f}"),
                  Decimal(f"{rng.uniform(1.1, 1.5):.2f}")) for i, (code, name, tz, _, _) in enumerate(SITES)]
        halls: list[tuple] = []
        rows: list[tuple] = []
        feeds: list[tuple] = []
        racks: list[tuple] = []
        plans: list[ServerPlan] = []
        for si, (code, _name, _tz, _share, mix) in enumerate(SITES):
            remaining, per_row = per_site[si], SERVERS_PER_RACK * RACKS_PER_ROW
            row_skus = [sku for sku, n in zip(SKUS, apportion(-(-remaining // per_row), mix), strict=True)
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
                    plans.extend(ServerPlan(si, sku, row_no, node + 1, len(racks) - 1, len(rows) - 1, site_ids[si],
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

    def servers(self, plans: list[ServerPlan], platforms: dict[str, ServerPlatform]) -> None:
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
            p.driver, p.vbios = weighted(rng, p.sku.drivers), weighted(rng, p.sku.vbios)
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
                self.firmware.append((None, p.id, component, weighted(rng, choices), "redfish", seen,
                                      max(seen, p.last_seen)))
        self.insert(NvlinkDomain, ["id", "site_id", "name"], domains, repr_of=lambda r: r[2])
        self.insert(Server, ["id", "hostname", "serial", "platform_id", "bmc_address", "rack_id", "rack_unit",
                             "nvlink_domain_id", "site_id", "row_id"], servers, repr_of=lambda r: r[1])

    # --- GPUs ----------------------------------------------------------------------------------
    def gpus(self, plans: list[ServerPlan], gpu_models: dict[str, GpuModel]) -> list[tuple]:
        """Eight GPUs per server, then the GPUs outside servers; with state history, moves and firmware.

        RMA and decommissioning GPUs came out of an in-service slot; the GPU now in that slot was a spare
        that went back through burn-in, so slot history, state history and firmware drift agree.
        """
        rng = self.rng
        n_in = len(plans) * SLOTS
        out = dict(zip(UNPLACED_WEIGHTS, apportion(max(0, self.n - n_in), list(UNPLACED_WEIGHTS.values())),
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
