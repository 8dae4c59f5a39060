"""Telemetry became an app of its own through state-only migrations (inventory 0007, telemetry 0001). On a
database that has the models in the inventory app (content types ``inventory.<model>``), the move keeps every
row, and the content types move along, so permissions and audit events still point at the same objects; back
again restores the old labels. Tables are never touched: they were always named ``telemetry_*``."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sqlite]

BEFORE = ("inventory", "0006_healthflag_filter_indexes")  # the telemetry models still in the inventory app


def migrate(*, before: bool = False):
    """Migrate every app to its latest migration (``before``: inventory to BEFORE and telemetry to nothing) and
    return the historical apps there."""
    executor = MigrationExecutor(connection)
    graph = executor.loader.graph
    targets = graph.leaf_nodes()
    if before:
        targets = [BEFORE, *(before_the_move(graph, app) for app in sorted({node[0] for node in targets})
                             if app not in ("inventory", "telemetry"))]
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state([node for node in targets if node[1] is not None]).apps


def before_the_move(graph, app: str) -> tuple[str, str | None]:
    """``app``'s latest migration that needs neither the move nor telemetry (``(app, None)``: none of them),
    so the backwards plan does not also have to run forwards."""
    moved = {("inventory", "0007_telemetry_own_app"), *(n for n in graph.nodes if n[0] == "telemetry")}
    leaf = max(node for node in graph.leaf_nodes() if node[0] == app)
    chain = [node for node in graph.forwards_plan(leaf) if node[0] == app]
    fine = [node for node in chain if not moved & set(graph.forwards_plan(node))]
    return fine[-1] if fine else (app, None)


def test_moving_the_models_keeps_rows_content_types_permissions_and_audit_events():
    try:
        old = migrate(before=True)
        content_type = old.get_model("contenttypes", "ContentType")
        source_ct = content_type.objects.get(app_label="inventory", model="ingestsource")  # as on an old database
        assert not content_type.objects.filter(app_label="telemetry").exists()
        source = old.get_model("inventory", "IngestSource").objects.create(name="old-source", kind="push")
        old.get_model("fleet", "AuditEvent").objects.create(
            at=timezone.now(), actor_name="system", source="system", action="create", content_type=source_ct,
            object_id=str(source.pk), object_repr="old-source")
        permission_ids = set(old.get_model("auth", "Permission").objects.filter(content_type=source_ct)
                             .values_list("id", flat=True))
        assert permission_ids

        new = migrate()
        moved = new.get_model("contenttypes", "ContentType").objects.get(pk=source_ct.pk)
        assert (moved.app_label, moved.model) == ("telemetry", "ingestsource")
        assert not new.get_model("contenttypes", "ContentType").objects.filter(app_label="inventory",
                                                                                 model="xidevent").exists()
        assert new.get_model("telemetry", "IngestSource").objects.get(pk=source.pk).name == "old-source"
        assert new.get_model("fleet", "AuditEvent").objects.get(object_repr="old-source").content_type_id == moved.pk
        assert set(new.get_model("auth", "Permission").objects.filter(content_type=moved)
                   .values_list("id", flat=True)) == permission_ids

        from telemetry.models import IngestSource  # the real model reads the same row

        assert IngestSource.objects.get(pk=source.pk).name == "old-source"
    finally:
        migrate()
