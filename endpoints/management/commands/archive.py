"""``manage.py archive ENDPOINT`` or ``archive --job JOB``: stop an endpoint, or every
endpoint of a job, for good, keeping the history."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from endpoints.audit import Actor
from endpoints.management.commands._shared import REF_HELP, find_endpoint, find_job
from endpoints.models import JobStatus
from endpoints.operations import archive_endpoint, archive_job


class Command(BaseCommand):
    help = (
        "Archive an endpoint: it is never claimed again, its runs and hints are kept, and "
        "a run already in flight finishes. Importing a file that lists it brings it back. "
        "With --job JOB, archive the whole job (none of its endpoints runs; "
        "'unarchive --job JOB' brings it back, paused)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "endpoint", nargs="?", metavar="ENDPOINT", help=REF_HELP.capitalize() + "."
        )
        parser.add_argument("--job", metavar="JOB", help="Archive this job (name or id).")

    def handle(self, *args: Any, **options: Any) -> None:
        if bool(options["endpoint"]) == bool(options["job"]):
            raise CommandError("Name an endpoint (job/endpoint or id) or a job with --job.")
        now = timezone.now()
        if options["job"]:
            job = find_job(options["job"])
            if job.status == JobStatus.ARCHIVED:
                raise CommandError(f"Job {job.name} is already archived.")
            archive_job(job, now=now, actor=Actor.command())
            self.stdout.write(
                f"Job {job.name} archived: none of its endpoints runs; history kept. "
                f"Undo with: manage.py unarchive --job {job.name}"
            )
            return
        endpoint = find_endpoint(options["endpoint"])
        if endpoint.archived_at:
            raise CommandError(f"{endpoint.ref} was already archived at {endpoint.archived_at}.")
        archive_endpoint(endpoint, now=now, actor=Actor.command())
        self.stdout.write(f"{endpoint.ref} archived.")
