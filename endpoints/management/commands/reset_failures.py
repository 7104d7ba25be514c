"""``manage.py reset_failures ENDPOINT``: forget a failure streak and its backoff."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from endpoints.audit import Actor
from endpoints.management.commands._shared import (
    add_endpoint_argument,
    describe_endpoint_state,
    find_endpoint,
)
from endpoints.operations import reset_failures


class Command(BaseCommand):
    help = (
        "Set an endpoint's failure count to 0, which drops the backoff (baseline interval "
        "x 2^failures) from its next run; the next run only moves earlier."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_endpoint_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        endpoint = find_endpoint(options["endpoint"])
        before = endpoint.failure_count
        reset_failures(endpoint, now=now, actor=Actor.command())
        endpoint.refresh_from_db()
        self.stdout.write(f"Failure count {before} -> 0.")
        self.stdout.write(describe_endpoint_state(endpoint, now))
