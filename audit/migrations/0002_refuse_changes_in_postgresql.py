"""On PostgreSQL, a trigger refuses every UPDATE and DELETE of an audit entry, raw SQL included,
except the retention prune's DELETE (audit.retention sets runcrate.audit_prune for its own
transaction). SQLite (development) relies on the model's refusals."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION audit_auditevent_refuse_changes() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('runcrate.audit_prune', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit entries cannot be changed or deleted' USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS audit_auditevent_refuse_changes ON audit_auditevent;
CREATE TRIGGER audit_auditevent_refuse_changes BEFORE UPDATE OR DELETE ON audit_auditevent
    FOR EACH ROW EXECUTE FUNCTION audit_auditevent_refuse_changes();
"""

DROP = """
DROP TRIGGER IF EXISTS audit_auditevent_refuse_changes ON audit_auditevent;
DROP FUNCTION IF EXISTS audit_auditevent_refuse_changes();
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]

    operations = [migrations.RunPython(create, drop)]
