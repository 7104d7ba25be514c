"""The engine's flips and the hint history go with their endpoint in the database
(PostgreSQL), as its runs do (0018): why in ``_cascade``."""

from django.db import migrations

from endpoints.migrations._cascade import cascading

KEYS = [
    ("endpoints_flip", "endpoint_id", "endpoints_endpoint"),
    ("endpoints_hinthistory", "endpoint_id", "endpoints_endpoint"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("endpoints", "0018_runs_go_with_their_endpoint"),
    ]

    operations = [cascading(KEYS)]
