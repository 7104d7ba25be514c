"""``manage.py trigger ENDPOINT``: run an endpoint now, through the normal path."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from endpoints.audit import Actor
from endpoints.management.commands._shared import REF_HELP, find_endpoint, find_job
from endpoints.operations import OperationRefused, run_job_now, run_now
from endpoints.wording import count_words


class Command(BaseCommand):
    help = (
        "Run an endpoint now: it becomes due at once and the running scheduler "
        "(runscheduler or Celery) runs it within about a second, recording a normal run. "
        "Refused while a run is in flight, or while the endpoint or its job is paused "
        "(use test_endpoint to call it once anyway)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "endpoint", nargs="?", metavar="ENDPOINT", help=REF_HELP.capitalize() + "."
        )
        parser.add_argument("--job", metavar="JOB", help="Run every endpoint of this job now.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["job"]:
            if options["endpoint"]:
                raise CommandError("Give either ENDPOINT or --job JOB, not both.")
            job = find_job(options["job"])
            try:
                due, left_out = run_job_now(job, now=timezone.now(), actor=Actor.command())
            except OperationRefused as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(f"{count_words(due, 'endpoint')} of job {job.name} due now.")
            for reason in left_out:
                self.stderr.write(f"left out: {reason}")
            return
        if not options["endpoint"]:
            raise CommandError("Name the ENDPOINT to run (job/endpoint or id), or use --job.")
        endpoint = find_endpoint(options["endpoint"])
        try:
            run_now(endpoint, now=timezone.now(), actor=Actor.command())
        except OperationRefused as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"{endpoint.ref} is due now; the scheduler runs it within about a second. "
            f"Follow it with: manage.py runs {endpoint.ref}"
        )
