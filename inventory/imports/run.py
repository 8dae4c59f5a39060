"""One import run: check the parsed records, load what they refer to, match, plan, and write in bulk.

The rules are in the package docstring (:mod:`inventory.imports`)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from django.contrib.contenttypes.models import ContentType
from django.db.models import Q
from django.utils import timezone

from fleet import bulk
from fleet.audit import (
    Actor,
    actor_fields,
    audit_event,
    audit_row_maker,
    audit_rows_write,
    audit_write_many,
    diff,
    snapshot,
)
from fleet.models import AuditAction, AuditEvent
from inventory.importers.base import FW_DRIVER, FW_INFOROM_IMAGE, FW_VBIOS, GpuRecord, ImportError_
from inventory.models import (
    FirmwareObservation,
    Gpu,
    GpuModel,
    GpuMove,
    GpuState,
    GpuStateChange,
    MoveKind,
    Server,
)
from inventory.services import gpu_move_record

CREATE, UPDATE, MOVE, UNCHANGED = "create", "update", "move", "unchanged"
MAX_ERRORS = 500
# ``FirmwareObservation.last_seen`` moves only when older than this: re-importing a fleet's files every few
# minutes would otherwise rewrite every observation row each time (6,000 rows per 1,000 GPUs).
LAST_SEEN_RESOLUTION = dt.timedelta(minutes=15)
_CHUNK = 5000  # values per IN (...) list
_ONE_QUERY_VALUES = 30_000  # PostgreSQL takes at most 65,535 parameters per query
_BATCH = 2000
HOSTNAME = re.compile(r"^[a-z0-9](?:[a-z0-9._\-]{0,251}[a-z0-9])?$")
_DENORMALISED = {FW_VBIOS: "vbios_version", FW_INFOROM_IMAGE: "inforom_image", FW_DRIVER: "driver_version"}
_MAX_LEN = {"serial_raw": 64, "uuid_raw": 64, "board_part_number": 64, "asset_tag": 64, "product_name": 100,
            "architecture": 40}
_PLACEMENT = ("server", "site", "row", "rack", "pci_bus_id", "module_id")
_GPU_ATTNAMES = tuple(f.attname for f in Gpu._meta.concrete_fields)


@dataclass
class ImportResult:
    created: int = 0
    updated: int = 0
    moved: int = 0
    unchanged: int = 0
    servers_created: list[str] = field(default_factory=list)
    models_created: list[str] = field(default_factory=list)
    errors: list[ImportError_] = field(default_factory=list)
    notices: list[ImportError_] = field(default_factory=list)  # harmless things read past (new CSV columns)
    rows: list[dict[str, Any]] = field(default_factory=list)
    applied: bool = False
    fmt: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``ImportRun.summary``, API responses)."""
        return {"created": self.created, "updated": self.updated, "moved": self.moved, "unchanged": self.unchanged,
                "servers_created": self.servers_created, "models_created": self.models_created,
                "errors": [e.as_dict() for e in self.errors], "notices": [n.as_dict() for n in self.notices],
                "rows": self.rows, "applied": self.applied,
                "format": self.fmt}


class ImportFile(NamedTuple):
    filename: str
    content: bytes
    server_hint: str = ""


def capped(errors: list[ImportError_]) -> list[ImportError_]:
    if len(errors) <= MAX_ERRORS:
        return errors
    first = errors[0]
    return [*errors[:MAX_ERRORS], ImportError_(first.file, None, "", f"... and {len(errors) - MAX_ERRORS} more")]


def _chunks[T](values: Sequence[T], size: int = _CHUNK) -> Iterator[Sequence[T]]:
    for start in range(0, len(values), size):
        yield values[start:start + size]


def _model_key(name: str) -> str:
    return " ".join(name.split()).casefold()


def _sku_for(name: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Z0-9]+", "-", re.sub(r"^NVIDIA\s+", "", name.strip(), flags=re.IGNORECASE).upper())
    base = base.strip("-")[:74] or "GPU"
    sku, n = base, 2
    while sku in taken:
        sku, n = f"{base}-{n}", n + 1
    taken.add(sku)
    return sku


def _json(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.date) else value


def _same(old: Any, new: Any) -> bool:
    if isinstance(old, str) and isinstance(new, str):
        return old.casefold() == new.casefold()  # versions differ in case between tools
    return old == new


@dataclass
class _Plan:
    record: GpuRecord
    host: str | None  # the server the file puts the GPU in; None: keep its placement
    gpu: Gpu | None = None
    action: str = UNCHANGED
    model_key: str | None = None
    state: str = ""
    changes: dict[str, list[Any]] = field(default_factory=dict)  # attname -> [before, after]
    target: tuple[str, str, int | None] | None = None  # (hostname, bus, module) when placement changes
    moved_from: tuple[str | None, str, int | None] | None = None


class Import:
    """One import run: check, load (a few queries for the whole file), match, plan, then write in bulk."""

    def __init__(self, *, records: list[GpuRecord], filename: str, fmt: str, hint: str | None, actor: Actor | None,
                 result: ImportResult, lock: bool) -> None:
        self.filename, self.fmt, self.actor, self.result, self.lock = filename, fmt, actor, result, lock
        self.plans = [_Plan(record=r, host=r.hostname or hint) for r in records]
        self.servers: dict[str, Server] = {}
        self.gpus: dict[int, Gpu] = {}
        self.models: dict[str, GpuModel] = {}
        self.new_models: dict[str, GpuRecord] = {}
        self.displaced: dict[int, tuple[Gpu, tuple[str, str, int | None]]] = {}
        self.now = timezone.now()
        self.reason = f"import of {filename}"[:500]

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
            for name, limit in _MAX_LEN.items():
                value = getattr(rec, name)
                if value is not None and len(value) > limit:
                    self.error(rec, name, f"longer than {limit} characters")
            for component, version in rec.firmware.items():
                if len(version) > (40 if component in _DENORMALISED else 80):
                    self.error(rec, component, "longer than 40 characters" if component in _DENORMALISED
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
        for chunk in _chunks(hosts):
            self.servers.update((s.hostname, s) for s in Server.objects.filter(hostname__in=chunk).order_by())
        server_ids = [s.pk for s in self.servers.values()]
        keys = {name: sorted({getattr(p.record, name) for p in self.plans} - {None})
                for name in ("serial", "uuid", "asset_tag")}
        queryset = Gpu.objects.select_related("server").order_by()  # no ORDER BY: a dict is built
        if self.lock:
            queryset = queryset.select_for_update(of=("self",))
        lookups = [("server_id", server_ids), ("serial", keys["serial"]), ("uuid", keys["uuid"]),
                   ("asset_tag", keys["asset_tag"])]
        if sum(len(values) for _, values in lookups) <= _ONE_QUERY_VALUES:  # one query for the whole file
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
                for chunk in _chunks(values):
                    self.gpus.update((g.pk, g) for g in queryset.filter(**{f"{name}__in": chunk}))
        self.by_serial = {g.serial: g for g in self.gpus.values() if g.serial}
        self.by_uuid = {g.uuid: g for g in self.gpus.values() if g.uuid}
        self.by_asset = {g.asset_tag: g for g in self.gpus.values() if g.asset_tag}
        self.by_slot = {(g.server.hostname, g.pci_bus_id): g for g in self.gpus.values() if g.server_id and g.pci_bus_id}
        self.all_models = list(GpuModel.objects.only("id", "name", "sku").order_by())
        self.models = {_model_key(m.name): m for m in self.all_models}

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
                if occupant is not None and occupant.pk not in claimed and _compatible(occupant, rec):
                    self._claim(plan, occupant, claimed)

    def _claim(self, plan: _Plan, gpu: Gpu, claimed: dict[int, int]) -> None:
        if gpu.pk in claimed:
            self.error(plan.record, "serial", f"names the same GPU ({gpu.identity}) as line {claimed[gpu.pk]}")
            return
        claimed[gpu.pk] = plan.record.line
        plan.gpu = gpu

    # --- planning ------------------------------------------------------------------------------

    def plan(self) -> None:
        final_slots: dict[tuple[str, str], int] = {}
        for plan in self.plans:
            rec, gpu = plan.record, plan.gpu
            if rec.product_name:
                plan.model_key = _model_key(rec.product_name)
                if plan.model_key not in self.models:
                    self.new_models.setdefault(plan.model_key, rec)
            if gpu is None:
                if not rec.product_name:
                    self.error(rec, "product_name", "a new GPU needs its model (product name)")
                plan.action = CREATE
                plan.state = rec.state or (GpuState.IN_SERVICE.value if plan.host else GpuState.RECEIVED.value)
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
        for component, attname in _DENORMALISED.items():
            if (version := rec.firmware.get(component)) is not None:
                new[attname] = version
        return {name: [getattr(gpu, name), value] for name, value in new.items()
                if not _same(getattr(gpu, name), value)}

    def _placement_change(self, plan: _Plan) -> tuple[str, str, int | None] | None:
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

    def _final_slot(self, plan: _Plan) -> tuple[str, str] | None:
        if plan.target:
            return (plan.target[0], plan.target[1]) if plan.target[1] else None
        if plan.action == CREATE:
            return (plan.host, plan.record.pci_bus_id) if plan.host and plan.record.pci_bus_id else None
        gpu = plan.gpu
        if gpu is not None and gpu.server_id and gpu.pci_bus_id:
            return gpu.server.hostname, gpu.pci_bus_id
        return None

    # --- writing -------------------------------------------------------------------------------

    def apply(self) -> None:
        events: list[AuditEvent] = []
        moves: list[GpuMove] = []
        self._create_servers(events)
        self._create_models(events)
        gpu_type = ContentType.objects.get_for_model(Gpu)
        name = actor_fields(self.actor)["actor_name"]

        # 1. GPUs in the way are moved out; GPUs that move let go of their slots (swaps, shuffles).
        for gpu, _slot in self.displaced.values():
            move, event = gpu_move_record(gpu=gpu, to_server=None, actor=self.actor, reason=self.reason, at=self.now)
            gpu.updated_at = self.now
            moves.append(move)
            events.append(event)
        if self.displaced:
            bulk.update(Gpu, [g for g, _ in self.displaced.values()], [*_PLACEMENT, "updated_at"])
        leaving = [p.gpu.pk for p in self.plans if p.target and p.gpu is not None and p.gpu.pci_bus_id]
        for chunk in _chunks(leaving):
            Gpu.objects.filter(pk__in=chunk).update(pci_bus_id="")

        # 2. New GPUs.
        created = [(plan, self._new_gpu(plan)) for plan in self.plans if plan.action == CREATE]
        bulk.insert(Gpu, [gpu for _, gpu in created], need_pk=True)
        states, installs = [], []  # plain rows: the same as gpu_create writes, without 2,000 model instances
        created_event = audit_row_maker(actor=self.actor, action=AuditAction.CREATE, content_type=gpu_type,
                                        message=self.reason, at=self.now)
        created_events = []
        for plan, gpu in created:
            plan.gpu = gpu
            states.append((gpu.pk, "", gpu.state, name, self.reason, self.now))
            if gpu.server_id:
                installs.append((gpu.pk, MoveKind.INSTALL.value, None, "", None, gpu.server_id, gpu.pci_bus_id,
                                 gpu.module_id, name, self.reason, self.now))
            created_events.append(created_event(gpu, _created(gpu)))

        # 3. Known GPUs: field changes, then moves; one bulk_update per set of changed columns.
        groups: dict[frozenset[str], list[Gpu]] = {}
        for plan in self.plans:
            gpu = plan.gpu
            if gpu is None or plan.action in (CREATE, UNCHANGED):
                continue
            columns = set()
            if plan.changes:
                for attname, (_before, after) in plan.changes.items():
                    if attname == "model_id" and isinstance(after, str):
                        plan.changes[attname][1] = after = self.models[after].pk
                    setattr(gpu, attname, after)
                    columns.add(attname)
                events.append(audit_event(actor=self.actor, action=AuditAction.UPDATE, obj=gpu, at=self.now,
                                          message=self.reason, content_type=gpu_type,
                                          changes={k: [_json(b), _json(a)] for k, (b, a) in plan.changes.items()}))
            if plan.target:
                host, bus, module = plan.target
                move, event = gpu_move_record(gpu=gpu, to_server=self.servers[host], to_pci_bus_id=bus,
                                              to_module_id=module, actor=self.actor, reason=self.reason, at=self.now)
                moves.append(move)
                events.append(event)
                columns.update(_PLACEMENT)
            gpu.updated_at = self.now
            groups.setdefault(frozenset(columns), []).append(gpu)
        for columns, gpus in groups.items():
            bulk.update(Gpu, gpus, [*sorted(columns), "updated_at"])

        # 4. Firmware seen, history rows, audit trail.
        self._observe_firmware()
        bulk.insert_values(GpuStateChange, ("gpu_id", "from_state", "to_state", "actor_name", "reason", "at"), states)
        bulk.insert_values(GpuMove, ("gpu_id", "kind", "from_server_id", "from_pci_bus_id", "from_module_id",
                                     "to_server_id", "to_pci_bus_id", "to_module_id", "actor_name", "reason", "at"),
                           installs)
        bulk.insert(GpuMove, moves)
        audit_write_many(events)
        audit_rows_write(created_events)
        self._summarise()

    def _create_servers(self, events: list[AuditEvent]) -> None:
        new = [Server(hostname=host) for host in sorted({p.host for p in self.plans if p.host} - set(self.servers))]
        Server.objects.bulk_create(new, batch_size=_BATCH)
        server_type = ContentType.objects.get_for_model(Server)
        for server in new:
            self.servers[server.hostname] = server
            events.append(audit_event(actor=self.actor, action=AuditAction.CREATE, obj=server, at=self.now,
                                      message=self.reason, content_type=server_type,
                                      changes=diff({}, snapshot(server))))
        self.result.servers_created = [s.hostname for s in new]

    def _create_models(self, events: list[AuditEvent]) -> None:
        taken = {m.sku for m in self.all_models}
        new = []
        for key, rec in self.new_models.items():
            name = " ".join((rec.product_name or "").split())
            memory = round(rec.memory_mib / 1024) if rec.memory_mib else None
            new.append(GpuModel(sku=_sku_for(name, taken), name=name, architecture=rec.architecture or "",
                                memory_gib=memory))
            self.models[key] = new[-1]
        GpuModel.objects.bulk_create(new, batch_size=_BATCH)
        model_type = ContentType.objects.get_for_model(GpuModel)
        events.extend(audit_event(actor=self.actor, action=AuditAction.CREATE, obj=model, at=self.now,
                                  message=self.reason, content_type=model_type, changes=diff({}, snapshot(model)))
                      for model in new)
        self.result.models_created = [m.name for m in new]

    def _new_gpu(self, plan: _Plan) -> Gpu:
        rec = plan.record
        server = self.servers[plan.host] if plan.host else None
        serial_raw = "" if rec.serial else rec.serial_raw or ""
        uuid_raw = "" if rec.uuid else rec.uuid_raw or ""
        return Gpu(
            serial=rec.serial, serial_raw=serial_raw, uuid=rec.uuid, uuid_raw=uuid_raw,
            identity_masked=bool(rec.serial_masked or rec.uuid_masked),
            model=self.models[plan.model_key or ""], board_part_number=rec.board_part_number or "",
            asset_tag=rec.asset_tag, warranty_end=rec.warranty_end, state=plan.state, state_changed_at=self.now,
            server=server, pci_bus_id=(rec.pci_bus_id or "") if server else "",
            module_id=rec.module_id if server else None, minor_number=rec.minor_number,
            site_id=server.site_id if server else None, row_id=server.row_id if server else None,
            rack_id=server.rack_id if server else None,
            **{attname: rec.firmware.get(component, "") for component, attname in _DENORMALISED.items()},
        )

    def _observe_firmware(self) -> None:
        known: dict[tuple[int, str, str], tuple[int, dt.datetime]] = {}
        seen_ids = [p.gpu.pk for p in self.plans if p.gpu is not None and p.action != CREATE and p.record.firmware]
        for chunk in _chunks(seen_ids):
            rows = (FirmwareObservation.objects.filter(gpu_id__in=chunk).order_by()
                    .values_list("id", "gpu_id", "component", "version", "last_seen"))
            known.update(((gpu_id, component, version.casefold()), (pk, last_seen))
                         for pk, gpu_id, component, version, last_seen in rows)
        stale = self.now - LAST_SEEN_RESOLUTION
        new: list[tuple[int, str, str, str, dt.datetime, dt.datetime]] = []
        again: list[int] = []
        for plan in self.plans:
            gpu = plan.gpu
            assert gpu is not None  # every plan has its GPU once the new ones are created
            for component, version in plan.record.firmware.items():
                seen = known.get((gpu.pk, component, version.casefold()))
                if seen is None:
                    new.append((gpu.pk, component, version, self.fmt, self.now, self.now))
                elif seen[1] < stale:
                    again.append(seen[0])
        bulk.insert_values(FirmwareObservation, ("gpu_id", "component", "version", "source", "first_seen",
                                                 "last_seen"), new)
        for chunk in _chunks(again):
            FirmwareObservation.objects.filter(pk__in=chunk).update(last_seen=self.now)

    def _summarise(self) -> None:
        result = self.result
        names = {m.pk: m.name for m in self.models.values()}
        counters = {CREATE: "created", UPDATE: "updated", MOVE: "moved", UNCHANGED: "unchanged"}
        for plan in self.plans:
            setattr(result, counters[plan.action], getattr(result, counters[plan.action]) + 1)
            result.rows.append(self._row(plan, names))
        for gpu, (host, bus, module) in self.displaced.values():
            result.moved += 1
            result.rows.append({"line": None, "identity": gpu.identity, "action": MOVE, "hostname": "",
                                "pci_bus_id": "", "changes": _moved((host, bus, module), (None, "", None))})

    def _row(self, plan: _Plan, model_names: dict[int, str]) -> dict[str, Any]:
        rec, gpu = plan.record, plan.gpu
        assert gpu is not None
        changes: dict[str, list[Any]] = {}
        for attname, (before, after) in plan.changes.items():
            if attname == "model_id":
                changes["model"] = [model_names.get(before), model_names.get(after)]
            else:
                changes[attname] = [_json(before), _json(after)]
        if plan.action == CREATE:
            changes = {"model": [None, gpu.model.name], "state": [None, gpu.state]}
        if plan.target and plan.moved_from:
            changes.update(_moved(plan.moved_from, plan.target))
        identity = rec.serial or rec.uuid or rec.asset_tag or (gpu.identity if gpu.pk else "")
        host = gpu.server.hostname if gpu.server_id and gpu.server else ""
        return {"line": rec.line, "identity": identity or rec.serial_raw or rec.uuid_raw or "", "action": plan.action,
                "hostname": host, "pci_bus_id": gpu.pci_bus_id, "changes": changes}


def _created(gpu: Gpu) -> dict[str, list[Any]]:
    """The audit changes of a new GPU: what ``gpu_create`` writes (its non-empty snapshot), built faster."""
    changes: dict[str, list[Any]] = {}
    for attname in _GPU_ATTNAMES:
        value = getattr(gpu, attname)
        if value is not None and value != "":
            changes[attname] = [None, value.isoformat() if isinstance(value, dt.date) else value]
    return changes


def _moved(before: tuple[str | None, str, int | None], after: tuple[str | None, str, int | None]) -> dict[str, list]:
    return {name: [b, a] for name, b, a in zip(("server", "pci_bus_id", "module_id"), before, after, strict=True)
            if b != a}


def _compatible(gpu: Gpu, rec: GpuRecord) -> bool:
    """May the GPU found in the record's slot be the record's GPU? Not if a real identity differs."""
    return not any(getattr(gpu, name) and getattr(rec, name) and getattr(gpu, name) != getattr(rec, name)
                   for name in ("serial", "uuid", "asset_tag"))

