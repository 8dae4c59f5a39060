# The telemetry inbox (PostgreSQL): the ingest path's whole write stage is one binary COPY into it; the merge
# (telemetry.store.PostgresStore.merge, a beat task every 15 s) moves its rows into the raw
# tables, the counter and XID tables and the latest-value table, then TRUNCATEs it. A plain LOGGED table
# (a committed batch survives a crash) with no index and no constraint: appends cost the heap write alone.
# SQLite keeps its direct write path and has no inbox. Design: docs/telemetry.md.

from django.db import migrations

PG_DDL = """
CREATE TABLE telemetry_inbox (
    ts timestamptz NOT NULL, gpu_id integer NOT NULL, power_w real, throttle_mask integer,
    gpu_temp_c smallint, mem_temp_c smallint, tlimit_c smallint, sm_clock_mhz smallint,
    ecc_sbe bigint, ecc_dbe bigint, remap_corr integer, remap_unc integer, remap_failure boolean,
    pcie_replay bigint, sram_threshold boolean, xid integer, source_id bigint
) WITH (autovacuum_enabled = off)
"""


def create_inbox(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_DDL)


def drop_inbox(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP TABLE IF EXISTS telemetry_inbox")


class Migration(migrations.Migration):

    dependencies = [
        ("inventory", "0004_fwobs_server_latest_idx"),
    ]

    operations = [
        migrations.RunPython(create_inbox, drop_inbox, elidable=False),
    ]
