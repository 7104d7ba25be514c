"""Delivering alert messages: each channel in its own sender thread with a deadline.

Step 3 of the notify cycle (``notifications.alerts``) and the test message. A failed
attempt is recorded at its own time and retried with exponential backoff counted from it,
up to ``CRONICORN_NOTIFY_MAX_ATTEMPTS``; a channel failing
``CRONICORN_NOTIFY_CHANNEL_FAILING_AFTER`` times in a row is marked failing. A hanging
channel holds only its own thread: no other channel, tenant, cycle or run waits for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, F, Q

from endpoints.models import JobStatus
from endpoints.wording import duration_words
from notifications.models import (
    Channel,
    Delivery,
    DeliveryAttempt,
    DeliveryStatus,
)
from notifications.transports import DeliveryError, Message, send

logger = logging.getLogger("cronicorn.notify")

DELIVERY_BATCH = 100
BACKOFF_CAP = timedelta(minutes=30)


class Clock:
    """The cycle's ``now`` moved on by the real time elapsed since the cycle began.

    Every attempt is stamped with its own time on this clock, never with the cycle's
    start: after a send that hung for 4 s, the next attempt's time and its backoff are
    counted from when it really happened (``now`` is still passed in, so tests and the
    callers keep control of the date)."""

    def __init__(self, base: datetime) -> None:
        self.base = base
        self.started = time.monotonic()

    def now(self) -> datetime:
        return self.base + timedelta(seconds=time.monotonic() - self.started)


# Channels this process is sending on right now: a channel still busy from an earlier
# cycle (a hanging server) is skipped, not queued behind itself. Other processes are
# kept off the same deliveries by their lease (``next_attempt_at`` set ahead).
_BUSY: set[int] = set()
_BUSY_LOCK = threading.Lock()
_TURNS: set[Future[tuple[int, int]]] = set()
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """The process's senders, made on first use (after a Celery fork, in the child)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(
                max_workers=settings.CRONICORN_NOTIFY_CONCURRENCY,
                thread_name_prefix="cronicorn-send",
            )
        return _POOL


def channel_deadline() -> timedelta:
    """How long one channel's turn may last: no send starts after it, so a channel's turn
    ends within two send timeouts even when every send hangs to its timeout."""
    return timedelta(seconds=settings.CRONICORN_NOTIFY_TIMEOUT_SECONDS)


def lease() -> timedelta:
    """How long a taken delivery is ours: past a channel's longest possible turn (two send
    timeouts), so it is taken again only if the sending process died."""
    return timedelta(seconds=2 * settings.CRONICORN_NOTIFY_TIMEOUT_SECONDS + 30)


def deliver_due(
    *, now: datetime, wait: float | None = None, clock: Clock | None = None
) -> tuple[int, int]:
    """Attempt the deliveries due, each channel in its own sender thread; returns (sent,
    failed attempts) of the turns that ended within ``wait`` seconds (default: one notify
    period). Turns still running go on in the background and record their own outcome, so
    a hanging channel delays neither the next cycle nor any other channel or tenant. A
    channel sends its deliveries one after another and stops at its first failure, so one
    dead channel costs one timeout a cycle, in its own thread. ``clock`` is the cycle's
    (started with it), so what is due and each attempt's time are the real moment."""
    clock = clock or Clock(now)
    due = list(
        Delivery.objects.filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=clock.now())
        .order_by("next_attempt_at")  # notifications_delivery_due
        .values_list("pk", "channel_id", "next_attempt_at")[:DELIVERY_BATCH]
    )
    by_channel: dict[int, list[tuple[int, datetime]]] = defaultdict(list)
    for pk, channel_id, next_attempt_at in due:
        by_channel[channel_id].append((pk, next_attempt_at))
    turns = [
        turn
        for channel_id, items in by_channel.items()
        if (turn := _start_turn(channel_id, items, clock))
    ]
    if wait is None:
        wait = settings.CRONICORN_NOTIFY_SECONDS
    finished, _running = futures_wait(turns, timeout=wait)
    outcomes = [future.result() for future in finished]
    return sum(s for s, _f in outcomes), sum(f for _s, f in outcomes)


def _start_turn(
    channel_id: int, items: list[tuple[int, datetime]], clock: Clock
) -> Future[tuple[int, int]] | None:
    with _BUSY_LOCK:
        if channel_id in _BUSY:
            return None
        _BUSY.add(channel_id)
    until = clock.now() + lease()
    # Take each: a conditional update whose row count says we won the delivery.
    taken = [
        pk
        for pk, next_attempt_at in items
        if Delivery.objects.filter(
            pk=pk, status=DeliveryStatus.PENDING, next_attempt_at=next_attempt_at
        ).update(next_attempt_at=until)
    ]
    if not taken:
        _free(channel_id)
        return None
    try:
        turn = _pool().submit(_channel_turn, channel_id, taken, until, clock)
    except RuntimeError:  # the pool is shutting down (interpreter exit): left to the lease
        _free(channel_id)
        return None
    with _BUSY_LOCK:
        _TURNS.add(turn)
    turn.add_done_callback(_forget)
    return turn


def _forget(turn: Future[tuple[int, int]]) -> None:
    with _BUSY_LOCK:
        _TURNS.discard(turn)


def wait_for_senders(timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for this process's channel turns to end (a clean
    shutdown, a test); True when none is left running."""
    with _BUSY_LOCK:
        turns = list(_TURNS)
    _done, running = futures_wait(turns, timeout=timeout)
    return not running


def _free(channel_id: int) -> None:
    with _BUSY_LOCK:
        _BUSY.discard(channel_id)


def _channel_turn(
    channel_id: int, pks: list[int], until: datetime, clock: Clock
) -> tuple[int, int]:
    """One channel's deliveries, in a sender thread with its own database connection."""
    sent = failed = 0
    deadline = time.monotonic() + channel_deadline().total_seconds()
    try:
        deliveries = list(
            Delivery.objects.select_related("channel__tenant")
            .filter(pk__in=pks, next_attempt_at=until)
            .annotate(live=Count("alerts", filter=LIVE_ENDPOINT))
            .order_by("created_at", "pk")
        )
        if deliveries and not deliveries[0].channel.enabled:
            _withdraw(deliveries, until, CHANNEL_DISABLED)
            return sent, failed
        # A message whose endpoints were all archived (silent from then on: no recovery
        # will follow) or deleted (their alerts with them) is old news; a test message
        # tells of no endpoint.
        if gone := [d for d in deliveries if not d.live and d.payload.get("kind") != "test"]:
            _withdraw(gone, until, ENDPOINTS_GONE)
            deliveries = [d for d in deliveries if d not in gone]
        for index, delivery in enumerate(deliveries):
            if failed or time.monotonic() > deadline:
                _release(deliveries[index:], until, clock.now())
                break
            if attempt(delivery, lease_until=until, clock=clock):
                sent += 1
            else:
                failed += 1
        return sent, failed
    except Exception:
        logger.exception(
            "sending on channel %s failed; its deliveries wait for their lease", channel_id
        )
        return sent, failed
    finally:
        _free(channel_id)
        connection.close()  # this thread's own; a pool thread may idle for hours


# An alert whose endpoint still tells its alerts: neither it nor its job archived.
LIVE_ENDPOINT = Q(alerts__endpoint__archived_at__isnull=True) & ~Q(
    alerts__endpoint__job__status=JobStatus.ARCHIVED
)
CHANNEL_DISABLED = "Not sent: the channel was disabled before it went out."
ENDPOINTS_GONE = "Not sent: every endpoint it told of was archived or deleted before it went out."


def _withdraw(deliveries: Sequence[Delivery], until: datetime, reason: str) -> None:
    """Close deliveries that must not go out, saying why: a disabled channel sends nothing
    more, and a message about endpoints since archived or deleted is not sent; either
    would otherwise go out as old news (on a retry, or once the channel is enabled)."""
    withdrawn = Delivery.objects.filter(
        pk__in=[d.pk for d in deliveries], status=DeliveryStatus.PENDING, next_attempt_at=until
    ).update(status=DeliveryStatus.FAILED, last_error=reason)
    logger.info("channel %s: %d deliveries not sent: %s", deliveries[0].channel, withdrawn, reason)


def _release(deliveries: Sequence[Delivery], until: datetime, at: datetime) -> None:
    """Give back deliveries a turn did not get to: due again at once (for the next cycle)."""
    Delivery.objects.filter(
        pk__in=[d.pk for d in deliveries], status=DeliveryStatus.PENDING, next_attempt_at=until
    ).update(next_attempt_at=at)


def attempt(delivery: Delivery, *, lease_until: datetime, clock: Clock, retry: bool = True) -> bool:
    """Send once and record the attempt at its own time on ``clock``; True when it went
    through. Recorded only while the delivery is still ours (``next_attempt_at`` is the
    lease we set): a send that outlived its lease is not recorded twice."""
    channel = delivery.channel
    started = time.monotonic()
    try:
        send(channel, Message(delivery.subject, delivery.body, delivery.payload))
        error = ""
    except DeliveryError as exc:
        error = str(exc)
    at = clock.now()
    number = delivery.attempts + 1
    took = round((time.monotonic() - started) * 1000)
    with transaction.atomic():
        ours = Delivery.objects.filter(
            pk=delivery.pk, status=DeliveryStatus.PENDING, next_attempt_at=lease_until
        )
        if error:
            won = _record_failure(ours, channel, number, error, at, retry=retry)
        else:
            won = _record_success(ours, channel, number, at)
        if won:
            DeliveryAttempt.objects.create(
                delivery=delivery, number=number, at=at, ok=not error, duration_ms=took, error=error
            )
    if not won:
        logger.warning(
            "alert delivery %d on channel %s outlived its lease; its outcome is not recorded",
            delivery.pk,
            channel,
        )
    elif error:
        then = (
            "gave up"
            if _gave_up(number, retry)
            else f"next attempt in {duration_words(backoff(number).total_seconds() * 1000)}"
        )
        logger.warning(
            "alert delivery failed on channel %s (attempt %d): %s; %s", channel, number, error, then
        )
    else:
        logger.info("alert sent on channel %s: %s", channel, delivery.subject)
    return not error


def _record_success(ours: Any, channel: Channel, number: int, at: datetime) -> bool:
    if not ours.update(status=DeliveryStatus.SENT, attempts=number, sent_at=at, last_error=""):
        return False
    Channel.objects.filter(pk=channel.pk).update(
        consecutive_failures=0, failing_since=None, last_error=""
    )
    return True


def _gave_up(number: int, retry: bool) -> bool:
    return not retry or number >= settings.CRONICORN_NOTIFY_MAX_ATTEMPTS


def _record_failure(
    ours: Any, channel: Channel, number: int, error: str, at: datetime, *, retry: bool
) -> bool:
    gave_up = _gave_up(number, retry)
    if not ours.update(
        status=DeliveryStatus.FAILED if gave_up else DeliveryStatus.PENDING,
        attempts=number,
        # Counted from this attempt's own end: never earlier than its backoff.
        next_attempt_at=at + backoff(number),
        last_error=error,
    ):
        return False
    Channel.objects.filter(pk=channel.pk).update(
        consecutive_failures=F("consecutive_failures") + 1, last_error=error
    )
    Channel.objects.filter(
        pk=channel.pk,
        failing_since__isnull=True,
        consecutive_failures__gte=settings.CRONICORN_NOTIFY_CHANNEL_FAILING_AFTER,
    ).update(failing_since=at)
    return True


def backoff(attempts: int) -> timedelta:
    """Exponential: the base, then twice as long after each failed attempt, capped."""
    base = timedelta(seconds=settings.CRONICORN_NOTIFY_RETRY_SECONDS)
    return min(base * 2 ** (attempts - 1), BACKOFF_CAP)


def send_test_message(channel: Channel, *, now: datetime) -> Delivery:
    """Send a test message now (``test_channel``, the API, the admin button) and return
    its delivery, ``status`` and ``last_error`` saying how it went. Sent exactly once, by
    the same ``attempt`` as alerts: the delivery is made already taken (its lease in
    ``next_attempt_at``), so a running notify loop never sends it too, and it is not
    retried."""
    clock = Clock(now)
    until = clock.now() + lease()
    delivery = Delivery.objects.create(
        channel=channel,
        subject=f"[Cronicorn] test message for channel {channel.name}",
        body=f"This is a test of the alert channel {channel} sent at {now:%Y-%m-%d %H:%M} UTC.",
        payload={
            "kind": "test",
            "tenant": channel.tenant.name,
            "channel": channel.name,
            "sent_at": now.isoformat(),
            "alerts": [],
        },
        next_attempt_at=until,
        created_at=now,
    )
    attempt(delivery, lease_until=until, clock=clock, retry=False)
    delivery.refresh_from_db()
    return delivery
