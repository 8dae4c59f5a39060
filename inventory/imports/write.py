"""The write phase of an import run (:class:`ImportWrite`, a base of :class:`inventory.imports.run.Import`):
what the plan decided goes to the database in bulk, with its audit events, moves and firmware observations."""

from __future__ import annotations

import datetime as dt
from itertools import chain
from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.db import connection

from fleet import bulk
from fleet.audit import (
    AUDIT_ROW_FIELDS,
    actor_fields,
    audit_event,
    audit_row_maker,
    audit_rows_write,
    diff,
    snapshot,
)
from fleet.models import AuditAction, AuditEvent
from inventory.imports.records import (
    BATCH,
    CREATE,
    DENORMALISED,
    GPU_ATTNAMES,
    GPU_COLUMN,
    GPU_DEFAULTS,
    GPU_ROW,
    LAST_SEEN_RESOLUTION,
    MOVE,
    PLACEMENT,
    UNCHANGED,
    UPDATE,
    NewRow,
    Plan,
    chunks,
    created_changes,
    gpu_name,
    json_value,
    moved_changes,
    sku_for,
)
from inventory.models import (
    FirmwareObservation,
    Gpu,
    GpuModel,
    GpuMove,
    GpuStateChange,
    MoveKind,
    Server,
    gpu_identity,
)
from inventory.services import gpu_move_record


class ImportWrite:
    """The write phase; :class:`inventory.imports.run.Import` sets the attributes it reads (plans, servers, gpus,
    models, result, actor, now, reason)."""

    def apply(self) -> None:
        events: list[AuditEvent] = []
        moves: list[GpuMove] = []
        server_events = self._create_servers()
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
            bulk.update(Gpu, [g for g, _ in self.displaced.values()], [*PLACEMENT, "updated_at"])
        leaving = [p.gpu.pk for p in self.plans if p.target and p.gpu is not None and p.gpu.pci_bus_id]
        for chunk in chunks(leaving):
            Gpu.objects.filter(pk__in=chunk).update(pci_bus_id="")

        # 2. New GPUs: plain rows (ids reserved first), no model instances; history and audit rows alike.
        created = [plan for plan in self.plans if plan.action == CREATE]
        rows = [self._new_gpu_row(plan, pk) for plan, pk in zip(created, bulk.reserve_ids(Gpu, len(created))
                                                                  if created else [], strict=True)]
        rows = self._insert_gpus(rows)
        states, installs = [], []  # the same rows as gpu_create writes
        created_event = audit_row_maker(actor=self.actor, action=AuditAction.CREATE, content_type=gpu_type,
                                        message=self.reason, at=self.now)
        created_events = []
        state_at, server_at, bus_at, module_at, raw_at = (
            GPU_COLUMN[column] for column in ("state", "server_id", "pci_bus_id", "module_id", "serial_raw"))
        for plan, row in zip(created, rows, strict=True):
            pk = plan.gpu_id = row[0]
            states.append((pk, "", row[state_at], name, self.reason, self.now))
            if row[server_at] is not None:
                installs.append((pk, MoveKind.INSTALL.value, None, "", None, row[server_at], row[bus_at],
                                 row[module_at], name, self.reason, self.now))
            rec = plan.record
            created_events.append(created_event(NewRow(pk, gpu_name(pk=pk, serial=rec.serial, uuid=rec.uuid,
                                                                    serial_raw=row[raw_at])),
                                                created_changes(row)))

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
                                          changes={k: [json_value(b), json_value(a)] for k, (b, a) in plan.changes.items()}))
            if plan.target:
                host, bus, module = plan.target
                move, event = gpu_move_record(gpu=gpu, to_server=self.servers[host], to_pci_bus_id=bus,
                                              to_module_id=module, actor=self.actor, reason=self.reason, at=self.now)
                moves.append(move)
                events.append(event)
                columns.update(PLACEMENT)
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
        # The whole audit trail in one COPY, in the order it happened: servers, models, moves and updates, new GPUs.
        audit_rows_write(chain(server_events, (tuple(getattr(event, name) for name in AUDIT_ROW_FIELDS)
                                               for event in events), created_events))
        self._summarise()

    @staticmethod
    def _insert_gpus(rows: list[tuple]) -> list[tuple]:
        """COPY the rows on PostgreSQL. Elsewhere (SQLite) ``bulk_create``, which stamps ``created_at`` and
        ``updated_at`` itself: the rows returned hold what it wrote, so the audit trail shows the stored values."""
        if connection.vendor == "postgresql":
            bulk.insert_values(Gpu, GPU_ATTNAMES, rows)
            return rows
        gpus = [Gpu(**dict(zip(GPU_ATTNAMES, row, strict=True))) for row in rows]
        Gpu.objects.bulk_create(gpus, batch_size=BATCH)
        return [GPU_ROW(vars(gpu)) for gpu in gpus]

    def _create_servers(self) -> list[tuple]:
        """Create the servers the files name and Fleet does not know; returns their audit rows."""
        new = [Server(hostname=host) for host in sorted({p.host for p in self.plans if p.host} - set(self.servers))]
        self.result.servers_created = [s.hostname for s in new]
        if not new:
            return []
        bulk.insert(Server, new, need_pk=True)
        self.servers.update((server.hostname, server) for server in new)
        # Every new server is the same but for its id and hostname: one snapshot, then those two.
        template = diff({}, snapshot(new[0]))
        make = audit_row_maker(actor=self.actor, action=AuditAction.CREATE, message=self.reason, at=self.now,
                               content_type=ContentType.objects.get_for_model(Server))
        return [make(server, {**template, "id": [None, server.pk], "hostname": [None, server.hostname]})
                for server in new]

    def _create_models(self, events: list[AuditEvent]) -> None:
        taken = {m.sku for m in self.all_models}
        new = []
        for key, rec in self.new_models.items():
            name = " ".join((rec.product_name or "").split())
            memory = round(rec.memory_mib / 1024) if rec.memory_mib else None
            new.append(GpuModel(sku=sku_for(name, taken), name=name, architecture=rec.architecture or "",
                                memory_gib=memory))
            self.models[key] = new[-1]
        GpuModel.objects.bulk_create(new, batch_size=BATCH)
        model_type = ContentType.objects.get_for_model(GpuModel)
        events.extend(audit_event(actor=self.actor, action=AuditAction.CREATE, obj=model, at=self.now,
                                  message=self.reason, content_type=model_type, changes=diff({}, snapshot(model)))
                      for model in new)
        self.result.models_created = [m.name for m in new]

    def _new_gpu_row(self, plan: Plan, pk: int) -> tuple:
        """The new GPU's row, in :data:`GPU_ATTNAMES` order: what ``Gpu(...)`` with these values would write."""
        rec, values = plan.record, dict(GPU_DEFAULTS)
        firmware = rec.firmware
        values.update(id=pk, serial=rec.serial, serial_raw="" if rec.serial else rec.serial_raw or "", uuid=rec.uuid,
                      uuid_raw="" if rec.uuid else rec.uuid_raw or "",
                      identity_masked=bool(rec.serial_masked or rec.uuid_masked),
                      model_id=self.models[plan.model_key or ""].pk, board_part_number=rec.board_part_number or "",
                      asset_tag=rec.asset_tag, warranty_end=rec.warranty_end, state=plan.state,
                      state_changed_at=self.now, minor_number=rec.minor_number, created_at=self.now,
                      updated_at=self.now)
        for component, attname in DENORMALISED.items():
            values[attname] = firmware.get(component, "")
        if plan.host:
            server = self.servers[plan.host]
            values.update(server_id=server.pk, pci_bus_id=rec.pci_bus_id or "", module_id=rec.module_id,
                          site_id=server.site_id, row_id=server.row_id, rack_id=server.rack_id)
        return GPU_ROW(values)

    def _observe_firmware(self) -> None:
        known: dict[tuple[int, str, str], tuple[int, dt.datetime]] = {}
        seen_ids = [p.gpu_id for p in self.plans if p.action != CREATE and p.record.firmware]
        for chunk in chunks(seen_ids):
            rows = (FirmwareObservation.objects.filter(gpu_id__in=chunk).order_by()
                    .values_list("id", "gpu_id", "component", "version", "last_seen"))
            known.update(((gpu_id, component, version.casefold()), (pk, last_seen))
                         for pk, gpu_id, component, version, last_seen in rows)
        stale = self.now - LAST_SEEN_RESOLUTION
        new: list[tuple[int, str, str, str, dt.datetime, dt.datetime]] = []
        again: list[int] = []
        now = self.now
        for plan in self.plans:
            pk = plan.gpu_id
            assert pk is not None  # every plan has its GPU's id once the new ones are created
            source = plan.record.fmt or self.fmt  # the record's own file format ("csv+nvidia-smi-xml" is none)
            if plan.action == CREATE:  # nothing seen yet
                new.extend((pk, component, version, source, now, now)
                           for component, version in plan.record.firmware.items())
                continue
            for component, version in plan.record.firmware.items():
                seen = known.get((pk, component, version.casefold()))
                if seen is None:
                    new.append((pk, component, version, source, now, now))
                elif seen[1] < stale:
                    again.append(seen[0])
        bulk.insert_values(FirmwareObservation, ("gpu_id", "component", "version", "source", "first_seen",
                                                 "last_seen"), new)
        for chunk in chunks(again):
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
                                "pci_bus_id": "", "changes": moved_changes((host, bus, module), (None, "", None))})

    def _row(self, plan: Plan, model_names: dict[int, str]) -> dict[str, Any]:
        rec, gpu = plan.record, plan.gpu
        if plan.action == CREATE:
            assert plan.gpu_id is not None and plan.model_key is not None
            host, bus = (plan.host, rec.pci_bus_id or "") if plan.host else ("", "")
            identity = rec.serial or rec.uuid or rec.asset_tag or gpu_identity(
                serial=None, uuid=None, hostname=host or None, pci_bus_id=bus, pk=plan.gpu_id)
            return {"line": rec.line, "identity": identity, "action": CREATE, "hostname": host, "pci_bus_id": bus,
                    "changes": {"model": [None, self.models[plan.model_key].name], "state": [None, plan.state]}}
        assert gpu is not None
        changes: dict[str, list[Any]] = {}
        for attname, (before, after) in plan.changes.items():
            if attname == "model_id":
                changes["model"] = [model_names.get(before), model_names.get(after)]
            else:
                changes[attname] = [json_value(before), json_value(after)]
        if plan.target and plan.moved_from:
            changes.update(moved_changes(plan.moved_from, plan.target))
        identity = rec.serial or rec.uuid or rec.asset_tag or gpu.identity
        host = gpu.server.hostname if gpu.server_id and gpu.server else ""
        return {"line": rec.line, "identity": identity or rec.serial_raw or rec.uuid_raw or "", "action": plan.action,
                "hostname": host, "pci_bus_id": gpu.pci_bus_id, "changes": changes}
