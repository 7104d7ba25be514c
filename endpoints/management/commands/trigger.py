"""``manage.py trigger ENDPOINT``: run an endpoint now, through the normal path."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from endpoints.management.commands._shared import add_endpoint_argument, find_endpoint
from endpoints.operations import OperationRefused, run_now


class Command(BaseCommand):
    help = (
        "Run an endpoint now: it becomes due at once and the running scheduler "
        "(runscheduler or Celery) runs it within about a second, recording a normal run. "
        "Refused while a run is in flight, or while the endpoint or its job is paused "
        "(use test_endpoint to call it once anyway)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_endpoint_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        endpoint = find_endpoint(options["endpoint"])
        try:
            run_now(endpoint, now=timezone.now())
        except OperationRefused as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"{endpoint.ref} is due now; the scheduler runs it within about a second. "
            f"Follow it with: manage.py runs {endpoint.ref}"
        )
