"""The engine's flips and the hint history go with their endpoint in the database
(PostgreSQL), as its runs do (0018): why in ``_cascade``."""

from django.db import migrations

from endpoints.migrations._cascade import set_on_delete

KEYS = [
    ("endpoints_flip", "endpoint_id", "endpoints_endpoint"),
    ("endpoints_hinthistory", "endpoint_id", "endpoints_endpoint"),
]


def cascade(apps, schema_editor):
    set_on_delete(schema_editor, KEYS, "CASCADE")


def no_action(apps, schema_editor):
    set_on_delete(schema_editor, KEYS, "NO ACTION")


class Migration(migrations.Migration):
    dependencies = [
        ("endpoints", "0018_runs_go_with_their_endpoint"),
    ]

    operations = [migrations.RunPython(cascade, no_action)]
