"""Keys that delete their row with the row they name, in the database (PostgreSQL).

Migration 0018 says why for runs; it holds for every row a background process inserts
with a key to an endpoint, job, tenant or channel (the engine's flips, the planner's
sessions and hints, the alerts' states, alerts and deliveries): Django deletes such rows
from a list it made first, and one inserted meanwhile made the delete fail at commit (the
key, NO ACTION, still referenced). With ``ON DELETE CASCADE`` the database deletes it
with the row it names; one inserted after that row is gone waits for the delete and is
refused. The keys stay deferred. Not a migration (the name starts with ``_``): the apps'
migrations call it for their own keys.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

# The key Django made (named with a hash): one per database, found by its column.
_KEY = """
SELECT conname FROM pg_constraint
WHERE contype = 'f' AND conparentid = 0 AND conrelid = %s::regclass
AND confrelid = %s::regclass
AND conkey = ARRAY[(SELECT attnum FROM pg_attribute WHERE attrelid = %s::regclass
                    AND attname = %s)]
"""


def set_on_delete(schema_editor: Any, keys: list[tuple[str, str, str]], action: str) -> None:
    """Make each key (table, column, referenced table) ``ON DELETE action``."""
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        for table, column, target in keys:
            cursor.execute(_KEY, [table, target, table, column])
            [(name,)] = cursor.fetchall()
            cursor.execute(
                f'ALTER TABLE {table} DROP CONSTRAINT "{name}", ADD CONSTRAINT "{name}"'
                f" FOREIGN KEY ({column}) REFERENCES {target} (id)"
                f" ON DELETE {action} DEFERRABLE INITIALLY DEFERRED"
            )


def cascading(keys: list[tuple[str, str, str]]) -> migrations.RunPython:
    """The operation that makes ``keys`` ``ON DELETE CASCADE`` (back: ``NO ACTION``)."""

    def forwards(apps: Any, schema_editor: Any) -> None:
        set_on_delete(schema_editor, keys, "CASCADE")

    def backwards(apps: Any, schema_editor: Any) -> None:
        set_on_delete(schema_editor, keys, "NO ACTION")

    return migrations.RunPython(forwards, backwards)
