"""Audit trail: every mutating service calls these, inside its own transaction.

The *source* of a change (UI, API, admin, CLI, worker) comes from a context variable set at the
edge (middleware, management command, Celery task), so services only pass the actor.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models.fields.files import FieldFile
from django.utils import timezone

from fleet.models import AuditAction, AuditEvent, AuditSource
from fleet.request_context import current_request_id


@dataclass(frozen=True)
class SystemActor:
    """A named non-human actor (a worker, the importer, the seeder)."""

    name: str

    @property
    def pk(self) -> None:
        return None

    def __str__(self) -> str:
        return self.name


SYSTEM = SystemActor("system")
WORKER = SystemActor("worker")

Actor = AbstractBaseUser | SystemActor

_source: ContextVar[str] = ContextVar("fleet_audit_source", default=AuditSource.SYSTEM)


@contextlib.contextmanager
def audit_source(source: str) -> Iterator[None]:
    """Mark every audit event written inside the block as coming from ``source``."""
    token = _source.set(source)
    try:
        yield
    finally:
        _source.reset(token)


def current_source() -> str:
    return _source.get()


def actor_fields(actor: Actor | None) -> dict[str, Any]:
    if actor is None or isinstance(actor, AnonymousUser):
        return {"actor": None, "actor_name": "anonymous"}
    if isinstance(actor, SystemActor):
        return {"actor": None, "actor_name": actor.name}
    return {"actor": actor, "actor_name": actor.get_username()}


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, FieldFile):
        return value.name or ""
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, models.Model):
        return value.pk
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _concrete(obj: models.Model) -> dict[str, Any]:
    return {field.attname: _jsonable(getattr(obj, field.attname)) for field in obj._meta.concrete_fields}


def snapshot(obj: models.Model) -> dict[str, Any]:
    """Field values of ``obj`` (foreign keys as ids, many-to-many as sorted id lists), ready for JSON."""
    data = _concrete(obj)
    if obj.pk is not None:
        for field in obj._meta.many_to_many:
            data[field.name] = sorted(getattr(obj, field.name).values_list("pk", flat=True))
    return data


def _pop_m2m(model: type[models.Model] | models.Model, fields: dict[str, Any]) -> dict[str, Any]:
    return {f.name: fields.pop(f.name) for f in model._meta.many_to_many if f.name in fields}


def diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    """``{field: [before, after]}`` for every field whose value changed."""
    keys = before.keys() | after.keys()
    return {k: [before.get(k), after.get(k)] for k in sorted(keys) if before.get(k) != after.get(k)}


def audit_event(
    *,
    actor: Actor | None,
    action: str,
    obj: models.Model,
    changes: dict[str, Any] | None = None,
    message: str = "",
    at: dt.datetime | None = None,
    content_type: ContentType | None = None,
) -> AuditEvent:
    """Build (not save) an audit event; use with :func:`audit_write_many` for bulk paths."""
    return AuditEvent(
        at=at or timezone.now(),
        source=current_source(),
        action=action,
        content_type=content_type or ContentType.objects.get_for_model(obj, for_concrete_model=True),
        object_id=str(obj.pk),
        object_repr=str(obj)[:200],
        changes=changes or {},
        message=message[:500],
        request_id=current_request_id(),
        **actor_fields(actor),
    )


# Column order of :func:`audit_rows_write`'s tuples.
AUDIT_ROW_FIELDS = ("at", "actor_id", "actor_name", "source", "action", "content_type_id", "object_id", "object_repr",
                    "changes", "message", "request_id")


def audit_row_maker(*, actor: Actor | None, action: str, content_type: ContentType, message: str = "",
                    at: dt.datetime | None = None) -> Any:
    """``make(obj, changes)`` -> one audit row (a tuple in :data:`AUDIT_ROW_FIELDS` order) of many alike:
    what :func:`audit_event` builds, without a model instance per row (a 5,000-GPU import's create events)."""
    who = actor_fields(actor)
    head = (at or timezone.now(), getattr(who["actor"], "pk", None), who["actor_name"], current_source(), action,
            content_type.pk)
    tail = (message[:500], current_request_id())

    def make(obj: models.Model, changes: dict[str, Any]) -> tuple:
        return (*head, str(obj.pk), str(obj)[:200], changes, *tail)

    return make


def audit_rows_write(rows: Iterable[tuple]) -> None:
    from fleet import bulk

    bulk.insert_values(AuditEvent, AUDIT_ROW_FIELDS, rows)


def audit_write(**kwargs: Any) -> AuditEvent:
    event = audit_event(**kwargs)
    event.save()
    return event


def audit_write_many(events: Iterable[AuditEvent]) -> None:
    """Write many audit events at once (COPY on PostgreSQL: a third of a 1,000-GPU import's time
    went to ``bulk_create`` of its audit rows)."""
    from fleet import bulk

    bulk.insert(AuditEvent, list(events))


def audited_create(*, model_class: type[models.Model], actor: Actor | None, **fields: Any) -> models.Model:
    """Create one row (many-to-many values included) and its audit event. Caller owns the transaction."""
    m2m = _pop_m2m(model_class, fields)
    obj = model_class(**fields)
    obj.full_clean()
    obj.save()
    for name, values in m2m.items():
        getattr(obj, name).set(values)
    audit_write(actor=actor, action=AuditAction.CREATE, obj=obj, changes=diff({}, snapshot(obj)))
    return obj


def audited_update(*, obj: models.Model, actor: Actor | None, before: dict[str, Any] | None = None,
                   **fields: Any) -> dict[str, list[Any]]:
    """Apply ``fields`` (many-to-many included) to ``obj``, save it and audit what changed.

    Pass ``before`` when the caller already changed ``obj`` (a ModelForm or serializer did).
    Returns ``{field: [before, after]}``; nothing is written when nothing changed.
    """
    before = before if before is not None else snapshot(obj)
    m2m = _pop_m2m(obj, fields)
    for name, value in fields.items():
        setattr(obj, name, value)
    current = _concrete(obj)  # taken before save(), so auto_now stamps are not reported as changes
    changes = diff({k: before.get(k) for k in current}, current)
    if changes:
        obj.full_clean()
        obj.save()
    if m2m:
        for name, values in m2m.items():
            getattr(obj, name).set(values)
        after = {name: sorted(getattr(obj, name).values_list("pk", flat=True)) for name in m2m}
        changes |= diff({k: before.get(k) for k in after}, after)
    if changes:
        audit_write(actor=actor, action=AuditAction.UPDATE, obj=obj, changes=changes)
    return changes


def audited_delete(*, obj: models.Model, actor: Actor | None) -> None:
    """Delete ``obj`` (PROTECT foreign keys refuse it when it has history) and audit it."""
    event = audit_event(actor=actor, action=AuditAction.DELETE, obj=obj, changes=diff(snapshot(obj), {}))
    obj.delete()
    event.save()


def audit_account_event(*, username: str, action: str, message: str, actor: Actor | None = None) -> AuditEvent:
    """Audit something that happened to a user account (a lockout, a token revoked), whether or not an
    account of that name exists: an unknown name is recorded on the user model with an empty object id."""
    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    user = user_model._default_manager.filter(**{user_model.USERNAME_FIELD: username}).first()
    event = AuditEvent(
        at=timezone.now(), source=current_source(), action=action,
        content_type=ContentType.objects.get_for_model(user_model),
        object_id=str(user.pk) if user is not None else "", object_repr=username[:200],
        message=message[:500], request_id=current_request_id(), **actor_fields(actor))
    event.save()
    return event


def audit_prune(*, older_than_days: int) -> int:
    """Delete audit events older than the retention window. Returns the number deleted."""
    if older_than_days <= 0:
        return 0
    cutoff = timezone.now() - dt.timedelta(days=older_than_days)
    deleted = 0
    while True:
        ids = list(AuditEvent.objects.filter(at__lt=cutoff).values_list("id", flat=True)[:10000])
        if not ids:
            return deleted
        deleted += AuditEvent.objects.filter(id__in=ids).delete()[0]
