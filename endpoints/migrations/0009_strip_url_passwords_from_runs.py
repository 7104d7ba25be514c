"""Runs recorded before URL passwords counted as secrets kept the endpoint's URL whole;
a run now records it without ``user:password@``, and so do the old ones."""

from __future__ import annotations

from typing import Any

from django.db import migrations

from endpoints.secrets import USERINFO_REGEX, strip_userinfo

BATCH = 1_000


def strip_passwords(apps: Any, schema_editor: Any) -> None:
    Run = apps.get_model("endpoints", "Run")
    leaking = Run.objects.filter(request_url__regex=USERINFO_REGEX).only("request_url")
    while batch := list(leaking[:BATCH]):
        for run in batch:
            Run.objects.filter(pk=run.pk).update(request_url=strip_userinfo(run.request_url))


class Migration(migrations.Migration):
    dependencies = [("endpoints", "0008_redelivery_and_short_leases")]

    operations = [migrations.RunPython(strip_passwords, migrations.RunPython.noop)]
