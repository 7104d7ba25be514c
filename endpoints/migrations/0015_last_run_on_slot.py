"""``last_run_at`` moves from the endpoint to its slot: a run writes the slot anyway (its
release), and the wide endpoint row only when its failure count, hints or retry change."""

from django.db import migrations, models

# One statement that both PostgreSQL and SQLite run (a correlated subquery, no UPDATE FROM).
TO_SLOT = """
UPDATE endpoints_slot SET last_run_at = (
    SELECT e.last_run_at FROM endpoints_endpoint AS e WHERE e.id = endpoints_slot.endpoint_id
)
"""
TO_ENDPOINT = """
UPDATE endpoints_endpoint SET last_run_at = (
    SELECT s.last_run_at FROM endpoints_slot AS s WHERE s.endpoint_id = endpoints_endpoint.id
)
"""


class Migration(migrations.Migration):
    dependencies = [("endpoints", "0014_run_policies")]

    operations = [
        migrations.AddField(
            model_name="slot",
            name="last_run_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunSQL(TO_SLOT, TO_ENDPOINT),
        migrations.RemoveField(model_name="endpoint", name="last_run_at"),
    ]
