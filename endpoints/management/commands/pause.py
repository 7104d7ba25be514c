"""``manage.py pause``: pause an endpoint for a while, or a whole job."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from endpoints.audit import Actor
from endpoints.management.commands._shared import (
    REF_HELP,
    describe_endpoint_state,
    find_endpoint,
    find_job,
    find_tenant,
    parse_duration,
    parse_when,
)
from endpoints.operations import OperationRefused, pause_endpoint, pause_job, pause_tenant
from endpoints.wording import count_words

# A job's pause is its status (the claim skips a paused job): it has no end to set.
UNTIL_RESUMED = (
    "{option} pauses every endpoint of the {what} until 'resume {option}': a {what} pause "
    "has no end of its own, so it takes no --for or --until. Pause it now and resume it "
    "later, or pause each endpoint for a while: manage.py pause ENDPOINT --for 2h."
)


class Command(BaseCommand):
    help = (
        "Pause an endpoint until a time (--for 2h or --until ISO): it does not run until "
        "then, and runs again on its own afterwards. With --job JOB, pause every endpoint "
        "of the job until 'resume --job JOB'; with --tenant TENANT, every active job of the "
        "tenant until 'resume --tenant TENANT'. A job or tenant pause has no end of its "
        "own, so it takes no --for or --until."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "endpoint", nargs="?", metavar="ENDPOINT", help=REF_HELP.capitalize() + "."
        )
        when = parser.add_mutually_exclusive_group()
        when.add_argument(
            "--for",
            dest="duration",
            metavar="DURATION",
            help="Pause for this long, e.g. 30m, 2h, 1d.",
        )
        when.add_argument(
            "--until",
            metavar="ISO",
            help="Pause until this time (ISO 8601, UTC without an offset).",
        )
        parser.add_argument("--reason", default="", help="Why; shown in the hint history.")
        parser.add_argument("--job", metavar="JOB", help="Pause this whole job (name or id).")
        parser.add_argument(
            "--tenant",
            metavar="TENANT",
            help="Pause every active job of this tenant until 'resume --tenant TENANT'.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        try:
            if options["tenant"]:
                if options["duration"] or options["until"]:
                    raise CommandError(UNTIL_RESUMED.format(option="--tenant", what="tenant"))
                if options["endpoint"] or options["job"]:
                    raise CommandError("--tenant pauses a whole tenant; give no ENDPOINT or --job.")
                tenant = find_tenant(options["tenant"])
                count = pause_tenant(tenant, now=now, actor=Actor.command())
                self.stdout.write(
                    f"{tenant.name}: {count_words(count, 'job')} paused; resume with: "
                    f"manage.py resume --tenant {tenant.name}"
                )
            elif options["job"]:
                self.pause_job(options, now)
            else:
                self.pause_endpoint(options, now)
        except OperationRefused as exc:
            raise CommandError(str(exc)) from None

    def pause_job(self, options: dict[str, Any], now: Any) -> None:
        if options["duration"] or options["until"]:
            raise CommandError(UNTIL_RESUMED.format(option="--job", what="job"))
        if options["endpoint"]:
            raise CommandError("--job pauses a whole job; give no ENDPOINT.")
        job = find_job(options["job"])
        pause_job(job, now=now, actor=Actor.command())
        self.stdout.write(
            f"Job {job.name} paused; resume it with: manage.py resume --job {job.name}"
        )

    def pause_endpoint(self, options: dict[str, Any], now: Any) -> None:
        if not options["endpoint"]:
            raise CommandError("Name the ENDPOINT to pause (job/endpoint or id), or use --job.")
        if options["duration"]:
            until = now + parse_duration(options["duration"], option="--for")
        elif options["until"]:
            until = parse_when(options["until"], option="--until")
        else:
            raise CommandError("Say for how long: --for 2h, or --until 2026-03-01T14:30:00Z.")
        endpoint = find_endpoint(options["endpoint"])
        pause_endpoint(
            endpoint, now=now, until=until, reason=options["reason"], actor=Actor.command()
        )
        endpoint.refresh_from_db()
        self.stdout.write(describe_endpoint_state(endpoint, now))
