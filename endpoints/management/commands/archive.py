"""``manage.py archive ENDPOINT``: stop an endpoint for good, keeping its history."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from endpoints.management.commands._shared import add_endpoint_argument, find_endpoint
from endpoints.operations import archive_endpoint


class Command(BaseCommand):
    help = (
        "Archive an endpoint: it is never claimed again, its runs and hints are kept, and "
        "a run already in flight finishes. Importing a file that lists it brings it back."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_endpoint_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        endpoint = find_endpoint(options["endpoint"])
        if endpoint.archived_at:
            raise CommandError(f"{endpoint.ref} was already archived at {endpoint.archived_at}.")
        archive_endpoint(endpoint, now=timezone.now())
        self.stdout.write(f"{endpoint.ref} archived.")
