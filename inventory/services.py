"""Every write to the inventory. Views, API, admin, commands and tasks call these; each owns its
transaction and writes its audit events in it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.utils import timezone

from fleet.audit import (
    Actor,
    actor_fields,
    audit_event,
    audit_write,
    audit_write_many,
    audited_create,
    audited_delete,
    audited_update,
    snapshot,
)
from fleet.jobs import job_start
from fleet.models import AuditAction, Job
from inventory.lifecycle import check_transition
from inventory.models import (
    FirmwareComponent,
    FirmwareObservation,
    Gpu,
    GpuMove,
    GpuState,
    GpuStateChange,
    MoveKind,
    Rack,
    Server,
    Site,
)
from inventory.scheduler.gpus import (
    gpu_transition_scheduled,
    gpus_transition_refusals,
    gpus_transition_scheduled,
)


def _actor_name(actor: Actor | None) -> str:
    return actor_fields(actor)["actor_name"]


# --- generic records (locations, catalog, servers) -------------------------------------------------

@transaction.atomic
def record_create(*, model_class: type[models.Model], actor: Actor | None, **fields: Any) -> models.Model:
    """Create a location, catalog entry, server or GPU, audited. (``model_class``, not ``model``: a GPU has
    a field named ``model``.)"""
    if model_class is Gpu:
        return gpu_create(actor=actor, **fields)
    return audited_create(model_class=model_class, actor=actor, **fields)


@transaction.atomic
def record_update(*, obj: models.Model, actor: Actor | None, before: dict[str, Any] | None = None,
                  **fields: Any) -> dict[str, list[Any]]:
    """Update fields of a location, catalog entry or server, audited. Keeps denormalised placement."""
    if isinstance(obj, Gpu):
        return gpu_update(gpu=obj, actor=actor, before=before, **fields)
    changes = audited_update(obj=obj, actor=actor, before=before, **fields)
    if isinstance(obj, Server) and ("rack_id" in changes or "rack" in changes):
        _sync_server_gpus([obj.pk])
    if isinstance(obj, Rack) and "row_id" in changes:
        for server in obj.servers.all():
            server.save()
        _sync_server_gpus(list(obj.servers.values_list("id", flat=True)))
    return changes


@transaction.atomic
def record_delete(*, obj: models.Model, actor: Actor | None) -> None:
    """Delete, audited. Anything with history is protected and refused (ProtectedError)."""
    audited_delete(obj=obj, actor=actor)


def _sync_server_gpus(server_ids: Sequence[int]) -> None:
    """Copy servers' site/row/rack onto their GPUs (the denormalised filter columns)."""
    for server in Server.objects.filter(id__in=server_ids).only("id", "site_id", "row_id", "rack_id"):
        Gpu.objects.filter(server_id=server.pk).update(site_id=server.site_id, row_id=server.row_id,
                                                       rack_id=server.rack_id)


@transaction.atomic
def server_place(*, server: Server, rack: Rack | None, rack_unit: int | None, actor: Actor | None) -> Server:
    """Put a server in a rack position (or take it out); its GPUs follow."""
    record_update(obj=server, actor=actor, rack=rack, rack_unit=rack_unit)
    return server


def server_place_refusal(*, server: Server, rack: Rack, rack_unit: int) -> str | None:
    """Why ``server`` cannot go to ``rack`` at ``rack_unit`` (off the rack, or units another server holds)."""
    height = server.platform.height_u if server.platform_id else 1
    if rack_unit < 1 or rack_unit + height - 1 > rack.height_u:
        return f"U{rack_unit} does not fit a {height}U server in the {rack.height_u}U rack {rack.name}."
    for other in Server.objects.filter(rack=rack, rack_unit__isnull=False).exclude(pk=server.pk).select_related(
            "platform"):
        other_height = other.platform.height_u if other.platform_id else 1
        if rack_unit <= other.rack_unit + other_height - 1 and other.rack_unit <= rack_unit + height - 1:
            return f"{rack.name} U{other.rack_unit} is taken by {other.hostname}."
    return None


@transaction.atomic
def servers_place(*, placements: Sequence[tuple[Server, Rack, int]], actor: Actor | None,
                  labels: Sequence[str] | None = None) -> list[Server]:
    """Place several servers (rack, unit) at once: every placement fits, or nothing is written
    (ValidationError naming each bad one by its label, e.g. ``line 3``)."""
    errors: list[str] = []
    claimed: dict[tuple[int, int], str] = {}
    for i, (server, rack, unit) in enumerate(placements):
        label = labels[i] if labels else server.hostname
        if refusal := server_place_refusal(server=server, rack=rack, rack_unit=unit):
            errors.append(f"{label}: {refusal}")
        height = server.platform.height_u if server.platform_id else 1
        for u in range(unit, unit + height):
            if (rack.pk, u) in claimed:
                errors.append(f"{label}: {rack.name} U{u} is also given to {claimed[(rack.pk, u)]} in this list.")
                break
            claimed[(rack.pk, u)] = server.hostname
    if errors:
        raise ValidationError(errors)
    for server, rack, unit in placements:
        server_place(server=server, rack=rack, rack_unit=unit, actor=actor)
    return [server for server, _, _ in placements]


# --- GPUs ------------------------------------------------------------------------------------------

_GPU_EDITABLE = {"serial", "serial_raw", "uuid", "uuid_raw", "identity_masked", "model", "model_id",
                 "board_part_number", "asset_tag", "warranty_end", "vbios_version", "inforom_image",
                 "driver_version", "minor_number"}


def _placement_fields(server: Server | None) -> dict[str, Any]:
    if server is None:
        return {"server": None, "site_id": None, "row_id": None, "rack_id": None}
    return {"server": server, "site_id": server.site_id, "row_id": server.row_id, "rack_id": server.rack_id}


@transaction.atomic
def gpu_create(*, actor: Actor | None, server: Server | None = None, pci_bus_id: str = "",
               module_id: int | None = None, state: str = GpuState.RECEIVED, reason: str = "",
               site: Site | None = None, **fields: Any) -> Gpu:
    """Register a GPU, optionally placed in a server slot (or, not in a server, at a ``site``: a delivery's
    boards are where they were received). Writes the first state row and audit event."""
    now = timezone.now()
    placement = _placement_fields(server)
    if server is None and site is not None:
        placement["site_id"] = site.pk
    gpu = Gpu(state=state, state_changed_at=now, pci_bus_id=pci_bus_id, module_id=module_id,
              **placement, **fields)
    gpu.full_clean()
    gpu.save()
    name = _actor_name(actor)
    GpuStateChange.objects.create(gpu=gpu, from_state="", to_state=state, actor_name=name, reason=reason, at=now)
    if server is not None:
        GpuMove.objects.create(gpu=gpu, kind=MoveKind.INSTALL, to_server=server, to_pci_bus_id=pci_bus_id,
                               to_module_id=module_id, actor_name=name, reason=reason, at=now)
    audit_write(actor=actor, action=AuditAction.CREATE, obj=gpu, changes={k: [None, v] for k, v in
                snapshot(gpu).items() if v not in (None, "")}, message=reason, at=now)
    return gpu


@transaction.atomic
def gpu_update(*, gpu: Gpu, actor: Actor | None, before: dict[str, Any] | None = None,
               **fields: Any) -> dict[str, list[Any]]:
    """Edit a GPU's identity, asset and firmware fields. State and placement have their own services."""
    illegal = set(fields) - _GPU_EDITABLE
    if illegal:
        raise ValidationError({name: "Change this through a transition or a move." for name in sorted(illegal)})
    return audited_update(obj=gpu, actor=actor, before=before, **fields)


@transaction.atomic
def gpu_transition(*, gpu: Gpu, to_state: str, actor: Actor | None, reason: str = "") -> Gpu:
    """Move one GPU to ``to_state``; an illegal transition raises ``ValidationError`` naming both states."""
    locked = Gpu.objects.select_for_update().get(pk=gpu.pk)
    check_transition(locked, to_state)
    now = timezone.now()
    from_state = locked.state
    Gpu.objects.filter(pk=gpu.pk).update(state=to_state, state_changed_at=now, updated_at=now)
    GpuStateChange.objects.create(gpu=locked, from_state=from_state, to_state=to_state,
                                  actor_name=_actor_name(actor), reason=reason, at=now)
    audit_write(actor=actor, action=AuditAction.TRANSITION, obj=locked,
                changes={"state": [from_state, to_state]}, message=reason, at=now)
    gpu_transition_scheduled(gpu=locked, from_state=from_state, to_state=to_state, reason=reason)  # h19: drain/resume
    gpu.state, gpu.state_changed_at = to_state, now
    return gpu


@dataclass
class BulkResult:
    done: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)


def _transition_chunk(*, gpu_ids: Sequence[int], to_state: str, actor: Actor | None, reason: str) -> BulkResult:
    """Transition a chunk of GPUs under row locks; GPUs that may not move are reported, not moved."""
    result = BulkResult()
    now = timezone.now()
    name = _actor_name(actor)
    content_type = ContentType.objects.get_for_model(Gpu)
    movable: list[Gpu] = []
    for gpu in Gpu.objects.select_for_update().filter(id__in=gpu_ids).order_by("id"):
        try:
            check_transition(gpu, to_state)
        except ValidationError as exc:
            result.errors.append({"gpu": gpu.pk, "identity": gpu.identity, "error": " ".join(exc.messages)})
            continue
        movable.append(gpu)
    refusals = gpus_transition_refusals(gpus=movable, to_state=to_state)  # h19: RMA needs its node drained, idle
    for gpu in movable:
        if gpu.pk in refusals:
            result.errors.append({"gpu": gpu.pk, "identity": gpu.identity, "error": refusals[gpu.pk][0]})
    movable = [g for g in movable if g.pk not in refusals]
    Gpu.objects.filter(id__in=[g.pk for g in movable]).update(state=to_state, state_changed_at=now, updated_at=now)
    GpuStateChange.objects.bulk_create(
        GpuStateChange(gpu=g, from_state=g.state, to_state=to_state, actor_name=name, reason=reason, at=now)
        for g in movable
    )
    audit_write_many(
        audit_event(actor=actor, action=AuditAction.TRANSITION, obj=g, changes={"state": [g.state, to_state]},
                    message=reason, at=now, content_type=content_type)
        for g in movable
    )
    gpus_transition_scheduled(gpus=movable, to_state=to_state, reason=reason)  # h19: one drain/resume per node
    result.done = len(movable)
    return result


BULK_TRANSITION_JOB = "gpu_bulk_transition"


def gpu_bulk_transition(*, gpu_ids: Iterable[int], to_state: str, actor: Actor | None,
                        reason: str = "") -> BulkResult | Job:
    """Transition many GPUs. Up to ``FLEET_BULK_SYNC_LIMIT`` it runs now, all or nothing;
    above that it becomes a background :class:`Job` processed in chunks by Celery workers.
    """
    ids = sorted(set(gpu_ids))
    if not ids:
        raise ValidationError({"gpus": "Select at least one GPU."})
    if to_state not in GpuState.values:
        raise ValidationError({"to_state": f"'{to_state}' is not a GPU state."})
    if len(ids) <= settings.FLEET_BULK_SYNC_LIMIT:
        with transaction.atomic():
            result = _transition_chunk(gpu_ids=ids, to_state=to_state, actor=actor, reason=reason)
            if result.errors:
                transaction.set_rollback(True)
                raise ValidationError(
                    [f"{e['identity']}: {e['error']}" for e in result.errors[:20]]
                    + ([f"... and {len(result.errors) - 20} more"] if len(result.errors) > 20 else []),
                    code="illegal_transition",
                )
        return result
    return _bulk_job_start(ids=ids, to_state=to_state, actor=actor, reason=reason)


@transaction.atomic
def _bulk_job_start(*, ids: list[int], to_state: str, actor: Actor | None, reason: str) -> Job:
    return job_start(kind=BULK_TRANSITION_JOB, ids=ids, params={"to_state": to_state, "reason": reason},
                     actor=actor, chunk_size=settings.FLEET_BULK_CHUNK)


def gpu_bulk_transition_job_chunk(*, job: Job, ids: Sequence[int], actor: Actor | None) -> list[dict[str, Any]]:
    """One chunk of a bulk transition job (registered with fleet.jobs; runs in the chunk's transaction)."""
    return _transition_chunk(gpu_ids=ids, to_state=job.params["to_state"], actor=actor,
                             reason=job.params["reason"]).errors


# --- placement ---------------------------------------------------------------------------------------

def _move_kind(gpu: Gpu, to_server: Server | None, to_spares: bool) -> str:
    if gpu.server_id is None and to_server is not None:
        return MoveKind.FROM_SPARES if gpu.state == GpuState.SPARE else MoveKind.INSTALL
    if gpu.server_id is not None and to_server is None:
        return MoveKind.TO_SPARES if to_spares else MoveKind.REMOVE
    if gpu.server_id is None and to_server is None:
        return MoveKind.TO_SPARES if to_spares else MoveKind.REMOVE
    return MoveKind.MOVE


def gpu_move_record(*, gpu: Gpu, to_server: Server | None, to_pci_bus_id: str = "",
                    to_module_id: int | None = None, actor: Actor | None, reason: str = "",
                    to_spares: bool = False, at: dt.datetime | None = None) -> tuple[GpuMove, Any]:
    """Build (unsaved) the move row and audit event for a placement change; callers that move in bulk
    (the importer) save them with ``bulk_create``. Applies the new placement to ``gpu`` in memory."""
    at = at or timezone.now()
    move = GpuMove(gpu=gpu, kind=_move_kind(gpu, to_server, to_spares), from_server_id=gpu.server_id,
                   from_pci_bus_id=gpu.pci_bus_id, from_module_id=gpu.module_id, to_server=to_server,
                   to_pci_bus_id=to_pci_bus_id, to_module_id=to_module_id, actor_name=_actor_name(actor),
                   reason=reason, at=at)
    before = {"server_id": gpu.server_id, "pci_bus_id": gpu.pci_bus_id, "module_id": gpu.module_id}
    for name, value in _placement_fields(to_server).items():
        setattr(gpu, name, value)
    gpu.pci_bus_id, gpu.module_id = to_pci_bus_id, to_module_id
    after = {"server_id": gpu.server_id, "pci_bus_id": gpu.pci_bus_id, "module_id": gpu.module_id}
    event = audit_event(actor=actor, action=AuditAction.MOVE, obj=gpu,
                        changes={k: [before[k], after[k]] for k in before if before[k] != after[k]},
                        message=reason, at=at)
    return move, event


@transaction.atomic
def gpu_move(*, gpu: Gpu, to_server: Server | None, to_pci_bus_id: str = "", to_module_id: int | None = None,
             actor: Actor | None, reason: str = "", to_spares: bool = False) -> Gpu:
    """Move a GPU to a server slot, out of its server, or into the spares pool; recorded and audited."""
    gpu = Gpu.objects.select_for_update().get(pk=gpu.pk)
    if to_spares and to_server is not None:
        raise ValidationError({"to_spares": "A GPU going to spares leaves its server: give no server."})
    if to_server is None and (to_pci_bus_id or to_module_id is not None):
        raise ValidationError({"to_server": "A slot needs a server."})
    if to_server is not None and to_pci_bus_id:
        clash = Gpu.objects.filter(server=to_server, pci_bus_id=to_pci_bus_id).exclude(pk=gpu.pk).first()
        if clash:
            raise ValidationError({"to_pci_bus_id": f"{to_server} {to_pci_bus_id} holds {clash.identity}; "
                                                    "move that GPU out first."})
    if (gpu.server_id, gpu.pci_bus_id, gpu.module_id) == (getattr(to_server, "pk", None), to_pci_bus_id,
                                                         to_module_id) and not to_spares:
        return gpu
    move, event = gpu_move_record(gpu=gpu, to_server=to_server, to_pci_bus_id=to_pci_bus_id,
                                  to_module_id=to_module_id, actor=actor, reason=reason, to_spares=to_spares)
    gpu.full_clean()
    gpu.save()
    move.save()
    event.save()
    return gpu


# --- firmware observations -------------------------------------------------------------------------------

# The GPU columns that follow the latest observation of their component (the imports keep them the same way).
GPU_FIRMWARE_COLUMNS = {FirmwareComponent.GPU_VBIOS: "vbios_version",
                        FirmwareComponent.GPU_INFOROM_IMAGE: "inforom_image",
                        FirmwareComponent.DRIVER: "driver_version"}


@transaction.atomic
def firmware_observe(*, gpu: Gpu | None = None, server: Server | None = None, component: str, version: str,
                     source: str, seen_at: dt.datetime, actor: Actor | None) -> FirmwareObservation:
    """Record that ``component`` of one GPU or one server runs ``version``, seen at ``seen_at``.

    One row per (device, component, version): seeing it again moves ``last_seen``. A version not seen
    before is audited on the device (``firmware.<component>: [previous, new]``); a GPU's VBIOS, InfoROM and
    driver columns follow it through :func:`gpu_update`.
    """
    version = version.strip()
    errors: dict[str, str] = {}
    if (gpu is None) == (server is None):
        errors["__all__"] = "Give either a GPU or a server."
    if component not in FirmwareComponent.values:
        errors["component"] = f"Unknown firmware component {component!r}."
    if not version:
        errors["version"] = "A version is required."
    if errors:
        raise ValidationError(errors)
    device: dict[str, Any] = {"gpu": gpu} if gpu is not None else {"server": server}
    previous = (FirmwareObservation.objects.filter(**device, component=component)
                .order_by("-last_seen", "-id").values_list("version", flat=True).first())
    obs, created = FirmwareObservation.objects.get_or_create(
        **device, component=component, version=version,
        defaults={"source": source, "first_seen": seen_at, "last_seen": seen_at})
    moved = not created and seen_at > obs.last_seen
    if moved:
        FirmwareObservation.objects.filter(pk=obs.pk).update(last_seen=seen_at, source=source)
        obs.last_seen, obs.source = seen_at, source
    if created:
        target = gpu if gpu is not None else server
        assert target is not None
        audit_write(actor=actor, action=AuditAction.UPDATE, obj=target, at=seen_at,
                    changes={f"firmware.{component}": [previous, version]}, message=f"seen by {source}")
    column = GPU_FIRMWARE_COLUMNS.get(component)  # type: ignore[call-overload]
    if gpu is not None and column and getattr(gpu, column) != version and (created or moved):
        gpu_update(gpu=gpu, actor=actor, **{column: version})
    return obs


@transaction.atomic
def firmware_observe_many(*, server_versions: Iterable[tuple[int, str, str]], source: str, seen_at: dt.datetime,
                          actor: Actor | None) -> int:
    """Record many (server id, component, version) observations at once: a fleet-wide Redfish sweep, the
    firmware demo. Known versions only move ``last_seen``; new ones are inserted with COPY and audited (one
    event per server). Returns how many were new."""
    from fleet import bulk

    rows = {(sid, component, version.strip()) for sid, component, version in server_versions if version.strip()}
    if not rows:
        return 0
    server_ids = sorted({sid for sid, _, _ in rows})
    components = sorted({c for _, c, _ in rows})
    known = {(o[0], o[1], o[2]): o[3] for o in FirmwareObservation.objects.filter(
        server_id__in=server_ids, component__in=components).values_list("server_id", "component", "version", "id")}
    new = sorted(rows - known.keys())
    bulk.insert_values(FirmwareObservation, ("server_id", "component", "version", "source", "first_seen", "last_seen"),
                       [(sid, c, v, source, seen_at, seen_at) for sid, c, v in new])
    seen_again = [known[key] for key in rows & known.keys()]
    for start in range(0, len(seen_again), 5000):
        FirmwareObservation.objects.filter(pk__in=seen_again[start:start + 5000],
                                           last_seen__lt=seen_at).update(last_seen=seen_at)
    changes: dict[int, dict[str, list[Any]]] = {}
    for sid, component, version in new:
        changes.setdefault(sid, {})[f"firmware.{component}"] = [None, version]
    content_type = ContentType.objects.get_for_model(Server)
    hostnames = dict(Server.objects.filter(pk__in=list(changes)).values_list("id", "hostname"))
    audit_write_many(audit_event(actor=actor, action=AuditAction.UPDATE, obj=Server(pk=sid, hostname=hostnames[sid]),
                                 content_type=content_type, changes=change, at=seen_at, message=f"seen by {source}")
                     for sid, change in changes.items())
    return len(new)
