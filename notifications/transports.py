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

import logging
import re
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
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
        with _masked_in_logs(channel.target):
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
    """The target as pages and log lines may show it: addresses for email; otherwise the
    scheme and the host, never a path, query or credentials (where Slack, Discord and
    Teams keep their secret, and Apprise's json://, xml://, form:// their tokens)."""
    if channel.kind == ChannelKind.EMAIL:
        return channel.target
    return mask_url(channel.target)


def mask_url(url: str) -> str:
    """``scheme://host/•••``: the host only when it is one (a name with a dot, an
    address, localhost); chat services keep tokens where a host would be (slack://T0/B0,
    ntfy://topic), which are masked like the rest."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return MASK
    if not parts.scheme:
        return MASK
    if not ("." in host or ":" in host or host == "localhost"):
        return f"{parts.scheme}://{MASK}"
    shown = f"[{host}]" if ":" in host else host
    shown += f":{port}" if port else ""
    rest = parts.path.strip("/") or parts.query or parts.fragment
    return f"{parts.scheme}://{shown}/{MASK}" if rest else f"{parts.scheme}://{shown}"


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


def scrub_url(text: str, target: str) -> str:
    """``scrub`` and also the target's path and query whatever their length, as the
    executor's and Apprise's log lines print them (``POST http://host/hook/T0/B0``)."""
    parts = urlsplit(target) if "://" in target else None
    if parts is not None:
        path = parts.path.rstrip("/")
        for piece in (f"{path}?{parts.query}" if parts.query else "", parts.query, path):
            if len(piece) > 1:
                text = text.replace(piece, f"/{MASK}" if piece.startswith("/") else MASK)
    return scrub(text, target)


# Channel targets being sent to right now, in any thread. The executor (a webhook),
# Apprise and urllib3 under it log the URL they call, at DEBUG for every send and at
# WARNING when the guard refuses an address; a filter on those loggers masks these
# targets in every such line (the executor serves runs too; their URLs are not touched).
_SENDING: Counter[str] = Counter()
_SENDING_LOCK = threading.Lock()


class MaskChannelTargets(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        with _SENDING_LOCK:
            targets = list(_SENDING)
        if targets:
            text = masked = record.getMessage()
            for target in targets:
                masked = scrub_url(masked, target)
            if masked != text:
                record.msg, record.args = masked, ()
        return True


@contextmanager
def _masked_in_logs(target: str) -> Iterator[None]:
    with _SENDING_LOCK:
        _SENDING[target] += 1
    try:
        yield
    finally:
        with _SENDING_LOCK:
            _SENDING[target] -= 1
            if _SENDING[target] <= 0:
                del _SENDING[target]


def _install_mask() -> None:
    for name in ("cronicorn.executor", "apprise", "urllib3.connectionpool"):
        named = logging.getLogger(name)
        if not any(isinstance(f, MaskChannelTargets) for f in named.filters):
            named.addFilter(MaskChannelTargets())


_install_mask()
