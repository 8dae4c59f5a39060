"""Five single-column indexes of inventory_gpu's foreign keys dropped: each column leads a composite index of
Gpu.Meta.indexes that serves the same lookups. Only the indexes go (the state's db_index=False): Django's own
AlterField would also drop and re-add each foreign-key constraint, re-validating the whole table."""

import django.db.models.deletion
from django.db import migrations, models

INDEXES = {  # Django's names for the foreign keys' indexes (the same on PostgreSQL and SQLite)
    "inventory_gpu_model_id_f14c1bee": "model_id",
    "inventory_gpu_rack_id_9d0b1942": "rack_id",
    "inventory_gpu_row_id_b42aeab5": "row_id",
    "inventory_gpu_server_id_ecf05fce": "server_id",
    "inventory_gpu_site_id_b8c515b7": "site_id",
}


class Migration(migrations.Migration):

    dependencies = [
        ('inventory', '0007_telemetry_own_app'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='gpu',
                    name='model',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='gpus', to='inventory.gpumodel'),
                ),
                migrations.AlterField(
                    model_name='gpu',
                    name='rack',
                    field=models.ForeignKey(blank=True, db_index=False, editable=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='gpus', to='inventory.rack'),
                ),
                migrations.AlterField(
                    model_name='gpu',
                    name='row',
                    field=models.ForeignKey(blank=True, db_index=False, editable=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='gpus', to='inventory.row'),
                ),
                migrations.AlterField(
                    model_name='gpu',
                    name='server',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='gpus', to='inventory.server'),
                ),
                migrations.AlterField(
                    model_name='gpu',
                    name='site',
                    field=models.ForeignKey(blank=True, db_index=False, editable=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='gpus', to='inventory.site'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    [f'DROP INDEX IF EXISTS "{name}"' for name in INDEXES],
                    [f'CREATE INDEX "{name}" ON "inventory_gpu" ("{column}")' for name, column in INDEXES.items()],
                ),
            ],
        ),
    ]
