"""``manage.py create_api_key --tenant T [--read-only] [--expires 90d]``: print a new key once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from api.models import ApiKey, Scope
from endpoints.models import Tenant
from endpoints.schedules import ScheduleError, parse_interval
from endpoints.validation import longest_problem


class Command(BaseCommand):
    help = (
        "Create an API key for a tenant and print it once (only its hash is stored). "
        "Keys have the write scope unless --read-only; they never expire unless --expires."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="The tenant's name.")
        parser.add_argument("--name", default="", help="What uses the key, e.g. 'CI'.")
        parser.add_argument("--read-only", action="store_true", help="Only GET requests.")
        parser.add_argument("--expires", metavar="DURATION", help="e.g. 90d, 12h.")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(name=options["tenant"]).first()
        if tenant is None:
            names = ", ".join(Tenant.objects.values_list("name", flat=True)[:20]) or "none yet"
            raise CommandError(f"No tenant named {options['tenant']!r} (tenants: {names}).")
        key = ApiKey(
            tenant=tenant,
            name=options["name"] or "created with manage.py",
            scope=Scope.READ if options["read_only"] else Scope.WRITE,
            expires_at=_expiry(options["expires"]),
        )
        raw = key.issue()
        key.save()
        self.stdout.write(raw)
        self.stderr.write(
            f"Key {key} for {tenant.name} ({key.scope}"
            f"{', expires ' + key.expires_at.isoformat() if key.expires_at else ''}). "
            "Copy it now: it is not stored and never shown again."
        )


def _expiry(text: str | None) -> Any:
    if not text:
        return None
    try:
        ms = parse_interval(text)
    except ScheduleError as exc:
        raise CommandError(f"--expires {text!r}: {exc} Use e.g. 90d or 12h.") from None
    if ms <= 0 or longest_problem(ms):
        raise CommandError(f"--expires {text!r}: give a duration from 1s to a year, e.g. 90d.")
    return timezone.now() + timedelta(milliseconds=ms)
