"""``manage.py unarchive --job JOB``: bring an archived job back, paused."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from endpoints.audit import Actor
from endpoints.management.commands._shared import find_job
from endpoints.operations import OperationRefused, unarchive_job


class Command(BaseCommand):
    help = (
        "Bring an archived job back. It comes back paused: 'resume --job JOB' runs its "
        "endpoints again, each planned afresh. (An archived endpoint comes back by "
        "importing a file that lists it.)"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--job", metavar="JOB", required=True, help="The job (name or id).")

    def handle(self, *args: Any, **options: Any) -> None:
        job = find_job(options["job"])
        try:
            unarchive_job(job, now=timezone.now(), actor=Actor.command())
        except OperationRefused as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"Job {job.name} unarchived; it is paused. Run it again with: "
            f"manage.py resume --job {job.name}"
        )
