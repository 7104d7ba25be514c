"""``manage.py clear_hints ENDPOINT``: drop the active hints, back to the baseline."""

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
from endpoints.operations import clear_hints


class Command(BaseCommand):
    help = (
        "Drop an endpoint's active hints (interval and one-shot, a pending one-shot is "
        "cancelled) and plan its next run from the baseline again. A pause is separate: "
        "use resume."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_endpoint_argument(parser)
        parser.add_argument("--reason", default="", help="Why; shown in the hint history.")

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        endpoint = find_endpoint(options["endpoint"])
        clear_hints(endpoint, now=now, reason=options["reason"], actor=Actor.command())
        endpoint.refresh_from_db()
        self.stdout.write(describe_endpoint_state(endpoint, now))
