"""An analysis session goes with its endpoint in the database (PostgreSQL): a session
the planner starts while the endpoint is being deleted no longer fails the delete (why in
``endpoints/migrations/_cascade``)."""

from django.db import migrations

from endpoints.migrations._cascade import set_on_delete

KEYS = [("planner_analysissession", "endpoint_id", "endpoints_endpoint")]


def cascade(apps, schema_editor):
    set_on_delete(schema_editor, KEYS, "CASCADE")


def no_action(apps, schema_editor):
    set_on_delete(schema_editor, KEYS, "NO ACTION")


class Migration(migrations.Migration):
    dependencies = [
        ("planner", "0001_initial"),
    ]

    operations = [migrations.RunPython(cascade, no_action)]
