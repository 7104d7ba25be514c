"""Who paused an endpoint, stored as its own field (issue 32): the breaker's pause was told
apart by a text prefix of ``pause_reason``. Existing breaker pauses are recognised by that
text once, here; other pauses keep a blank source (paused before sources were kept)."""

from django.db import migrations, models

CHOICES = [
    ("person", "a person (admin, API, MCP or a command)"),
    ("planner", "the planner"),
    ("breaker", "the breaker, until its probe run"),
    ("breaker-held", "the breaker, until a person resumes it"),
]
PREFIX = "Breaker: "
UNTIL_RESUMED = "; resume it once the cause is fixed"


def breaker_sources(apps, schema_editor):
    for model, paused in (("Endpoint", "pause_reason"), ("HintHistory", "reason")):
        rows = apps.get_model("endpoints", model).objects.filter(
            paused_until__isnull=False, **{f"{paused}__startswith": PREFIX}
        )
        rows.filter(**{f"{paused}__endswith": UNTIL_RESUMED}).update(pause_source="breaker-held")
        rows.exclude(**{f"{paused}__endswith": UNTIL_RESUMED}).update(pause_source="breaker")


class Migration(migrations.Migration):
    dependencies = [
        ("endpoints", "0020_forget_celery_results"),
    ]

    operations = [
        migrations.AddField(
            model_name="endpoint",
            name="pause_source",
            field=models.CharField(blank=True, choices=CHOICES, db_default="", max_length=16),
        ),
        migrations.AddField(
            model_name="hinthistory",
            name="pause_source",
            field=models.CharField(blank=True, choices=CHOICES, db_default="", max_length=16),
        ),
        migrations.RunPython(breaker_sources, migrations.RunPython.noop),
    ]
