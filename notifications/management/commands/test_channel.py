"""``manage.py test_channel CHANNEL``: send a test message on an alert channel."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from endpoints.management.commands._shared import to_json
from notifications.delivery import send_test_message
from notifications.models import Channel, Delivery, DeliveryStatus
from notifications.transports import masked_target


class Command(BaseCommand):
    help = (
        "Send a test message on an alert channel now and say whether it went through. "
        "Recorded as a delivery (visible in the admin), never retried. Exits non-zero when "
        "the channel failed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "channel", metavar="CHANNEL", help="The channel, as tenant/name, name or id."
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="The outcome as JSON, for scripts (a failed message still exits non-zero).",
        )

    def handle(self, *args: Any, channel: str, **options: Any) -> None:
        found = find_channel(channel)
        delivery = send_test_message(found, now=timezone.now())
        where = f"{found} ({found.kind} {masked_target(found)})"
        if options["json"]:
            self.stdout.write(to_json(as_json(found, delivery)))
        elif delivery.status == DeliveryStatus.SENT:
            self.stdout.write(f"{where}: test message sent.")
        if delivery.status != DeliveryStatus.SENT:
            raise CommandError(f"{where}: the test message failed: {delivery.last_error}")


def as_json(channel: Channel, delivery: Delivery) -> dict[str, Any]:
    return {
        "channel": str(channel),
        "channel_id": channel.pk,
        "kind": channel.kind,
        "target": masked_target(channel),
        "delivery_id": delivery.pk,
        "status": delivery.status,
        "error": delivery.last_error,
    }


def find_channel(ref: str) -> Channel:
    """The channel named by ``ref``; CommandError says what to do if none or several."""
    channels = Channel.objects.select_related("tenant")
    if ref.isdecimal():
        matches = list(channels.filter(pk=int(ref)))
    elif "/" in ref:
        tenant, _slash, name = ref.partition("/")
        matches = list(channels.filter(tenant__name=tenant, name=name))
    else:
        matches = list(channels.filter(name=ref)[:2])
    if len(matches) == 1:
        return matches[0]
    known = ", ".join(str(c) for c in channels[:10]) or "none yet (add one in the admin)"
    problem = f"No channel {ref!r}" if not matches else f"Several tenants have a channel {ref!r}"
    raise CommandError(f"{problem}; give tenant/name or the id. Channels: {known}.")
