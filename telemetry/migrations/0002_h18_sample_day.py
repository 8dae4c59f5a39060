from django.db import migrations, models


def storage_external(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE telemetry_sampleday ALTER COLUMN data SET STORAGE EXTERNAL")


def forget_content_type(apps, schema_editor):
    """Backwards: the model's content type (and its permissions) go with it, as on a database that never had it."""
    apps.get_model("contenttypes", "ContentType").objects.filter(app_label="telemetry", model="sampleday").delete()


class Migration(migrations.Migration):

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("inventory", "0007_telemetry_own_app"),
        ("telemetry", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="SampleDay",
            fields=[
                ("pk", models.CompositePrimaryKey("gpu", "day", blank=True, editable=False, primary_key=True,
                                                  serialize=False)),
                ("gpu", models.ForeignKey(db_constraint=False, on_delete=models.DO_NOTHING, related_name="+",
                                          to="inventory.gpu")),
                ("day", models.DateField()),
                ("n", models.IntegerField(help_text="Samples in the blob")),
                ("data", models.BinaryField()),
            ],
            options={"db_table": "telemetry_sampleday"},
        ),
        migrations.RunPython(storage_external, forget_content_type),
    ]
