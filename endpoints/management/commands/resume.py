"""``manage.py resume``: lift an endpoint's pause, or a job's."""

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
)
from endpoints.operations import OperationRefused, resume_endpoint, resume_job, resume_tenant
from endpoints.wording import count_words


class Command(BaseCommand):
    help = (
        "Lift an endpoint's pause (a person's or the planner's); its next run is planned "
        "again from now. With --job JOB, resume a paused job and replan its endpoints."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "endpoint", nargs="?", metavar="ENDPOINT", help=REF_HELP.capitalize() + "."
        )
        parser.add_argument("--reason", default="", help="Why; shown in the hint history.")
        parser.add_argument("--job", metavar="JOB", help="Resume this whole job (name or id).")
        parser.add_argument(
            "--tenant", metavar="TENANT", help="Resume every paused job of this tenant."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        given = [name for name in ("endpoint", "job", "tenant") if options[name]]
        if len(given) != 1:
            raise CommandError("Give either an ENDPOINT or --job JOB (or --tenant TENANT).")
        try:
            if options["tenant"]:
                tenant = find_tenant(options["tenant"])
                count = resume_tenant(tenant, now=now, actor=Actor.command())
                self.stdout.write(f"{tenant.name}: {count_words(count, 'job')} resumed.")
                return
            if options["job"]:
                job = find_job(options["job"])
                resume_job(job, now=now, actor=Actor.command())
                self.stdout.write(f"Job {job.name} resumed.")
                return
            endpoint = find_endpoint(options["endpoint"])
            resume_endpoint(endpoint, now=now, reason=options["reason"], actor=Actor.command())
        except OperationRefused as exc:
            raise CommandError(str(exc)) from None
        endpoint.refresh_from_db()
        self.stdout.write(describe_endpoint_state(endpoint, now))
