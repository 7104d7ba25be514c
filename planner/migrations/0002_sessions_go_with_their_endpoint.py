"""An analysis session goes with its endpoint in the database (PostgreSQL): a session
the planner starts while the endpoint is being deleted no longer fails the delete (why in
``endpoints/migrations/_cascade``)."""

from django.db import migrations

from endpoints.migrations._cascade import cascading

KEYS = [("planner_analysissession", "endpoint_id", "endpoints_endpoint")]


class Migration(migrations.Migration):
    dependencies = [
        ("planner", "0001_initial"),
    ]

    operations = [cascading(KEYS)]
