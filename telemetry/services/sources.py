"""Ingest sources: create, update, delete, and the source for a push or file (audited)."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from fleet.audit import Actor, audited_create, audited_delete, audited_update
from telemetry.models import IngestSource

SOURCE_FIELDS = ("name", "kind", "url", "host", "enabled", "interval_s", "timeout_s")


@transaction.atomic
def ingest_source_create(*, actor: Actor | None, **fields: Any) -> IngestSource:
    return audited_create(model_class=IngestSource, actor=actor, **fields)  # type: ignore[return-value]


@transaction.atomic
def ingest_source_update(*, source: IngestSource, actor: Actor | None, before: dict[str, Any] | None = None,
                         **fields: Any) -> dict[str, list[Any]]:
    return audited_update(obj=source, actor=actor, before=before, **fields)


@transaction.atomic
def ingest_source_delete(*, source: IngestSource, actor: Actor | None) -> None:
    """Delete a source; its XID events keep their data (``ingest_source`` becomes null)."""
    audited_delete(obj=source, actor=actor)


def ingest_source_for(*, name: str, kind: str, actor: Actor | None) -> IngestSource:
    """The source named ``name`` (a push or file source is created on first use)."""
    source = IngestSource.objects.filter(name=name).first()
    if source is None:
        try:
            source = ingest_source_create(actor=actor, name=name, kind=kind)
        except IntegrityError:  # created by a concurrent request
            source = IngestSource.objects.get(name=name)
    return source
