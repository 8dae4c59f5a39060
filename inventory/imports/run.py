"""One import run: check the parsed records, load what they refer to, match, plan, and write in bulk.

The rules are in the package docstring (:mod:`inventory.imports`)."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import F, Lookup, Q
from django.utils import timezone

from fleet.audit import Actor
from inventory.importers.base import GpuRecord, ImportError_
from inventory.imports.records import (
    CREATE,
    DENORMALISED,
    HOSTNAME,
    MAX_LEN,
    MOVE,
    ONE_QUERY_VALUES,
    UNCHANGED,
    UPDATE,
    ImportResult,
    Plan,
    chunks,
    compatible,
    model_key,
    same_value,
)
from inventory.imports.write import ImportWrite
from inventory.models import Gpu, GpuModel, GpuState, Server


class AnyOf(Lookup):
    """``column = ANY(%s)`` with the values as one array parameter (PostgreSQL): a 5,000-GPU file's identities
    are three parameters, not 10,000 placeholders for Django to build and psycopg to quote one by one."""

    lookup_name = "any_of"
    prepare_rhs = False

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} = ANY({rhs})", [*lhs_params, *rhs_params]


class Import(ImportWrite):
    """One import run: check, load (a few queries for the whole file), match, plan, then write in bulk."""

    def __init__(self, *, records: list[GpuRecord], filename: str, fmt: str, hint: str | None, actor: Actor | None,
                 result: ImportResult, lock: bool, new_state: str = GpuState.RECEIVED) -> None:
        self.filename, self.fmt, self.actor, self.result, self.lock = filename, fmt, actor, result, lock
        self.new_state = str(new_state)
        self.plans = [Plan(record=r, host=r.hostname or hint) for r in records]
        self.servers: dict[str, Server] = {}
        self.gpus: dict[int, Gpu] = {}
        self.models: dict[str, GpuModel] = {}
        self.new_models: dict[str, GpuRecord] = {}
        self.displaced: dict[int, tuple[Gpu, tuple[str, str, int | None]]] = {}
        self.now = timezone.now()
        self.reason = f"import of {filename}" + ("" if self.new_state == GpuState.RECEIVED else
                                                 f" (new GPUs in {self.new_state}, picked by the importer)")
        self.reason = self.reason[:500]

    def error(self, record: GpuRecord | None, name: str, message: str) -> None:
        field_name = record.field_name(name) if record else name
        filename = record.source if record and record.source else self.filename
        self.result.errors.append(ImportError_(filename, record.line if record else None, field_name, message))

    def run(self) -> None:
        self.check()
        if not self.result.errors:
            self.load()
            self.match()
        if not self.result.errors:
            self.plan()
        if not self.result.errors:
            self.apply()

    # --- checks on the file alone ---------------------------------------------------------------

    def check(self) -> None:
        seen: dict[tuple[str, Any], int] = {}
        for plan in self.plans:
            rec = plan.record
            if plan.host is not None and not HOSTNAME.match(plan.host):
                self.error(rec, "hostname", f"{plan.host!r} is not a hostname")
            for name, limit in MAX_LEN.items():
                value = getattr(rec, name)
                if value is not None and len(value) > limit:
                    self.error(rec, name, f"longer than {limit} characters")
            for component, version in rec.firmware.items():
                if len(version) > (40 if component in DENORMALISED else 80):
                    self.error(rec, component, "longer than 40 characters" if component in DENORMALISED
                               else "longer than 80 characters")
            slot = (plan.host, rec.pci_bus_id) if plan.host and rec.pci_bus_id else None
            if not (rec.serial or rec.uuid or rec.asset_tag or slot):
                self.error(rec, "serial", "no identity: the serial and UUID are masked or absent and the GPU has "
                                          "no server slot (give the server's hostname, e.g. --server)")
            for name, key in (("serial", rec.serial), ("uuid", rec.uuid), ("asset_tag", rec.asset_tag),
                              ("pci_bus_id", slot)):
                if key is None:
                    continue
                if (name, key) in seen:
                    what = f"{slot[1]} in {slot[0]}" if name == "pci_bus_id" and slot else key
                    self.error(rec, name, f"{what} is also on line {seen[name, key]}")
                else:
                    seen[name, key] = rec.line

    # --- loading: a handful of queries for the whole file ----------------------------------------

    def load(self) -> None:
        hosts = sorted({p.host for p in self.plans if p.host})
        for chunk in chunks(hosts):
            self.servers.update((s.hostname, s) for s in Server.objects.filter(hostname__in=chunk).order_by())
        server_ids = [s.pk for s in self.servers.values()]
        keys = {name: sorted({getattr(p.record, name) for p in self.plans} - {None})
                for name in ("serial", "uuid", "asset_tag")}
        queryset = Gpu.objects.select_related("server").order_by()  # no ORDER BY: a dict is built
        if self.lock:
            queryset = queryset.select_for_update(of=("self",))
        lookups = [("server_id", server_ids), ("serial", keys["serial"]), ("uuid", keys["uuid"]),
                   ("asset_tag", keys["asset_tag"])]
        if connection.vendor == "postgresql":  # one query, one array per identity (``= ANY``), whatever the size
            condition = Q()
            for name, values in lookups:
                if values:
                    condition |= Q(AnyOf(F(name), values))
            if condition:
                self.gpus.update((g.pk, g) for g in queryset.filter(condition))
        elif sum(len(values) for _, values in lookups) <= ONE_QUERY_VALUES:  # one query for the whole file
            condition = Q()
            for name, values in lookups:
                if values:
                    condition |= Q(**{f"{name}__in": values})
            if condition:
                self.gpus.update((g.pk, g) for g in queryset.filter(condition))
        else:  # a huge file: the GPUs of its servers first, then only the identities still missing
            for name, values in lookups:
                if name != "server_id":
                    present = {getattr(g, name) for g in self.gpus.values()}
                    values = [v for v in values if v not in present]
                for chunk in chunks(values):
                    self.gpus.update((g.pk, g) for g in queryset.filter(**{f"{name}__in": chunk}))
        self.by_serial = {g.serial: g for g in self.gpus.values() if g.serial}
        self.by_uuid = {g.uuid: g for g in self.gpus.values() if g.uuid}
        self.by_asset = {g.asset_tag: g for g in self.gpus.values() if g.asset_tag}
        self.by_slot = {(g.server.hostname, g.pci_bus_id): g for g in self.gpus.values() if g.server_id and g.pci_bus_id}
        self.all_models = list(GpuModel.objects.only("id", "name", "sku").order_by())
        self.models = {model_key(m.name): m for m in self.all_models}

    # --- matching ------------------------------------------------------------------------------

    def match(self) -> None:
        claimed: dict[int, int] = {}
        for plan in self.plans:  # identities first, so a slot match never takes a GPU another line names
            rec = plan.record
            hits = [(name, gpu) for name, index, key in (("serial", self.by_serial, rec.serial),
                                                         ("uuid", self.by_uuid, rec.uuid),
                                                         ("asset_tag", self.by_asset, rec.asset_tag))
                    if key and (gpu := index.get(key)) is not None]
            if len({gpu.pk for _, gpu in hits}) > 1:
                (name_a, gpu_a), (name_b, gpu_b) = hits[0], next(h for h in hits if h[1].pk != hits[0][1].pk)
                self.error(rec, name_b, f"{getattr(rec, name_a)} is {name_a} of GPU {gpu_a.identity}, but "
                                        f"{getattr(rec, name_b)} is {name_b} of GPU {gpu_b.identity}")
                continue
            if hits:
                self._claim(plan, hits[0][1], claimed)
        for plan in self.plans:
            rec = plan.record
            if plan.gpu is None and plan.host and rec.pci_bus_id:
                occupant = self.by_slot.get((plan.host, rec.pci_bus_id))
                if occupant is not None and occupant.pk not in claimed and compatible(occupant, rec):
                    self._claim(plan, occupant, claimed)

    def _claim(self, plan: Plan, gpu: Gpu, claimed: dict[int, int]) -> None:
        if gpu.pk in claimed:
            self.error(plan.record, "serial", f"names the same GPU ({gpu.identity}) as line {claimed[gpu.pk]}")
            return
        claimed[gpu.pk] = plan.record.line
        plan.gpu, plan.gpu_id = gpu, gpu.pk

    # --- planning ------------------------------------------------------------------------------

    def plan(self) -> None:
        final_slots: dict[tuple[str, str], int] = {}
        for plan in self.plans:
            rec, gpu = plan.record, plan.gpu
            if rec.product_name:
                plan.model_key = model_key(rec.product_name)
                if plan.model_key not in self.models:
                    self.new_models.setdefault(plan.model_key, rec)
            if gpu is None:
                if not rec.product_name:
                    self.error(rec, "product_name", "a new GPU needs its model (product name)")
                plan.action = CREATE
                plan.state = rec.state or self.new_state
            else:
                if rec.state and rec.state != gpu.state:
                    self.error(rec, "state", f"GPU {gpu.identity} is {gpu.state} in Fleet, the file says {rec.state}; "
                                             "an import never changes a state (use a transition)")
                plan.changes = self._field_changes(gpu, rec, plan.model_key)
                plan.target = self._placement_change(plan)
                plan.action = MOVE if plan.target else UPDATE if plan.changes else UNCHANGED
            slot = self._final_slot(plan)
            if slot is None:
                continue
            if slot in final_slots:
                self.error(rec, "pci_bus_id", f"{slot[1]} in {slot[0]} is also the slot of the GPU on line "
                                              f"{final_slots[slot]}")
            final_slots[slot] = rec.line
        claimed = {p.gpu.pk for p in self.plans if p.gpu is not None}
        for plan in self.plans:
            if plan.host and plan.record.pci_bus_id and (plan.action == CREATE or plan.target):
                occupant = self.by_slot.get((plan.host, plan.record.pci_bus_id))
                if occupant is not None and occupant.pk not in claimed:
                    self.displaced[occupant.pk] = (occupant, (plan.host, occupant.pci_bus_id, occupant.module_id))

    def _field_changes(self, gpu: Gpu, rec: GpuRecord, model_key: str | None) -> dict[str, list[Any]]:
        new: dict[str, Any] = {}
        if rec.serial is not None:
            new.update(serial=rec.serial, serial_raw="")
        elif rec.serial_raw is not None and gpu.serial is None:
            new["serial_raw"] = rec.serial_raw
        if rec.uuid is not None:
            new.update(uuid=rec.uuid, uuid_raw="")
        elif rec.uuid_raw is not None and gpu.uuid is None:
            new["uuid_raw"] = rec.uuid_raw
        serial, serial_raw = new.get("serial", gpu.serial), new.get("serial_raw", gpu.serial_raw)
        uuid, uuid_raw = new.get("uuid", gpu.uuid), new.get("uuid_raw", gpu.uuid_raw)
        new["identity_masked"] = bool((serial is None and serial_raw) or (uuid is None and uuid_raw))
        if model_key is not None and model_key in self.models:
            new["model_id"] = self.models[model_key].pk
        elif model_key is not None:
            new["model_id"] = model_key  # a model this import creates; resolved to its id when written
        for name in ("board_part_number", "asset_tag", "warranty_end", "minor_number"):
            if (value := getattr(rec, name)) is not None:
                new[name] = value
        for component, attname in DENORMALISED.items():
            if (version := rec.firmware.get(component)) is not None:
                new[attname] = version
        return {name: [getattr(gpu, name), value] for name, value in new.items()
                if not same_value(getattr(gpu, name), value)}

    def _placement_change(self, plan: Plan) -> tuple[str, str, int | None] | None:
        gpu, rec = plan.gpu, plan.record
        if plan.host is None or gpu is None:
            return None
        current_host = gpu.server.hostname if gpu.server_id else None
        same_server = current_host == plan.host
        bus = rec.pci_bus_id if rec.pci_bus_id is not None else gpu.pci_bus_id if same_server else ""
        module = rec.module_id if rec.module_id is not None else gpu.module_id if same_server else None
        if (current_host, gpu.pci_bus_id, gpu.module_id) == (plan.host, bus, module):
            return None
        plan.moved_from = (current_host, gpu.pci_bus_id, gpu.module_id)
        return plan.host, bus, module

    def _final_slot(self, plan: Plan) -> tuple[str, str] | None:
        if plan.target:
            return (plan.target[0], plan.target[1]) if plan.target[1] else None
        if plan.action == CREATE:
            return (plan.host, plan.record.pci_bus_id) if plan.host and plan.record.pci_bus_id else None
        gpu = plan.gpu
        if gpu is not None and gpu.server_id and gpu.pci_bus_id:
            return gpu.server.hostname, gpu.pci_bus_id
        return None

    # --- writing -------------------------------------------------------------------------------
