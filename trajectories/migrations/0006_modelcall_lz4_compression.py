"""Model calls' token blobs and JSON compress with lz4 on PostgreSQL.

A recorded call is written while the agent waits for its answer (docs/proxy.md), and
pglz spends about 0.13 ms of that compressing 8,000 prompt ids and the request; lz4 is
several times faster at a similar ratio for this data. Only values written from now on
change; SQLite, and PostgreSQL built without lz4, keep their default.
"""

from django.db import migrations

COLUMNS = (
    "request",
    "response",
    "prompt_token_ids_blob",
    "completion_token_ids_blob",
    "completion_logprobs_blob",
)


def _lz4_supported(schema_editor) -> bool:
    if schema_editor.connection.vendor != "postgresql":
        return False
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_settings "
            "WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)"
        )
        return cursor.fetchone() is not None


def _set_compression(method: str):
    def apply(apps, schema_editor) -> None:
        if not _lz4_supported(schema_editor):
            return
        table = apps.get_model("trajectories", "ModelCall")._meta.db_table
        changes = ", ".join(f"ALTER COLUMN {c} SET COMPRESSION {method}" for c in COLUMNS)
        schema_editor.execute(f"ALTER TABLE {table} {changes}")

    return apply


class Migration(migrations.Migration):
    dependencies = [("trajectories", "0005_recording_sessions")]

    operations = [
        migrations.RunPython(_set_compression("lz4"), _set_compression("default")),
    ]
