"""An alert state belongs to the tenant its endpoint was in when the state began, so an
endpoint moved to another tenant starts over there (``alerts._states_of``). Its key goes
with the tenant in the database, as 0005 makes the others (``endpoints/migrations/_cascade``)."""

import django.db.models.deletion
from django.db import migrations, models

from endpoints.migrations._cascade import cascading

KEYS = [("notifications_alertstate", "tenant_id", "endpoints_tenant")]


class Migration(migrations.Migration):
    dependencies = [
        ("endpoints", "0017_run_partitions"),
        ("notifications", "0005_alerts_go_with_what_they_name"),
    ]

    operations = [
        migrations.AddField(
            model_name="alertstate",
            name="tenant",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="endpoints.tenant",
            ),
        ),
        cascading(KEYS),
    ]
