"""fleet.kept: a kept read returns what its queryset returns (fields, related objects, annotations, converted
values), builds its statement once, and refuses what one kept statement cannot do."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models import F

from fleet.audit import SYSTEM
from fleet.kept import KeptRead
from fleet.models import AuditEvent
from inventory import services
from inventory.models import Gpu, GpuMove, GpuStateChange
from tests import factories

pytestmark = pytest.mark.django_db


def _fields(rows):
    return [{k: v for k, v in vars(row).items() if k != "_state"} for row in rows]


@pytest.fixture
def moved():
    a, b = factories.server(hostname="kept-a"), factories.server(hostname="kept-b")
    gpu = factories.gpu(a, serial="KEPT1")
    services.gpu_move(gpu=gpu, to_server=b, to_pci_bus_id="00000000:2A:00.0", to_module_id=2, actor=SYSTEM)
    services.gpu_move(gpu=Gpu.objects.get(pk=gpu.pk), to_server=None, to_spares=True, actor=SYSTEM, reason="spare")
    for to_state in ("drained", "rma"):
        services.gpu_transition(gpu=Gpu.objects.get(pk=gpu.pk), to_state=to_state, actor=SYSTEM, reason=to_state)
    return Gpu.objects.get(pk=gpu.pk)


def test_the_rows_and_annotations_of_the_queryset(moved, django_assert_num_queries):
    def moves(gpu_id):
        return (GpuMove.objects.filter(gpu_id=gpu_id)
                .annotate(from_hostname=F("from_server__hostname"), to_hostname=F("to_server__hostname"))
                .order_by("-at", "-id")[:10])

    read = KeptRead(moves)
    kept = read(moved.pk)
    assert _fields(kept) == _fields(moves(moved.pk)) and len(kept) == 3
    assert [(m.get_kind_display(), m.from_hostname, m.to_hostname) for m in kept] == [
        ("Into spares pool", "kept-b", None), ("Moved", "kept-a", "kept-b"), ("Installed", None, "kept-a")]
    other = factories.gpu()
    with django_assert_num_queries(1):
        assert read(other.pk) == []


def test_related_objects_are_filled_as_the_orm_fills_them(moved, django_assert_num_queries):
    def moves(gpu_id):
        return (GpuMove.objects.filter(gpu_id=gpu_id).select_related("from_server__rack__row", "to_server")
                .order_by("-at", "-id"))

    def gpus(gpu_id):
        return Gpu.objects.filter(pk=gpu_id).select_related("model", "server", "rack")

    kept, orm = KeptRead(moves)(moved.pk), list(moves(moved.pk))
    spare = KeptRead(gpus)(moved.pk)[0]
    with django_assert_num_queries(0):
        assert [(m.from_server and m.from_server.hostname, m.to_server and m.to_server.hostname) for m in kept] == [
            ("kept-b", None), ("kept-a", "kept-b"), (None, "kept-a")]
        assert _fields(m.from_server.rack.row for m in kept if m.from_server) == _fields(
            m.from_server.rack.row for m in orm if m.from_server)
        assert spare.model.pk == moved.model_id and spare.model.name and spare.server is None and spare.rack is None
    assert _fields(kept) == _fields(orm)


def test_str_and_datetime_parameters_and_json_fields(moved):
    def trail(object_id, since):
        return AuditEvent.objects.filter(object_id=object_id, at__gte=since).order_by("-at", "-id")

    read = KeptRead(trail)
    since = moved.state_changed_at - dt.timedelta(days=1)
    kept = read(str(moved.pk), since)
    assert _fields(kept) == _fields(trail(str(moved.pk), since)) and kept
    assert any(event.changes == {"state": ["drained", "rma"]} for event in kept)  # JSON as the ORM decodes it
    assert read(str(moved.pk), moved.state_changed_at + dt.timedelta(days=1)) == []


def test_a_datetime_the_database_takes_adapted_is_adapted_on_every_call(moved, monkeypatch):
    """SQLite takes datetimes as text: the statement's parameter is the adapted stand-in, each call's is adapted."""
    from django.db import connection

    monkeypatch.setattr(connection.ops, "adapt_datetimefield_value", lambda value: value.isoformat())

    def trail(since):
        return AuditEvent.objects.filter(object_id=str(moved.pk), at__gte=since).order_by("-at", "-id")

    read = KeptRead(trail)
    assert read(moved.state_changed_at) and read(moved.state_changed_at + dt.timedelta(seconds=1)) == []
    assert _fields(read(moved.state_changed_at)) == _fields(trail(moved.state_changed_at))


def test_annotations_are_converted_as_the_orm_converts_them(moved):
    """A raw query leaves an annotation as the database returned it; a kept read converts it (here a JSON
    document, which PostgreSQL returns as text)."""
    def trail(object_id):
        return AuditEvent.objects.filter(object_id=object_id).annotate(copy=F("changes")).order_by("-at", "-id")

    kept = KeptRead(trail)(str(moved.pk))
    assert kept and all(event.copy == event.changes and isinstance(event.copy, dict) for event in kept)
    assert [e.copy for e in kept] == [e.copy for e in trail(str(moved.pk))]


def test_the_statement_is_built_once():
    built = []

    def history(gpu_id):
        built.append(gpu_id)
        return GpuStateChange.objects.filter(gpu_id=gpu_id).order_by("-at", "-id")

    read = KeptRead(history)
    gpus = [factories.gpu(state="spare") for _ in range(3)]
    for gpu in gpus:
        assert [c.to_state for c in read(gpu.pk)] == ["spare"]
    assert len(built) == 1 and built[0] not in {g.pk for g in gpus}  # built with a stand-in, not a caller's value


@pytest.mark.parametrize(("build", "argument", "why"), [
    (lambda gpu_id: GpuStateChange.objects.filter(gpu_id=gpu_id).values("to_state"), 1, "values"),
    (lambda gpu_id: GpuMove.objects.filter(gpu_id=gpu_id).prefetch_related("to_server"), 1, "prefetch"),
    (lambda gpu_id: GpuStateChange.objects.filter(gpu_id=gpu_id, id__gte=gpu_id), 1, "once"),  # used twice
    (lambda serial: Gpu.objects.filter(serial__contains=serial), "x", "once"),  # reaches the SQL as %serial%
    (lambda gpu_id: GpuStateChange.objects.all(), 1, "once"),  # not used at all
])
def test_refused(build, argument, why):
    with pytest.raises(TypeError, match=why):
        KeptRead(build)(argument)


def test_a_parameter_of_another_type_is_refused():
    read = KeptRead(lambda gpu_id: GpuStateChange.objects.filter(gpu_id=gpu_id))
    with pytest.raises(TypeError, match="not None"):
        read(None)
    with pytest.raises(TypeError, match="not a bool"):
        read(True)
