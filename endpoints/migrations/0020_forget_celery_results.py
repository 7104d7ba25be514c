"""django-celery-results is no longer installed (docs/DESIGN.md, "Processes"): its tables,
empty since every task ignores its result, are dropped where an older version made them,
with the app's migration records (so installing it again would make them again) and its
content types, whose permissions ("Can view task result") the user and group forms
would go on offering. A no-op on a database that never had the app; reversed, nothing."""

from django.db import migrations

TABLES = [
    "django_celery_results_taskresult",
    "django_celery_results_groupresult",
    "django_celery_results_chordcounter",
]
APP = "django_celery_results"


def forget_content_types(apps, schema_editor):
    # Deleted through the ORM so their permissions (and what grants them) go with them,
    # and the admin's log entries about them keep their text without the link.
    content_types = apps.get_model("contenttypes", "ContentType")
    content_types.objects.using(schema_editor.connection.alias).filter(app_label=APP).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("endpoints", "0019_outbox_and_hints_go_with_their_endpoint"),
        ("admin", "0003_logentry_add_action_flag_choices"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        *(
            migrations.RunSQL(f"DROP TABLE IF EXISTS {table}", migrations.RunSQL.noop)
            for table in TABLES
        ),
        migrations.RunSQL(
            f"DELETE FROM django_migrations WHERE app = '{APP}'", migrations.RunSQL.noop
        ),
        migrations.RunPython(forget_content_types, migrations.RunPython.noop),
    ]
