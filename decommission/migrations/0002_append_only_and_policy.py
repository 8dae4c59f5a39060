"""The database refuses UPDATE and DELETE on evidence events and certificates (append-only: a correction is a new
event), and the policy table starts as NIST SP 800-88's decision flow (admins may edit it; every edit is audited)."""

from django.db import migrations

TABLES = ("decommission_evidenceevent", "decommission_certificate")

PG_FUNCTION = """
CREATE OR REPLACE FUNCTION decommission_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'append-only: % on % is refused; a correction is a new event', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;
"""

# (category, destination) -> minimum level: NIST SP 800-88 r1 Fig. 4-1 / r2 §4.3.
SEED = {
    ("low", "internal_reuse"): "clear", ("low", "resale"): "purge", ("low", "vendor_return"): "purge",
    ("low", "recycling"): "purge",
    ("moderate", "internal_reuse"): "clear", ("moderate", "resale"): "purge", ("moderate", "vendor_return"): "purge",
    ("moderate", "recycling"): "destroy",
    ("high", "internal_reuse"): "purge", ("high", "resale"): "destroy", ("high", "vendor_return"): "destroy",
    ("high", "recycling"): "destroy",
}


def forwards(apps, schema_editor):
    conn = schema_editor.connection
    with conn.cursor() as cursor:
        if conn.vendor == "postgresql":
            cursor.execute(PG_FUNCTION)
            for table in TABLES:
                cursor.execute(f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                               "FOR EACH ROW EXECUTE FUNCTION decommission_append_only()")
        elif conn.vendor == "sqlite":
            for table in TABLES:
                for op in ("UPDATE", "DELETE"):
                    cursor.execute(f"CREATE TRIGGER {table}_no_{op.lower()} BEFORE {op} ON {table} "
                                   f"BEGIN SELECT RAISE(ABORT, 'append-only: {op} on {table} is refused'); END")
    PolicyRule = apps.get_model("decommission", "PolicyRule")
    PolicyRule.objects.bulk_create(
        PolicyRule(category=c, destination=d, min_level=level, note="NIST SP 800-88 decision flow")
        for (c, d), level in SEED.items())


def backwards(apps, schema_editor):
    conn = schema_editor.connection
    with conn.cursor() as cursor:
        if conn.vendor == "postgresql":
            for table in TABLES:
                cursor.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
            cursor.execute("DROP FUNCTION IF EXISTS decommission_append_only()")
        elif conn.vendor == "sqlite":
            for table in TABLES:
                for op in ("update", "delete"):
                    cursor.execute(f"DROP TRIGGER IF EXISTS {table}_no_{op}")
    apps.get_model("decommission", "PolicyRule").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [("decommission", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
