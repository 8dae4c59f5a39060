# Telemetry became an app of its own (label ``telemetry``). Its tables were always named ``telemetry_*``, so
# this migration only removes the models from the inventory app's *state*; ``telemetry/0001_initial`` adds them
# to the telemetry app's state and moves their content types (permissions, audit events) along. No table, row
# or index is touched.

from django.db import migrations

MOVED = ("XidEvent", "HealthFlag", "GpuLatest", "Rollup5m", "Rollup1h", "RollupGroup5m", "RollupGroup1h",
         "RollupCursor", "IngestSource")


class Migration(migrations.Migration):

    dependencies = [
        ("inventory", "0006_healthflag_filter_indexes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name=name) for name in MOVED],
            database_operations=[],
        ),
    ]
