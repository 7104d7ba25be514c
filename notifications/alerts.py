"""The notify cycle: detect state changes, group them into messages, send them.

It runs apart from the runs (the Celery task ``cronicorn.notify_cycle`` on the
``notify`` queue, and a loop of ``runscheduler``), so a slow or dead channel never
delays a run. Each step is safe to run in several processes at once: every state
change is a conditional update whose row count says who won.

1. ``detect_changes`` first reads the engine's outbox (``endpoints.Flip``: each failure
   streak a run ended, with its length), so a streak that began and ended between two
   cycles is told ("is failing, then recovered"); then it compares each endpoint that
   could have changed (failing, paused, or with an open alert: partial indexes, so the
   cost follows those, not the fleet) with its ``AlertState`` and records an ``Alert``
   per change: failing after N failures, recovered, paused, stale. One per state
   change, never one per run.
1b. ``remind_and_escalate``: reminders while failing and not acknowledged (per rule, off
   by default) and one escalation to the rule's channel; ``acknowledge`` stops both.
2. ``queue_deliveries`` turns a job's alerts into one message per channel once the job
   has been quiet for ``CRONICORN_ALERT_DIGEST_SECONDS``: one alert alone, several as a
   digest, so a shared dependency going down sends one message, not fifty.
3. ``notifications.delivery.deliver_due`` sends what is due, each channel in its own
   sender thread with a deadline, so a hanging channel delays no other channel, tenant
   or cycle.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from endpoints.choices import BREAKER_SOURCES
from endpoints.governor import CALENDAR, ENDED, MAX_PLANNABLE_MS, ONCE, PAUSED, WINDOW
from endpoints.models import Endpoint, Flip, Heartbeat, JobStatus, Run, RunStatus
from endpoints.wording import count_words, duration_words
from notifications.delivery import Clock, deliver_due
from notifications.models import (
    MAX_STALE_FACTOR,
    Alert,
    AlertKind,
    AlertRule,
    AlertState,
    Channel,
    Delivery,
)
from notifications.transports import Message

logger = logging.getLogger("cronicorn.notify")

FLIP_BATCH = 500
# A digest wait never holds a job's first alert longer than this.
DIGEST_MAX_WAIT = timedelta(minutes=2)


@dataclass(frozen=True)
class CycleResult:
    alerts: int
    deliveries: int
    sent: int
    failed: int


def notify_cycle(*, now: datetime, wait: float | None = None) -> CycleResult:
    clock = Clock(now)  # from the cycle's start: sends are stamped at their real time
    alerts = detect_changes(now=now)
    alerts += remind_and_escalate(now=now)
    deliveries = queue_deliveries(now=now)
    sent, failed = deliver_due(now=now, wait=wait, clock=clock)
    result = CycleResult(len(alerts), deliveries, sent, failed)
    Heartbeat.beat("notify", now=now, **asdict(result))
    return result


# --- 1. Detect ------------------------------------------------------------------------


def detect_changes(*, now: datetime) -> list[Alert]:
    """Record one Alert per state change since the last cycle.

    Streaks the engine saw end are read first, from its outbox (``endpoints.Flip``); then
    the endpoints are sampled for what is still going on (a streak at its threshold, a
    pause, staleness). In that order, a streak that ended after the outbox was read shows
    in the sample as still failing or not at all, and its flip is read next cycle: none is
    lost, none is told twice (see ``_changes`` for the race with a concurrent cycle)."""
    alerts = consume_flips(now=now)
    ids = _candidates(now)
    if not ids:
        return alerts
    # States before endpoints: a state can only be newer than what it was read as if
    # another cycle changed it, and every change below is conditional on the value read.
    states = _states_of(ids)
    endpoints = list(
        Endpoint.objects.filter(pk__in=ids).select_related("job__tenant").order_by("pk")
    )
    rules = effective_rules(endpoints)
    for endpoint in endpoints:
        alerts.extend(_changes(endpoint, states[endpoint.pk], rules[endpoint.pk], now))
    return alerts


def consume_flips(*, now: datetime) -> list[Alert]:
    """Raise the alerts of the streaks that ended (the engine's outbox) and delete them,
    in one transaction; rows another cycle is consuming are skipped, not waited for."""
    with transaction.atomic():
        flips = list(Flip.objects.select_for_update(skip_locked=True).order_by("pk")[:FLIP_BATCH])
        if not flips:
            return []
        endpoints = Endpoint.objects.select_related("job__tenant").in_bulk(
            {flip.endpoint_id for flip in flips}
        )
        states = _states_of(list(endpoints))
        rules = effective_rules(endpoints.values())
        alerts: list[Alert] = []
        for flip in flips:  # per endpoint in the order its runs ended them
            endpoint = endpoints[flip.endpoint_id]
            state, rule = states[endpoint.pk], rules[endpoint.pk]
            alerts.extend(_streak_ended(endpoint, state, rule, flip, now))
        Flip.objects.filter(pk__in=[flip.pk for flip in flips]).delete()
    return alerts


def _streak_ended(
    endpoint: Endpoint, state: AlertState, rule: AlertRule, flip: Flip, now: datetime
) -> list[Alert]:
    live = _live(endpoint, rule)
    if state.failing:
        if _flip(state, now, failing=False, **EPISODE_CLEARED) and live and rule.on_recovery:
            return [_alert(endpoint, AlertKind.RECOVERED, _recovery_detail(endpoint, flip), now)]
        return []
    if not live or flip.failures < rule.after_failures:
        return []
    # The whole streak fell between two samples: it is told all the same, both ways.
    alerts = [
        _alert(endpoint, AlertKind.FAILING, _failure_detail(endpoint, flip.failures, flip.at), now)
    ]
    if rule.on_recovery:
        alerts.append(_alert(endpoint, AlertKind.RECOVERED, _recovery_detail(endpoint, flip), now))
    return alerts


def _candidates(now: datetime) -> list[int]:
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
    return sorted(ids)


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
            "pk", "baseline_interval_ms", "slot__last_run_at", "created_at"
        ):
            late = now - (last_run_at or created_at)
            if late > _stale_after(interval_ms or 0, rule.stale_factor):
                found.append(pk)
    return found


def _stale_after(interval_ms: int, factor: int) -> timedelta:
    # Bounded: a rule stored before MAX_STALE_FACTOR must not overflow the whole cycle.
    return timedelta(milliseconds=min(interval_ms * factor, MAX_PLANNABLE_MS * MAX_STALE_FACTOR))


def _states_of(ids: Sequence[int]) -> dict[int, AlertState]:
    """Each endpoint's alert state, created (all clear) the first time it is a candidate.
    A state is its endpoint's tenant's: once the endpoint moved to another tenant (its job
    did, or it moved to a job of another tenant) it starts over, all clear, so the new
    tenant is told afresh what its endpoint is going through and never inherits the old
    tenant's episode (its acknowledgement and who gave it, its reminders)."""
    tenants = dict(Endpoint.objects.filter(pk__in=ids).values_list("pk", "job__tenant_id"))
    states = AlertState.objects.in_bulk(list(tenants))
    moved = [pk for pk, state in states.items() if state.tenant_id != tenants[pk]]
    for pk in moved:
        told = states[pk].tenant_id
        # Conditional on the tenant read: a concurrent cycle starts it over once.
        same = Q(tenant_id=told) if told is not None else Q(tenant__isnull=True)
        AlertState.objects.filter(same, pk=pk).update(
            tenant_id=tenants[pk], **(STATE_CLEARED if told is not None else {})
        )
    if missing := [pk for pk in tenants if pk not in states]:
        with transaction.atomic():
            # Locked first: a delete in flight is waited for and its endpoint left out; a
            # state made for it would break its foreign key, and the whole cycle with it.
            alive = Endpoint.objects.select_for_update().filter(pk__in=missing).order_by("pk")
            # ignore_conflicts: another cycle may create the same rows at the same moment.
            AlertState.objects.bulk_create(
                [
                    AlertState(endpoint_id=pk, tenant_id=tenants[pk])
                    for pk in alive.values_list("pk", flat=True)
                ],
                ignore_conflicts=True,
            )
    if moved or missing:
        states.update(AlertState.objects.in_bulk([*moved, *missing]))
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


# What a failing episode's end clears: its reminders, escalation and acknowledgement.
EPISODE_CLEARED: dict[str, Any] = {
    "failing_since": None,
    "reminded_at": None,
    "escalated_at": None,
    "acknowledged_at": None,
    "acknowledged_by": "",
    "breaker_told_at": None,
}
# A state started over (its endpoint moved to another tenant): nothing told there yet.
STATE_CLEARED: dict[str, Any] = {
    "failing": False,
    "stale": False,
    "paused_until_seen": None,
    **EPISODE_CLEARED,
}


def _changes(endpoint: Endpoint, state: AlertState, rule: AlertRule, now: datetime) -> list[Alert]:
    """The sampled changes. ``endpoint`` may be older than the truth by the time a flip is
    made (a concurrent cycle, a run ending), so each failing flip also checks, in its own
    UPDATE, that the endpoint is still as read: failing at the threshold, or recovered with
    no flip of the engine waiting (which would tell that recovery itself)."""
    alerts = []
    live = _live(endpoint, rule)
    if state.failing and not live:
        _flip(state, now, failing=False, **EPISODE_CLEARED)  # archived or rule off: silence
    elif not state.failing and live and endpoint.failure_count >= rule.after_failures:
        still = _endpoint_is(failure_count__gte=rule.after_failures)
        if _flip(state, now, still, failing=True, failing_since=now):
            alerts.append(
                _alert(
                    endpoint,
                    AlertKind.FAILING,
                    _failure_detail(endpoint, endpoint.failure_count),
                    now,
                )
            )
    elif state.failing and endpoint.failure_count == 0:
        # Ended without a flip: the failures were reset (reset_failures). That ends the
        # episode, its reminders and escalation: nothing says "failing" of an endpoint
        # without failures. Only once a run has really succeeded is it "recovered" (on-call
        # people trust that word); otherwise it closes silently: whoever reset it knows,
        # and a failure after the reset starts a new episode, told afresh.
        pending = Flip.objects.filter(endpoint_id=OuterRef("endpoint_id"))
        still = _endpoint_is(failure_count=0) & ~Q(Exists(pending))
        recovered = _last_run_succeeded(endpoint)
        if (
            _flip(state, now, still, failing=False, **EPISODE_CLEARED)
            and recovered
            and rule.on_recovery
        ):
            alerts.append(
                _alert(endpoint, AlertKind.RECOVERED, _recovery_detail(endpoint, None), now)
            )
    paused = endpoint.paused_until if live and endpoint.is_paused(now) else None
    if paused != state.paused_until_seen:
        alerts.extend(_pause_changed(endpoint, state, rule, paused, now))
    stale = live and _is_stale(endpoint, rule, now)
    if stale != state.stale and _flip(state, now, stale=stale):
        kind = AlertKind.STALE if stale else AlertKind.RECOVERED
        if stale or (live and rule.on_recovery):  # archived: silence, no "runs again"
            alerts.append(_alert(endpoint, kind, _stale_detail(endpoint, stale, now), now))
    return alerts


def _pause_changed(
    endpoint: Endpoint, state: AlertState, rule: AlertRule, paused: datetime | None, now: datetime
) -> list[Alert]:
    """A pause is told when it begins or moves. The breaker's is told once per failing
    episode: a failed probe re-opens it (a new pause) without a new alert, and its
    opening starts an episode if none is open, so the probe that closes it is told as a
    recovery even below the rule's failure count (``_streak_ended``)."""
    breaker = paused is not None and endpoint.pause_source in BREAKER_SOURCES
    if not (paused and rule.on_pause) or (breaker and state.breaker_told_at is not None):
        _flip(state, now, paused_until_seen=paused)
        return []
    episode = {"failing": True, "failing_since": state.failing_since or now, "breaker_told_at": now}
    if not _flip(state, now, paused_until_seen=paused, **(episode if breaker else {})):
        return []
    return [_alert(endpoint, AlertKind.PAUSED, _pause_detail(endpoint, now), now)]


def _live(endpoint: Endpoint, rule: AlertRule) -> bool:
    """Whether the endpoint's alerts are told at all: not when it or its job is archived
    (stopped for good: silence from then on) or its rule is off. ``endpoint.job`` is
    loaded with it by every caller."""
    archived = endpoint.archived_at is not None or endpoint.job.status == JobStatus.ARCHIVED
    return not archived and rule.enabled


def _endpoint_is(**lookups: Any) -> Q:
    """A condition on the state's endpoint as an EXISTS, not a join: Django turns an
    UPDATE with a join into ``pk IN (subquery)``, which PostgreSQL does not re-check
    against a row another cycle changed meanwhile, losing the state's own condition."""
    return Q(Exists(Endpoint.objects.filter(pk=OuterRef("pk"), **lookups)))


def _flip(state: AlertState, now: datetime, *conditions: Q, **change: Any) -> bool:
    """Move the state's first field in ``change`` from what we read (the rest follow it)
    when ``conditions`` still hold; False if another cycle got there first (then it raised
    the alert) or the endpoint moved on."""
    field = next(iter(change))
    won = AlertState.objects.filter(
        *conditions, pk=state.pk, **{field: getattr(state, field)}
    ).update(changed_at=now, **change)
    if won:
        for name, new in change.items():
            setattr(state, name, new)
    return bool(won)


def _is_stale(endpoint: Endpoint, rule: AlertRule, now: datetime) -> bool:
    """Not run for ``stale_factor`` intervals, counted from its last run or, when its run
    policy or a pause put its next run off (a window, a one-off's time, the pause's end),
    from that run: a rest asked for is not the scheduler being stuck, nor is the end of
    its runs, nor a paused job (its runs stay planned, unclaimed, until it resumes)."""
    if not rule.stale_factor or endpoint.baseline_interval_ms is None:
        return False
    if endpoint.next_run_source == ENDED or endpoint.job.status != JobStatus.ACTIVE:
        return False
    since = endpoint.last_run_at or endpoint.created_at
    if (
        endpoint.next_run_source in (WINDOW, CALENDAR, ONCE, PAUSED)
        and endpoint.next_run_at is not None
    ):
        since = max(since, endpoint.next_run_at)
    return now - since > _stale_after(endpoint.baseline_interval_ms, rule.stale_factor)


def _alert(
    endpoint: Endpoint, kind: AlertKind, detail: str, now: datetime, channel_id: int | None = None
) -> Alert:
    return Alert.objects.create(
        tenant_id=endpoint.job.tenant_id,
        job_id=endpoint.job_id,
        endpoint=endpoint,
        kind=kind,
        detail=detail,
        channel_id=channel_id,
        created_at=now,
    )


def _failure_detail(endpoint: Endpoint, failures: int, before: datetime | None = None) -> str:
    # A skipped slot (found later than its catch-up window) counts no failure: not named.
    not_failed = [RunStatus.SUCCESS, RunStatus.RUNNING, RunStatus.SKIPPED]
    runs = Run.objects.filter(endpoint=endpoint).exclude(status__in=not_failed)
    if before is not None:
        runs = runs.filter(started_at__lt=before)
    run = runs.order_by("-started_at").first()  # endpoints_run_history
    text = f"{count_words(failures, 'failed run')} in a row"
    if run is not None:
        code = f" HTTP {run.status_code}" if run.status_code else ""
        text += f"; last: {run.status}{code}: {run.error or 'no error text'}"
    return text


def _last_run_succeeded(endpoint: Endpoint) -> bool:
    finished = Run.objects.filter(endpoint=endpoint).exclude(status=RunStatus.RUNNING)
    run = finished.order_by("-started_at").only("status").first()
    # No finished run at all: nothing failed that a success must answer.
    return run is None or run.status == RunStatus.SUCCESS


def _recovery_detail(endpoint: Endpoint, flip: Flip | None) -> str:
    run = Run.objects.filter(endpoint=endpoint, status="success").order_by("-started_at").first()
    code = f" (HTTP {run.status_code})" if run and run.status_code else ""
    after = f" after {count_words(flip.failures, 'failed run')} in a row" if flip else ""
    return f"succeeded again{code}{after}"


def _pause_detail(endpoint: Endpoint, now: datetime) -> str:
    reason = endpoint.pause_reason or "no reason given"
    return f"paused {endpoint.pause_words(now)}: {reason}"


def _stale_detail(endpoint: Endpoint, stale: bool, now: datetime) -> str:
    if not stale:
        return "runs on schedule again"
    since = endpoint.last_run_at or endpoint.created_at
    return f"has not run for {_words(now - since)}"


# --- 1b. Remind and escalate ----------------------------------------------------------


def remind_and_escalate(*, now: datetime) -> list[Alert]:
    """Reminders while an endpoint stays failing and nobody acknowledged it (every
    ``remind_every_minutes`` of its rule), and one escalation to the rule's
    ``escalate_to`` channel ``escalate_after_minutes`` after the failing alert. Each is a
    conditional update on the state as read, so concurrent cycles raise each once."""
    states = AlertState.objects.in_bulk(
        list(
            AlertState.objects.filter(failing=True, acknowledged_at__isnull=True).values_list(
                "pk", flat=True
            )  # notifications_state_open
        )
    )
    if not states:
        return []
    endpoints = Endpoint.objects.filter(pk__in=list(states)).select_related("job__tenant")
    rules = effective_rules(endpoints)
    alerts: list[Alert] = []
    for endpoint in endpoints:
        rule, state = rules[endpoint.pk], states[endpoint.pk]
        if not _live(endpoint, rule):
            continue
        since = state.failing_since or state.changed_at or now
        # Still failing when it is told: failures reset since detection end the episode.
        open_episode = AlertState.objects.filter(
            _endpoint_is(failure_count__gt=0),
            pk=state.pk,
            failing=True,
            acknowledged_at__isnull=True,
            failing_since=state.failing_since,
        )
        every = timedelta(minutes=rule.remind_every_minutes)
        due = every and now - (state.reminded_at or since) >= every
        if due and open_episode.filter(reminded_at=state.reminded_at).update(reminded_at=now):
            detail = f"failing for {_words(now - since)}, not acknowledged"
            alerts.append(_alert(endpoint, AlertKind.REMINDER, detail, now))
        after = timedelta(minutes=rule.escalate_after_minutes)
        due = (
            after
            and rule.escalate_to_id is not None
            and state.escalated_at is None
            and now - since >= after
        )
        if due and open_episode.filter(escalated_at__isnull=True).update(escalated_at=now):
            detail = f"failing for {_words(now - since)}, nobody acknowledged it"
            alerts.append(_alert(endpoint, AlertKind.ESCALATED, detail, now, rule.escalate_to_id))
    return alerts


def acknowledge(endpoint: Endpoint, *, now: datetime, by: str) -> AlertState | None:
    """Acknowledge the endpoint's failing episode: no more reminders, no escalation, until
    it recovers (the next failing episode alerts afresh). None when it is not failing (or
    its alerts have not said so yet): there is nothing to acknowledge. The admin, the API
    and MCP all call this."""
    AlertState.objects.filter(pk=endpoint.pk, failing=True, acknowledged_at__isnull=True).update(
        acknowledged_at=now, acknowledged_by=by[:200]
    )
    state = AlertState.objects.filter(pk=endpoint.pk, failing=True).first()
    if state is not None:
        logger.info("alerts of %s acknowledged by %s", endpoint, state.acknowledged_by)
    return state


# --- 2. Queue -------------------------------------------------------------------------


def queue_deliveries(*, now: datetime) -> int:
    """Turn each quiet job's new alerts into one message per enabled channel."""
    pending = Alert.objects.filter(queued_at__isnull=True)  # notifications_alert_unqueued
    made = 0
    for tenant_id, job_id, oldest, newest in _pending_jobs(pending):
        settled = now - newest >= timedelta(seconds=settings.CRONICORN_ALERT_DIGEST_SECONDS)
        if settled or now - oldest >= DIGEST_MAX_WAIT:
            made += _queue_job(tenant_id, job_id, now)
    return made


def _pending_jobs(pending: Any) -> list[tuple[int, int, datetime, datetime]]:
    """Each job's waiting alerts, apart per tenant they were raised for: a job moved to
    another tenant may have alerts of both, and each tenant is told only its own."""
    by_job: dict[tuple[int, int], list[datetime]] = defaultdict(list)
    for tenant_id, job_id, created_at in pending.values_list("tenant_id", "job_id", "created_at"):
        by_job[tenant_id, job_id].append(created_at)
    return [(*key, min(times), max(times)) for key, times in by_job.items()]


def _queue_job(tenant_id: int, job_id: int, now: datetime) -> int:
    with transaction.atomic():
        # Another cycle may be queueing the same job: skip what it holds.
        alerts = list(
            Alert.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(tenant_id=tenant_id, job_id=job_id, queued_at__isnull=True)
            .select_related("endpoint", "job", "tenant")
            .order_by("created_at", "pk")
        )
        alerts = _outside_quiet_hours(alerts, now)
        if not alerts:
            return 0
        Alert.objects.filter(pk__in=[a.pk for a in alerts]).update(queued_at=now)
        enabled = Channel.objects.filter(tenant_id=tenant_id, enabled=True)
        made = 0
        if everyone := [alert for alert in alerts if alert.channel_id is None]:
            made += _make_deliveries(enabled.filter(escalation_only=False), everyone, now)
        escalations: dict[int, list[Alert]] = defaultdict(list)
        for alert in alerts:
            if alert.channel_id is not None:
                escalations[alert.channel_id].append(alert)
        for channel_id, told in escalations.items():
            made += _make_deliveries(enabled.filter(pk=channel_id), told, now)
        return made


def _make_deliveries(channels: Any, alerts: list[Alert], now: datetime) -> int:
    message = compose(alerts, now)
    made = 0
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
        made += 1
    return made


def _outside_quiet_hours(alerts: list[Alert], now: datetime) -> list[Alert]:
    """Alerts whose rule is in quiet hours wait (unqueued) until the hours end."""
    rules = effective_rules([alert.endpoint for alert in alerts])
    return [alert for alert in alerts if not rules[alert.endpoint_id].is_quiet(now)]


def compose(alerts: Sequence[Alert], now: datetime) -> Message:
    """One alert's message, or a digest of a job's alerts. Titles count endpoints, not
    alerts: an endpoint that failed and recovered within the digest wait is one endpoint
    ("is failing, then recovered"), counted in a digest by where it ended up."""
    job = alerts[0].job
    by_endpoint: dict[int, list[Alert]] = defaultdict(list)
    for alert in alerts:
        by_endpoint[alert.endpoint_id].append(alert)
    if len(by_endpoint) == 1:
        headlines = ", then ".join(_headline(alert.kind) for alert in alerts)
        subject = f"[Cronicorn] {_ref(alerts[0])} {headlines}"
    else:
        counts = Counter(changes[-1].kind for changes in by_endpoint.values())
        summary = ", ".join(f"{n} {kind}" for kind, n in counts.items())
        subject = f"[Cronicorn] {job.name}: {len(by_endpoint)} endpoints changed ({summary})"
    payload = {
        "kind": "alert" if len(alerts) == 1 else "digest",
        "tenant": alerts[0].tenant.name,  # raised for it (its job may have moved since)
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
        AlertKind.REMINDER: "is still failing",
        AlertKind.ESCALATED: "is still failing, nobody acknowledged",
    }[AlertKind(kind)]


def _words(delta: timedelta) -> str:
    return duration_words(delta.total_seconds() * 1000)
