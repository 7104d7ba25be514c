"""``manage.py rotate_signing_secret --tenant T [--grace 24h]``: a new request-signing
secret, printed once; the previous one keeps signing beside it for the grace period."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from endpoints import operations
from endpoints.audit import Actor
from endpoints.management.commands._shared import parse_duration
from endpoints.models import Tenant


class Command(BaseCommand):
    help = (
        "Give a tenant a new request-signing secret and print it once. For the grace "
        "period (CRONICORN_SIGNING_GRACE_SECONDS, or --grace) requests carry two "
        "signatures, with the new and the previous secret, so receivers can switch."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="The tenant's name.")
        parser.add_argument(
            "--grace",
            metavar="DURATION",
            help="e.g. 24h or 7d (default: CRONICORN_SIGNING_GRACE_SECONDS).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(name=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No tenant named {options['tenant']!r}.")
        grace = None
        if options["grace"]:
            grace = parse_duration(options["grace"], option="--grace")
        secret = operations.rotate_signing_secret(
            tenant, now=timezone.now(), grace=grace, actor=Actor.command()
        )
        self.stdout.write(secret)
        until = tenant.hmac_previous_until
        self.stderr.write(
            f"New signing secret for {tenant.name}. Copy it now: it is not shown again. "
            + (f"The previous secret signs too until {until.isoformat()}." if until else "")
        )
