"""``manage.py hint ENDPOINT``: set a temporary interval or a one-shot run time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from endpoints.audit import Actor
from endpoints.choices import DEFAULT_HINT_TTL_MS
from endpoints.management.commands._shared import (
    add_endpoint_argument,
    describe_endpoint_state,
    find_endpoint,
    parse_duration,
    parse_when,
)
from endpoints.operations import OperationRefused, apply_hint

ONE_MS = timedelta(milliseconds=1)
DEFAULT_TTL: dict[str, timedelta] = {
    kind: timedelta(milliseconds=ms) for kind, ms in DEFAULT_HINT_TTL_MS.items()
}


class Command(BaseCommand):
    help = (
        "Set the endpoint's hint, as the planner would: --interval 30s runs it at that "
        "cadence instead of the baseline, --at ISO runs it once at that time (if earlier "
        "than the baseline). The hint lasts --ttl (default 60m for an interval, 30m for "
        "a one-shot), always inside the endpoint's min/max interval; a tighter hint takes "
        "effect at once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_endpoint_argument(parser)
        kind = parser.add_mutually_exclusive_group(required=True)
        kind.add_argument(
            "--interval", metavar="DURATION", help="Run at this cadence, e.g. 30s, 5m."
        )
        kind.add_argument(
            "--at", metavar="ISO", help="Run once at this time (ISO 8601, UTC without offset)."
        )
        parser.add_argument("--ttl", metavar="DURATION", help="How long the hint lasts, e.g. 15m.")
        parser.add_argument(
            "--reason", default="set by an operator", help="Why; shown with the hint."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        endpoint = find_endpoint(options["endpoint"])
        interval_ms = next_run_at = None
        # "is not None": an empty --interval "" is a mistake to report, not a missing option.
        if options["interval"] is not None:
            interval_ms = parse_duration(options["interval"], option="--interval") // ONE_MS
        else:
            next_run_at = parse_when(options["at"], option="--at")
        kind = "interval" if interval_ms is not None else "oneshot"
        ttl = (
            parse_duration(options["ttl"], option="--ttl")
            if options["ttl"] is not None
            else DEFAULT_TTL[kind]
        )
        try:
            apply_hint(
                endpoint,
                now=now,
                interval_ms=interval_ms,
                next_run_at=next_run_at,
                ttl=ttl,
                reason=options["reason"],
                actor=Actor.command(),
            )
        except OperationRefused as exc:
            raise CommandError(str(exc)) from None
        endpoint.refresh_from_db()
        self.stdout.write(f"Hint set until {now + ttl:%Y-%m-%d %H:%M:%S} UTC.")
        self.stdout.write(describe_endpoint_state(endpoint, now))
