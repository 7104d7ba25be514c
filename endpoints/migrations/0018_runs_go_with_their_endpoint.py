"""A run's endpoint key deletes the run with its endpoint in the database (PostgreSQL).

Django deletes an endpoint's runs itself, from the list it collected first; on a long
history that takes a while, and the scheduler keeps starting runs meanwhile (the claim
was taken before the delete began). Such a run, missing from the list, made the delete
of its endpoint fail at commit (the key, NO ACTION, still referenced): a 500 and nothing
deleted, for a tenant, a job or an endpoint alike. With ``ON DELETE CASCADE`` the
database deletes it with the endpoint row; a run inserted after that row is gone waits
for the delete and is refused (the engine gives its claim back). Django's own cascade
still runs first; the key stays deferred (the check of an insert is unchanged).

The key is made again, so PostgreSQL checks every run against it (PostgreSQL 15 has no
NOT VALID key on a partitioned table), holding off run writes meanwhile: on a large
history run it in a maintenance window, as 0017.

SQLite is left as it is (changing a key there rebuilds the table): its transactions are
IMMEDIATE (settings), so no run is recorded while a delete's transaction is open, and
``operations.delete_for_good`` opens it before Django collects (``Model.delete`` would
collect first).
"""

from django.db import migrations

# The key Django made (named with a hash): one per database, found by what it joins.
_KEY = """
SELECT conname FROM pg_constraint WHERE contype = 'f' AND conparentid = 0
AND conrelid = 'endpoints_run'::regclass AND confrelid = 'endpoints_endpoint'::regclass
"""


def _set_action(schema_editor, action):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(_KEY)
        [(name,)] = cursor.fetchall()
        cursor.execute(
            f'ALTER TABLE endpoints_run DROP CONSTRAINT "{name}", ADD CONSTRAINT "{name}"'
            " FOREIGN KEY (endpoint_id) REFERENCES endpoints_endpoint (id)"
            f" ON DELETE {action} DEFERRABLE INITIALLY DEFERRED"
        )


def cascade(apps, schema_editor):
    _set_action(schema_editor, "CASCADE")


def no_action(apps, schema_editor):
    _set_action(schema_editor, "NO ACTION")


class Migration(migrations.Migration):
    dependencies = [
        ("endpoints", "0017_run_partitions"),
    ]

    operations = [migrations.RunPython(cascade, no_action)]
