"""The channels, side by side: each ``send_*`` delivers one message or raises
``DeliveryError`` with a message that is safe to store and show (the channel's target,
which holds its secrets, is scrubbed from it).

- email: Django's email backend (``EMAIL_*`` settings), so any SMTP server or provider
  backend works;
- webhook: a JSON POST through the one HTTP executor, so it has the executor's deadline,
  SSRF guard and the tenant's HMAC signature (``X-Cronicorn-Timestamp`` and
  ``X-Cronicorn-Signature``, verified as README.md "Alerts" shows);
- apprise: chat and push services (Slack, Discord, Teams, Telegram, ntfy, PagerDuty…)
  through Apprise rather than hand-written integrations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage, get_connection
from django.utils import timezone

from endpoints.engine.executor import HttpRequest, NetworkPolicy, perform_request
from endpoints.engine.outbound import ConnectionRefusedByGuard, guarded_connections
from endpoints.secrets import MASK
from notifications.models import (
    Channel,
    ChannelKind,
    apprise_plugin,
    check_apprise_url,
    email_addresses,
)

# Pieces of a target at least this long are treated as secrets when scrubbing errors.
MIN_SECRET_PIECE = 6


class DeliveryError(Exception):
    """A send that failed; the message is already scrubbed of the channel's secrets."""


@dataclass(frozen=True)
class Message:
    subject: str
    body: str
    payload: dict[str, Any]


def send(channel: Channel, message: Message) -> None:
    """Deliver ``message`` on ``channel`` or raise ``DeliveryError``."""
    sender = {
        ChannelKind.EMAIL: send_email,
        ChannelKind.WEBHOOK: send_webhook,
        ChannelKind.APPRISE: send_apprise,
    }[ChannelKind(channel.kind)]
    try:
        sender(channel, message)
    except DeliveryError as exc:
        raise DeliveryError(scrub(str(exc), channel.target)) from None
    except Exception as exc:  # a backend's own error type: worded, scrubbed, kept
        text = f"{type(exc).__name__}: {exc}"
        raise DeliveryError(scrub(text, channel.target)) from None


def send_email(channel: Channel, message: Message) -> None:
    connection = get_connection(timeout=settings.CRONICORN_NOTIFY_TIMEOUT_SECONDS)
    email = EmailMessage(
        subject=message.subject,
        body=message.body,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=_recipients(channel.target),
        connection=connection,
    )
    email.send(fail_silently=False)


def _recipients(target: str) -> list[str]:
    addresses = email_addresses(target)
    if not addresses:
        raise DeliveryError("no email address given")
    return addresses


def send_webhook(channel: Channel, message: Message) -> None:
    request = HttpRequest(
        url=channel.target,
        method="POST",
        body=message.payload,
        timeout_ms=int(settings.CRONICORN_NOTIFY_TIMEOUT_SECONDS * 1000),
        max_response_size_kb=16,
        hmac_secret=channel.tenant.hmac_secret,
        hmac_previous_secret=channel.tenant.previous_secret(timezone.now()),
    )
    result = perform_request(request)
    if result.status != "success":
        raise DeliveryError(f"webhook: {result.error}")


def send_apprise(channel: Channel, message: Message) -> None:
    """Apprise makes its own connections (HTTP with redirects, SMTP to a host named in
    the URL, ...): every one of them passes the outbound guard at connect time, on the
    address actually connected to (``endpoints.engine.outbound``)."""
    import apprise  # lazily: see notifications.models.apprise_plugin

    try:
        check_apprise_url(channel.target)
    except ValidationError as exc:
        raise DeliveryError(" ".join(exc.messages)) from None
    # Sequential: the guard follows this thread, so Apprise must not send on a pool.
    notifier = apprise.Apprise(asset=apprise.AppriseAsset(async_mode=False))
    if not notifier.add(channel.target):
        raise DeliveryError("Apprise does not understand this URL; see its list of services.")
    # Apprise reports why a send failed only through its logger: capture it for the record.
    with (
        guarded_connections(NetworkPolicy.from_settings()) as refusals,
        apprise.LogCapture(level=apprise.logging.WARNING) as captured,
    ):
        try:
            ok = notifier.notify(title=message.subject, body=message.body)
        except ConnectionRefusedByGuard:
            ok = False
    if refusals:
        raise DeliveryError(refusals[0])
    if not ok:
        why = " ".join(captured.getvalue().split()) or "no reason given"
        raise DeliveryError(f"Apprise could not send: {why}")


def masked_target(channel: Channel) -> str:
    """The target as pages may show it: addresses for email, secrets masked otherwise."""
    if channel.kind == ChannelKind.EMAIL:
        return channel.target
    if channel.kind == ChannelKind.APPRISE:
        plugin = apprise_plugin(channel.target)
        if plugin is not None:
            return str(plugin.url(privacy=True)).split("?")[0]
        return MASK
    parts = urlsplit(channel.target)
    return f"{parts.scheme}://{parts.hostname or ''}/{MASK}" if parts.scheme else MASK


def scrub(text: str, target: str) -> str:
    """``text`` without ``target`` or any long piece of it (tokens, passwords, paths),
    except its scheme and host, which say where a send went without giving it away."""
    host = (urlsplit(target).hostname or "") if "://" in target else ""
    pieces = sorted(
        (p for p in re.split(r"[/:@?&=#,;]+", target) if len(p) >= MIN_SECRET_PIECE),
        key=len,
        reverse=True,
    )
    text = text.replace(target, MASK)
    for piece in pieces:
        if piece.lower() != host.lower() and "@" not in piece:
            text = text.replace(piece, MASK)
    return text
