"""The notify cycle: detect state changes, group them into messages, send them.

It runs apart from the runs (the Celery task ``cronicorn.notify_cycle`` on the
``notify`` queue, and a loop of ``runscheduler``), so a slow or dead channel never
delays a run. Each step is safe to run in several processes at once: every state
change is a conditional update whose row count says who won.

1. ``detect_changes`` compares each endpoint that could have changed (failing, paused,
   or with an open alert: partial indexes, so the cost follows those, not the fleet)
   with its ``AlertState`` and records an ``Alert`` per change: failing after N
   failures, recovered, paused, stale. One per state change, never one per run.
2. ``queue_deliveries`` turns a job's alerts into one message per channel once the job
   has been quiet for ``CRONICORN_ALERT_DIGEST_SECONDS``: one alert alone, several as a
   digest, so a shared dependency going down sends one message, not fifty.
3. ``deliver_due`` sends what is due; a failed attempt is recorded and retried with
   exponential backoff up to ``CRONICORN_NOTIFY_MAX_ATTEMPTS``; a channel failing
   ``CRONICORN_NOTIFY_CHANNEL_FAILING_AFTER`` times in a row is marked failing.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q

from endpoints.governor import MAX_PLANNABLE_MS
from endpoints.models import Endpoint, Run, RunStatus
from endpoints.schedules import describe_duration
from notifications.models import (
    MAX_STALE_FACTOR,
    Alert,
    AlertKind,
    AlertRule,
    AlertState,
    Channel,
    Delivery,
    DeliveryAttempt,
    DeliveryStatus,
)
from notifications.transports import DeliveryError, Message, send

logger = logging.getLogger("cronicorn.notify")

DELIVERY_BATCH = 100
# A digest wait never holds a job's first alert longer than this.
DIGEST_MAX_WAIT = timedelta(minutes=2)
BACKOFF_CAP = timedelta(minutes=30)


@dataclass(frozen=True)
class CycleResult:
    alerts: int
    deliveries: int
    sent: int
    failed: int


def notify_cycle(*, now: datetime) -> CycleResult:
    alerts = detect_changes(now=now)
    deliveries = queue_deliveries(now=now)
    sent, failed = deliver_due(now=now)
    return CycleResult(len(alerts), deliveries, sent, failed)


# --- 1. Detect ------------------------------------------------------------------------


def detect_changes(*, now: datetime) -> list[Alert]:
    """Record one Alert per state change since the last cycle."""
    endpoints = _candidates(now)
    if not endpoints:
        return []
    states = _states_of(endpoints)
    rules = effective_rules(endpoints)
    alerts: list[Alert] = []
    for endpoint in endpoints:
        alerts.extend(_changes(endpoint, states[endpoint.pk], rules[endpoint.pk], now))
    return alerts


def _candidates(now: datetime) -> list[Endpoint]:
    """Endpoints that may have changed: each set read through its own partial index."""
    ids = set(
        Endpoint.objects.filter(failure_count__gt=0).values_list("pk", flat=True)
    )  # endpoints_endpoint_failing
    ids.update(
        Endpoint.objects.filter(paused_until__gt=now).values_list("pk", flat=True)
    )  # endpoints_endpoint_paused
    ids.update(
        AlertState.objects.filter(
            Q(failing=True) | Q(stale=True) | Q(paused_until_seen__isnull=False)
        ).values_list("pk", flat=True)
    )  # notifications_state_open
    ids.update(_stale_candidates(now))
    return list(Endpoint.objects.filter(pk__in=ids).select_related("job__tenant").order_by("pk"))


def _stale_candidates(now: datetime) -> list[int]:
    """Interval endpoints under a rule that watches for staleness and overdue by its
    factor. Only rules with ``stale_factor`` are read, so this costs what they cover."""
    found = []
    for rule in AlertRule.objects.filter(stale_factor__gt=0, enabled=True):
        scope = Endpoint.objects.filter(
            archived_at__isnull=True, baseline_interval_ms__isnull=False
        )
        if rule.endpoint_id is not None:
            scope = scope.filter(pk=rule.endpoint_id)
        else:
            scope = scope.filter(job_id=rule.job_id or 0)
        for pk, interval_ms, last_run_at, created_at in scope.values_list(
            "pk", "baseline_interval_ms", "last_run_at", "created_at"
        ):
            late = now - (last_run_at or created_at)
            if late > _stale_after(interval_ms or 0, rule.stale_factor):
                found.append(pk)
    return found


def _stale_after(interval_ms: int, factor: int) -> timedelta:
    # Bounded: a rule stored before MAX_STALE_FACTOR must not overflow the whole cycle.
    return timedelta(milliseconds=min(interval_ms * factor, MAX_PLANNABLE_MS * MAX_STALE_FACTOR))


def _states_of(endpoints: Sequence[Endpoint]) -> dict[int, AlertState]:
    """Each endpoint's alert state, created (all clear) the first time it is a candidate."""
    ids = [e.pk for e in endpoints]
    states = AlertState.objects.in_bulk(ids)
    if missing := [pk for pk in ids if pk not in states]:
        # ignore_conflicts: another cycle may create the same rows at the same moment.
        AlertState.objects.bulk_create(
            [AlertState(endpoint_id=pk) for pk in missing], ignore_conflicts=True
        )
        states.update(AlertState.objects.in_bulk(missing))
    return states


def effective_rules(endpoints: Iterable[Endpoint]) -> dict[int, AlertRule]:
    """Each endpoint's rule: its own, else its job's, else the defaults."""
    endpoints = list(endpoints)
    own = {
        r.endpoint_id: r
        for r in AlertRule.objects.filter(endpoint_id__in=[e.pk for e in endpoints])
    }
    of_job = {
        r.job_id: r for r in AlertRule.objects.filter(job_id__in={e.job_id for e in endpoints})
    }
    default = AlertRule()
    return {e.pk: own.get(e.pk) or of_job.get(e.job_id) or default for e in endpoints}


def _changes(endpoint: Endpoint, state: AlertState, rule: AlertRule, now: datetime) -> list[Alert]:
    alerts = []
    live = endpoint.archived_at is None and rule.enabled
    failing = live and (
        endpoint.failure_count >= rule.after_failures
        or (state.failing and endpoint.failure_count > 0)  # failing until a success
        # A streak reset by hand (reset_failures) is no success: still failing until
        # a run succeeds, so "recovered" is never said of an endpoint that did not.
        or (state.failing and not _last_run_succeeded(endpoint))
    )
    if failing != state.failing and _flip(state, now, failing=failing):
        if failing:
            alerts.append(_alert(endpoint, AlertKind.FAILING, _failure_detail(endpoint), now))
        elif live and rule.on_recovery:
            alerts.append(_alert(endpoint, AlertKind.RECOVERED, _recovery_detail(endpoint), now))
    paused = endpoint.paused_until if live and endpoint.is_paused(now) else None
    changed = paused != state.paused_until_seen
    if changed and _flip(state, now, paused_until_seen=paused) and paused and rule.on_pause:
        alerts.append(_alert(endpoint, AlertKind.PAUSED, _pause_detail(endpoint, now), now))
    stale = live and _is_stale(endpoint, rule, now)
    if stale != state.stale and _flip(state, now, stale=stale):
        kind = AlertKind.STALE if stale else AlertKind.RECOVERED
        if stale or rule.on_recovery:
            alerts.append(_alert(endpoint, kind, _stale_detail(endpoint, stale, now), now))
    return alerts


def _flip(state: AlertState, now: datetime, **change: Any) -> bool:
    """Move one field of the state from what we read to ``change``; False if another
    cycle got there first (then it raised the alert)."""
    [(field, value)] = change.items()
    won = AlertState.objects.filter(pk=state.pk, **{field: getattr(state, field)}).update(
        changed_at=now, **change
    )
    setattr(state, field, value)
    return bool(won)


def _is_stale(endpoint: Endpoint, rule: AlertRule, now: datetime) -> bool:
    if not rule.stale_factor or endpoint.baseline_interval_ms is None:
        return False
    since = endpoint.last_run_at or endpoint.created_at
    return now - since > _stale_after(endpoint.baseline_interval_ms, rule.stale_factor)


def _alert(endpoint: Endpoint, kind: AlertKind, detail: str, now: datetime) -> Alert:
    return Alert.objects.create(
        tenant_id=endpoint.job.tenant_id,
        job_id=endpoint.job_id,
        endpoint=endpoint,
        kind=kind,
        detail=detail,
        created_at=now,
    )


def _latest_run(endpoint: Endpoint) -> Run | None:
    return Run.objects.filter(endpoint=endpoint).order_by("-started_at").first()


def _failure_detail(endpoint: Endpoint) -> str:
    run = _latest_run(endpoint)
    text = f"{endpoint.failure_count} failed runs in a row"
    if run is not None:
        code = f" HTTP {run.status_code}" if run.status_code else ""
        text += f"; last: {run.status}{code}: {run.error or 'no error text'}"
    return text


def _last_run_succeeded(endpoint: Endpoint) -> bool:
    finished = Run.objects.filter(endpoint=endpoint).exclude(status=RunStatus.RUNNING)
    run = finished.order_by("-started_at").only("status").first()
    # No finished run at all: nothing failed that a success must answer.
    return run is None or run.status == RunStatus.SUCCESS


def _recovery_detail(endpoint: Endpoint) -> str:
    run = _latest_run(endpoint)
    code = f" (HTTP {run.status_code})" if run and run.status_code else ""
    return f"succeeded again{code}"


def _pause_detail(endpoint: Endpoint, now: datetime) -> str:
    assert endpoint.paused_until is not None
    until = f"{endpoint.paused_until:%Y-%m-%d %H:%M} UTC"
    reason = endpoint.pause_reason or "no reason given"
    return f"paused until {until} (for {_words(endpoint.paused_until - now)}): {reason}"


def _stale_detail(endpoint: Endpoint, stale: bool, now: datetime) -> str:
    if not stale:
        return "runs on schedule again"
    since = endpoint.last_run_at or endpoint.created_at
    return f"has not run for {_words(now - since)}"


# --- 2. Queue -------------------------------------------------------------------------


def queue_deliveries(*, now: datetime) -> int:
    """Turn each quiet job's new alerts into one message per enabled channel."""
    pending = Alert.objects.filter(queued_at__isnull=True)  # notifications_alert_unqueued
    made = 0
    for job_id, oldest, newest in _pending_jobs(pending):
        settled = now - newest >= timedelta(seconds=settings.CRONICORN_ALERT_DIGEST_SECONDS)
        if settled or now - oldest >= DIGEST_MAX_WAIT:
            made += _queue_job(job_id, now)
    return made


def _pending_jobs(pending: Any) -> list[tuple[int, datetime, datetime]]:
    by_job: dict[int, list[datetime]] = defaultdict(list)
    for job_id, created_at in pending.values_list("job_id", "created_at"):
        by_job[job_id].append(created_at)
    return [(job_id, min(times), max(times)) for job_id, times in by_job.items()]


def _queue_job(job_id: int, now: datetime) -> int:
    with transaction.atomic():
        # Another cycle may be queueing the same job: skip what it holds.
        alerts = list(
            Alert.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(job_id=job_id, queued_at__isnull=True)
            .select_related("endpoint", "job__tenant")
            .order_by("created_at", "pk")
        )
        alerts = _outside_quiet_hours(alerts, now)
        if not alerts:
            return 0
        Alert.objects.filter(pk__in=[a.pk for a in alerts]).update(queued_at=now)
        message = compose(alerts, now)
        channels = Channel.objects.filter(tenant_id=alerts[0].tenant_id, enabled=True)
        for channel in channels:
            delivery = Delivery.objects.create(
                channel=channel,
                subject=message.subject,
                body=message.body,
                payload=message.payload,
                next_attempt_at=now,
                created_at=now,
            )
            delivery.alerts.set(alerts)
        return len(channels)


def _outside_quiet_hours(alerts: list[Alert], now: datetime) -> list[Alert]:
    """Alerts whose rule is in quiet hours wait (unqueued) until the hours end."""
    rules = effective_rules([alert.endpoint for alert in alerts])
    return [alert for alert in alerts if not rules[alert.endpoint_id].is_quiet(now)]


def compose(alerts: Sequence[Alert], now: datetime) -> Message:
    """One alert's message, or a digest of a job's alerts."""
    job = alerts[0].job
    if len(alerts) == 1:
        subject = f"[Cronicorn] {_ref(alerts[0])} {_headline(alerts[0].kind)}"
    else:
        counts = Counter(alert.kind for alert in alerts)
        summary = ", ".join(f"{n} {kind}" for kind, n in counts.items())
        subject = f"[Cronicorn] {job.name}: {len(alerts)} endpoints changed ({summary})"
    payload = {
        "kind": "alert" if len(alerts) == 1 else "digest",
        "tenant": job.tenant.name,
        "job": job.name,
        "sent_at": now.isoformat(),
        "alerts": [
            {
                "endpoint": _ref(alert),
                "endpoint_id": alert.endpoint_id,
                "event": alert.kind,
                "detail": alert.detail,
                "at": alert.created_at.isoformat(),
            }
            for alert in alerts
        ],
    }
    body = "\n".join(f"{_ref(alert)} {alert.kind}: {alert.detail}" for alert in alerts)
    return Message(subject=subject, body=body, payload=payload)


def _ref(alert: Alert) -> str:
    # An alert's job is its endpoint's (both loaded with the alert): no query per alert.
    return f"{alert.job.name}/{alert.endpoint.name}"


def _headline(kind: str) -> str:
    return {
        AlertKind.FAILING: "is failing",
        AlertKind.RECOVERED: "recovered",
        AlertKind.PAUSED: "was paused",
        AlertKind.STALE: "has stopped running",
    }[AlertKind(kind)]


# --- 3. Deliver -----------------------------------------------------------------------


def deliver_due(*, now: datetime) -> tuple[int, int]:
    """Attempt the deliveries due; returns (sent, failed attempts). A channel that fails
    is not tried again in the same cycle, so one dead channel costs one timeout a cycle."""
    due = list(
        Delivery.objects.filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at")  # notifications_delivery_due
        .values_list("pk", "channel_id", "next_attempt_at")[:DELIVERY_BATCH]
    )
    sent = failed = 0
    broken: set[int] = set()
    lease = timedelta(seconds=settings.CRONICORN_NOTIFY_TIMEOUT_SECONDS + 30)
    for pk, channel_id, next_attempt_at in due:
        if channel_id in broken:
            continue
        # Take it: a sender that dies mid-send leaves it to be retried after the lease.
        if not Delivery.objects.filter(
            pk=pk, status=DeliveryStatus.PENDING, next_attempt_at=next_attempt_at
        ).update(next_attempt_at=now + lease):
            continue
        delivery = Delivery.objects.select_related("channel__tenant").get(pk=pk)
        if attempt(delivery, now=now):
            sent += 1
        else:
            failed += 1
            broken.add(channel_id)
    return sent, failed


def attempt(delivery: Delivery, *, now: datetime, retry: bool = True) -> bool:
    """Send once and record the attempt (at ``now`` plus the time it took); True when it
    went through."""
    channel = delivery.channel
    started = time.monotonic()
    try:
        send(channel, Message(delivery.subject, delivery.body, delivery.payload))
        error = ""
    except DeliveryError as exc:
        error = str(exc)
    at = now + timedelta(seconds=time.monotonic() - started)
    number = delivery.attempts + 1
    with transaction.atomic():
        DeliveryAttempt.objects.create(
            delivery=delivery,
            number=number,
            at=at,
            ok=not error,
            duration_ms=round((time.monotonic() - started) * 1000),
            error=error,
        )
        if error:
            _record_failure(delivery, channel, number, error, at, retry=retry)
        else:
            _record_success(delivery, channel, number, at)
    return not error


def _record_success(delivery: Delivery, channel: Channel, number: int, at: datetime) -> None:
    Delivery.objects.filter(pk=delivery.pk).update(
        status=DeliveryStatus.SENT, attempts=number, sent_at=at, last_error=""
    )
    Channel.objects.filter(pk=channel.pk).update(
        consecutive_failures=0, failing_since=None, last_error=""
    )
    logger.info("alert sent on channel %s: %s", channel, delivery.subject)


def _record_failure(
    delivery: Delivery, channel: Channel, number: int, error: str, at: datetime, *, retry: bool
) -> None:
    gave_up = not retry or number >= settings.CRONICORN_NOTIFY_MAX_ATTEMPTS
    Delivery.objects.filter(pk=delivery.pk).update(
        status=DeliveryStatus.FAILED if gave_up else DeliveryStatus.PENDING,
        attempts=number,
        next_attempt_at=at + backoff(number),
        last_error=error,
    )
    Channel.objects.filter(pk=channel.pk).update(
        consecutive_failures=F("consecutive_failures") + 1, last_error=error
    )
    Channel.objects.filter(
        pk=channel.pk,
        failing_since__isnull=True,
        consecutive_failures__gte=settings.CRONICORN_NOTIFY_CHANNEL_FAILING_AFTER,
    ).update(failing_since=at)
    then = "gave up" if gave_up else f"next attempt in {_words(backoff(number))}"
    logger.warning(
        "alert delivery failed on channel %s (attempt %d): %s; %s", channel, number, error, then
    )


def backoff(attempts: int) -> timedelta:
    """Exponential: the base, then twice as long after each failed attempt, capped."""
    base = timedelta(seconds=settings.CRONICORN_NOTIFY_RETRY_SECONDS)
    return min(base * 2 ** (attempts - 1), BACKOFF_CAP)


# --- Test message ---------------------------------------------------------------------


def send_test_message(channel: Channel, *, now: datetime) -> Delivery:
    """Send a test message now (``test_channel``, the admin button); recorded like an
    alert's delivery, not retried. The caller reads ``status`` and ``last_error``."""
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
        next_attempt_at=now,
        created_at=now,
    )
    attempt(delivery, now=now, retry=False)
    delivery.refresh_from_db()
    return delivery


def _words(delta: timedelta) -> str:
    return describe_duration(delta.total_seconds() * 1000)
