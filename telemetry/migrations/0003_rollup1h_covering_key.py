"""The 1-hour rollups' primary key carries the chart's columns (``INCLUDE``), so a GPU's year is one index-only
scan of contiguous leaf pages, ordered, no heap access.

The rollup writes every GPU's hour together, so one GPU's 8,760 hours of a year lie on ~8,760 heap pages; a
chart read them all per metric (a bitmap heap scan and a sort: ~20 ms warm per metric, 8 metrics per chart).
In the key's leaf pages they are ~170 consecutive pages (~2 ms). Cost: ~100 bytes per row more in the index
(docs/telemetry.md). PostgreSQL only: built ``CONCURRENTLY`` (no write lock while it builds), then made the
primary key in place of the old one (a catalog swap).

An index-only scan skips the heap only for pages the visibility map marks all-visible, which VACUUM sets. By
default autovacuum visits an insert-only table after it grew by 20 %: at 100,000 GPUs (876 M rows a year) that
is months of hours read from the heap. Every 100,000 new rows instead (an hour at 100,000 GPUs); the table is
insert-mostly, so such a VACUUM reads only the new pages."""

from django.db import migrations

TABLE = "telemetry_rollup1h"
# What selectors.history reads from the 1-hour rollups of one GPU (_GPU_ROLLUP).
CHART = ("n_samples", "gpu_temp_min", "gpu_temp_avg", "gpu_temp_max", "mem_temp_max", "tlimit_min", "power_min",
         "power_avg", "power_max", "sm_clock_avg", "throttled_samples", "d_ecc_dbe", "d_remap_unc", "hw_xid_count")


def _swap_key(schema_editor, include: tuple[str, ...]) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'", [TABLE])
        name = cursor.fetchone()[0]
        cursor.execute("DROP INDEX IF EXISTS telemetry_rollup1h_key_new")  # an interrupted build leaves it invalid
        columns = f" INCLUDE ({', '.join(include)})" if include else ""
        cursor.execute(f"CREATE UNIQUE INDEX CONCURRENTLY telemetry_rollup1h_key_new ON {TABLE} (gpu_id, bucket)"
                       f"{columns}")
        cursor.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT {name}, "
                       f"ADD CONSTRAINT {name} PRIMARY KEY USING INDEX telemetry_rollup1h_key_new")


VACUUM_AFTER = "autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 100000"


def covering(apps, schema_editor):
    _swap_key(schema_editor, CHART)
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {TABLE} SET ({VACUUM_AFTER})")


def plain(apps, schema_editor):
    _swap_key(schema_editor, ())
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {TABLE} RESET (autovacuum_vacuum_insert_scale_factor, "
                              "autovacuum_vacuum_insert_threshold)")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [("telemetry", "0002_h18_sample_day")]

    operations = [migrations.RunPython(covering, plain)]
