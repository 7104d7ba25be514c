"""Every change a person (or the planner) makes to an endpoint, a job or a tenant.

The admin, the REST API, the MCP tools, the commands, the import and the planner's tools
all call these functions; none of them writes these fields another way. Each one plans
through the governor at once (DESIGN.md "Manual actions"): nothing waits for an old lease
or an old ``next_run_at``.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, cast

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import CASCADE, SET_NULL, Model, Q, QuerySet
from django.db.models.deletion import get_candidate_relations_to_delete
from django.db.models.fields.reverse_related import ForeignObjectRel
from django.utils import timezone

from endpoints import audit, breaker, validation
from endpoints.audit import Actor
from endpoints.engine import metrics
from endpoints.engine.executor import perform_request
from endpoints.engine.logs import log_event
from endpoints.engine.outcomes import (
    NO_HINT,
    RESULT_STATUS,
)
from endpoints.engine.running import judged, request_for
from endpoints.governor import (
    EndpointSchedule,
    Plan,
    nudged,
    plan_after_edit,
)
from endpoints.models import (
    Endpoint,
    HintHistory,
    HintKind,
    Job,
    JobStatus,
    PauseSource,
    Run,
    RunStatus,
    RunTrigger,
    Slot,
    Source,
    Tenant,
)
from endpoints.secrets import strip_userinfo
from endpoints.validation import quota_problem, reason_problem
from endpoints.wording import delta_words, duration_words


class OperationRefused(Exception):
    """A manual operation that cannot proceed; the message says why and what to do."""


def recompute_next_run(endpoint: Endpoint, *, now: datetime) -> Plan:
    """Plan through the governor now and store it (after a pause, a resume, a change of
    hints), as an edit is (``replan_after_edit``): start to start from the last run, so
    it never postpones a run, and says what the explanation and the preview say; a
    one-off missed meanwhile runs now."""
    return replan_after_edit(endpoint, now=now)


def save_endpoint(
    endpoint: Endpoint,
    *,
    now: datetime,
    changed: Sequence[str] | None,
    schedule_changed: bool,
    actor: Actor = Actor.SYSTEM,
) -> None:
    """Save an endpoint its form validated (the admin, the API): a new one whole
    (``changed`` None), an existing one only in the fields the person changed, since
    the scheduler writes the state fields meanwhile. A new endpoint, or one whose
    schedule changed, is planned as an edit (``replan_after_edit``).

    A new endpoint, or one moved into another tenant's job, counts against that tenant's
    quota: checked under a lock on the tenant's row, so concurrent saves (any number of
    web processes) are counted one after another and never pass the quota together."""
    with transaction.atomic():
        if changed is None or "job" in changed:
            _reserve_quota(endpoint)
        before = audit.stored_values(endpoint, changed)
        if changed is None:
            endpoint.save()
        elif changed:
            endpoint.save(update_fields=[*changed, "updated_at"])
        audit.record_save(endpoint, before, changed, actor=actor, now=now)
    if changed is None or schedule_changed:
        replan_after_edit(endpoint, now=now)


def save_job(
    job: Job, *, now: datetime, changed: Sequence[str] | None, actor: Actor = Actor.SYSTEM
) -> None:
    """Save a job its form validated, new (``changed`` None) or in the fields changed;
    a changed run policy (its endpoints' defaults: windows, an active period) replans
    each of its endpoints."""
    with transaction.atomic():
        before = audit.stored_values(job, changed)
        if changed is None:
            job.save()
        elif changed:
            job.save(update_fields=[*changed, "updated_at"])
        audit.record_save(job, before, changed, actor=actor, now=now)
    if changed and "run_policy" in changed and before["run_policy"] != job.run_policy:
        replan_job(job, now=now)


def save_tenant(
    tenant: Tenant, *, now: datetime, changed: Sequence[str] | None, actor: Actor = Actor.SYSTEM
) -> None:
    """Save a tenant its form validated (the admin), new or in the fields changed."""
    with transaction.atomic():
        before = audit.stored_values(tenant, changed)
        if changed is None:
            tenant.save()
        elif changed:
            tenant.save(update_fields=changed)
        audit.record_save(tenant, before, changed, actor=actor, now=now)


def _reserve_quota(endpoint: Endpoint) -> None:
    """Raise ValidationError (on ``job``) unless the endpoint's tenant has room for it.
    Called inside the saving transaction; the row lock is held until it commits."""
    if endpoint.archived_at is not None:
        return
    tenant_id = Job.objects.values_list("tenant_id", flat=True).get(pk=endpoint.job_id)
    if endpoint.pk is not None:
        stored = Endpoint.objects.filter(pk=endpoint.pk).values_list("job__tenant_id", flat=True)
        if stored.first() == tenant_id:
            return  # a move within the tenant changes nothing
    tenant = Tenant.objects.select_for_update().only("name", "max_endpoints").get(pk=tenant_id)
    used = Endpoint.objects.live().filter(job__tenant_id=tenant_id).count()
    if problem := quota_problem(tenant, live_after=used + 1):
        raise ValidationError({"job": problem})


def replan_after_edit(endpoint: Endpoint, *, now: datetime) -> Plan:
    """Plan and store the next run after the endpoint was created or its schedule edited
    (interval, cron, time zone, min, max): start-to-start from its last run, or now if
    that has passed (``governor.plan_after_edit``). Every interface that saves such an
    edit calls this after ``Endpoint.save``."""
    plan = _plan_keeping_retry(
        endpoint, lambda schedule: plan_after_edit(now, endpoint.last_run_at, schedule), now=now
    )
    _store_plan(endpoint, plan)
    return plan


def replan_job(job: Job, *, now: datetime) -> None:
    """Plan each live endpoint of a job as an edit, after the job's run policy (their
    defaults: windows, an active period) changed."""
    for endpoint in Endpoint.objects.live().filter(job=job).select_related("job__tenant"):
        replan_after_edit(endpoint, now=now)


def _plan_keeping_retry(
    endpoint: Endpoint, planner: Callable[[EndpointSchedule], Plan], *, now: datetime
) -> Plan:
    """Plan outside a run (an edit, a hint, a pause or resume) with the retry the engine
    planned for the last slot, weighed again as at the run's end: it stays if it still
    comes first and the run policy as it is now still allows the attempt, so nothing
    drops or postpones it (trap 18). If it goes, the slot's retries end there as a
    run's end would end them: the slot counts as failed once, the breaker opens if that
    count reaches its threshold, and the next run starts a new slot (attempt 1). A retry
    in flight is left to its own outcome."""
    schedule = EndpointSchedule.from_endpoint(endpoint)
    attempt = endpoint.retry_attempt
    if attempt < 2 or endpoint.claim_token is not None:
        return planner(schedule)
    if (retry := held_schedule(endpoint)).retry_at is not None:
        plan = planner(retry)
        if plan.source == Source.RETRY:
            return plan
    failures = endpoint.failure_count + 1
    if not Endpoint.objects.filter(pk=endpoint.pk, retry_attempt=attempt).update(
        failure_count=failures, retry_attempt=0, retry_of_run=None
    ):
        return planner(schedule)  # a run ended the slot's retries meanwhile
    endpoint.failure_count, endpoint.retry_attempt, endpoint.retry_of_run = failures, 0, None
    _open_breaker_at(endpoint, failures, now=now)
    return planner(replace(schedule, failure_count=failures, paused_until=endpoint.paused_until))


def _open_breaker_at(endpoint: Endpoint, failures: int, *, now: datetime) -> None:
    """The breaker, when the slot whose retries a plan ended brings the failed slots to
    its threshold, as at a run's end."""
    policy = endpoint.policy
    last = (
        Run.objects.filter(endpoint_id=endpoint.pk)
        .order_by("-started_at")
        .values_list("error", "status")
        .first()
    )
    reason = breaker.failed_slots_reason(
        policy, failures, (last[0] or last[1]) if last else "failure"
    )
    if reason and (text := breaker.open_breaker(endpoint.pk, policy, now=now, reason=reason)):
        endpoint.refresh_from_db(fields=["paused_until", "pause_reason", "pause_source"])
        log_event(logging.WARNING, text, endpoint_id=endpoint.pk)


def held_schedule(endpoint: Endpoint) -> EndpointSchedule:
    """The endpoint's schedule as the scheduler holds it: with the retry the engine
    planned for the last slot while it is pending (not in flight, and still allowed by
    the run policy), as ``retry_at``. What the interfaces say about the next run (the
    explanation, the preview) plans from this, as every plan made outside a run does."""
    schedule = EndpointSchedule.from_endpoint(endpoint)
    attempt = endpoint.retry_attempt
    if (
        attempt < 2
        or endpoint.claim_token is not None
        or endpoint.next_run_source != Source.RETRY
        or endpoint.next_run_at is None
        or attempt > endpoint.policy.retry_attempts
    ):
        return schedule
    return replace(schedule, retry_at=endpoint.next_run_at, retry_attempt=attempt - 1)


def _store_plan(endpoint: Endpoint, plan: Plan) -> None:
    """Store the plan in the endpoint's slot; an archived endpoint's slot gets no next run."""
    at, source = (None, "") if endpoint.archived_at else (plan.next_run_at, plan.source)
    Slot.objects.filter(pk=endpoint.pk).update(next_run_at=at, next_run_source=source)
    endpoint.next_run_at, endpoint.next_run_source = at, source


def _nudge_earlier(endpoint: Endpoint, now: datetime) -> Plan:
    """A hint may bring the next run forward, never push an already planned run back;
    the new cadence takes over from that run on. Planned as an edit is, start to start
    from the last run (``plan_after_edit``). A pending retry was weighed by the
    governor with the rest (``_plan_keeping_retry``): its plan stands."""
    retrying = endpoint.next_run_source == Source.RETRY and endpoint.claim_token is None
    plan = _plan_keeping_retry(
        endpoint, lambda schedule: plan_after_edit(now, endpoint.last_run_at, schedule), now=now
    )
    current = endpoint.next_run_at
    if not retrying and current is not None:
        kept = nudged(Plan(current, endpoint.next_run_source), plan)
        if kept is not plan:
            return kept
    _store_plan(endpoint, plan)
    return plan


def _history(
    endpoint: Endpoint, kind: str, *, now: datetime, actor: Actor, **values: Any
) -> HintHistory:
    return HintHistory.objects.create(
        endpoint=endpoint,
        kind=kind,
        created_at=now,
        created_by_id=actor.user_id,
        session_id=actor.session_id,
        **values,
    )


def _refuse_bad_reason(reason: str) -> None:
    # A reason is stored as given (hint history, pause reason): NUL would stop PostgreSQL.
    if problem := reason_problem(reason):
        raise OperationRefused(problem)


def _refuse_archived(endpoint: Endpoint, action: str) -> None:
    if endpoint.archived_at is not None:
        raise OperationRefused(
            f"{endpoint} is archived, so it cannot {action}; archived endpoints never run."
        )


def run_now(endpoint: Endpoint, *, now: datetime, actor: Actor = Actor.SYSTEM) -> None:
    """Make the endpoint due now, so the next tick runs it through the normal path."""
    _refuse_archived(endpoint, "run")
    if endpoint.job.status != JobStatus.ACTIVE:
        raise OperationRefused(
            f"Job {endpoint.job.name} is {endpoint.job.status}; resume the job first, "
            "or use Test to call the endpoint once without scheduling."
        )
    if endpoint.is_paused(now):
        raise OperationRefused(
            f"{endpoint} is paused {endpoint.pause_words(now)}; "
            "resume it first, or use Test to call it once while paused."
        )
    with transaction.atomic():
        _refuse_within_floor(endpoint, now)
        # A lease that has run out (its worker died) does not block: it is released here.
        lease_free = Q(claim_token__isnull=True) | Q(locked_until__lte=now)
        updated = Slot.objects.filter(lease_free, pk=endpoint.pk).update(
            next_run_at=now, next_run_source=Source.MANUAL, claim_token=None, locked_until=None
        )
    if not updated:
        raise OperationRefused(_in_flight_message(endpoint, now))
    endpoint.next_run_at, endpoint.next_run_source = now, Source.MANUAL
    audit.record(actor, endpoint, "run-now", now=now)
    log_event(logging.INFO, f"run now requested by {actor}", endpoint_id=endpoint.pk)


TRIGGER_WORDS = {
    RunTrigger.SCHEDULED: "a scheduled run",
    RunTrigger.MANUAL: "a manual run",
    RunTrigger.TEST: "a test",
    RunTrigger.RETRY: "a retry",
    RunTrigger.FOLLOW_UP: "a follow-up",
    RunTrigger.BACKFILL: "a backfill run",
}


def _refuse_within_floor(endpoint: Endpoint, now: datetime) -> None:
    """Refuse a manual call of the endpoint (run now, a job's run now, a test) less than
    its tenant's floor (``Tenant.min_interval_ms``) after its last call of any kind, or
    after a run now still waiting for the scheduler: the floor bounds how often a
    tenant's targets are called, by hand too. Called in the operation's transaction: the
    lock on the endpoint's slot row makes two requests at once count one after another."""
    slot = Slot.objects.select_for_update().get(pk=endpoint.pk)
    last = (
        Run.objects.filter(endpoint_id=endpoint.pk)
        .order_by("-started_at")
        .values_list("started_at", "trigger")
        .first()
    )
    waiting = slot.next_run_at if slot.next_run_source == Source.MANUAL else None
    if waiting is not None and (last is None or waiting > last[0]):
        last = (waiting, "requested")
    floor = timedelta(milliseconds=endpoint.job.tenant.min_interval_ms)
    if last is None or now >= last[0] + floor:
        return
    at, trigger = last
    said = (
        f"has a manual run waiting to start (requested {delta_words(at - now)})"
        if trigger == "requested"
        else f"was called {delta_words(at - now)} ({TRIGGER_WORDS[RunTrigger(trigger)]})"
    )
    allowed = at + floor
    raise OperationRefused(
        f"{endpoint} {said}; tenant {endpoint.job.tenant.name} allows one call of an endpoint "
        f"every {duration_words(floor.total_seconds() * 1000)}, by hand too. The next manual "
        f"run or test is allowed at {allowed.isoformat(timespec='seconds')} "
        f"({delta_words(allowed - now)})."
    )


def _in_flight_message(endpoint: Endpoint, now: datetime) -> str:
    running = (
        Run.objects.filter(endpoint_id=endpoint.pk, status=RunStatus.RUNNING)
        .order_by("-started_at")
        .first()
    )
    if running is None:
        return f"{endpoint} is claimed and about to run; wait for that run to finish."
    started = delta_words(running.started_at - now)
    return f"{endpoint} is running now (run {running.pk} started {started}); wait for it to finish."


def test_endpoint(endpoint: Endpoint, *, now: datetime | None = None) -> Run:
    """Call the endpoint once now and record a ``test`` run, judged by its run policy's
    success criteria as a scheduled run is; the schedule is untouched.

    Allowed while paused (that is when people check an endpoint by hand).
    """
    _refuse_archived(endpoint, "be tested")
    started = now or timezone.now()
    with transaction.atomic():
        _refuse_within_floor(endpoint, started)
        run = Run.objects.create(
            endpoint=endpoint,
            trigger=RunTrigger.TEST,
            source=Source.MANUAL,
            scheduled_for=started,
            started_at=started,
            request_method=endpoint.method,
            request_url=strip_userinfo(endpoint.url),
        )
    tenant = endpoint.job.tenant
    result, _kind = judged(
        perform_request(
            request_for(endpoint, tenant.hmac_secret, tenant.previous_secret(timezone.now()), run),
            lane=tenant.pk,
        ),
        endpoint.policy,
    )
    finished = started + timedelta(milliseconds=max(int(result.duration_ms), 0))
    Run.objects.filter(pk=run.pk).update(
        status=RESULT_STATUS.get(result.status, RunStatus.FAILURE),
        finished_at=max(finished, timezone.now()) if now is None else finished,
        duration_ms=max(int(result.duration_ms), 0),
        status_code=result.status_code,
        response_body=result.body,
        response_truncated=result.truncated,
        response_size_bytes=result.size_bytes,
        response_headers=result.headers or None,
        error=result.error or "",
    )
    run.refresh_from_db()
    metrics.record_run(run, status=run.status, duration_ms=run.duration_ms)
    return run


# Its name starts with "test": tell pytest it is not a test when a test module imports it.
test_endpoint.__test__ = False  # type: ignore[attr-defined]


def pause_endpoint(
    endpoint: Endpoint,
    *,
    now: datetime,
    until: datetime | None,
    reason: str = "",
    actor: Actor = Actor.SYSTEM,
) -> HintHistory:
    """Pause until ``until`` (None resumes). The next run moves to the end of the pause."""
    _refuse_bad_reason(reason)
    if until is None:
        return resume_endpoint(endpoint, now=now, reason=reason, actor=actor)
    if until <= now:
        raise OperationRefused(
            f"Cannot pause until {until.isoformat()}: that is not in the future. "
            "Pick a later time, or resume instead."
        )
    if problem := validation.pause_problem(until, now):
        raise OperationRefused(problem)
    _refuse_archived(endpoint, "be paused")
    source = PauseSource.PLANNER if actor.is_planner else PauseSource.PERSON
    was = endpoint.paused_until
    Endpoint.objects.filter(pk=endpoint.pk).update(
        paused_until=until, pause_reason=reason, pause_source=source
    )
    endpoint.paused_until, endpoint.pause_reason, endpoint.pause_source = until, reason, source
    recompute_next_run(endpoint, now=now)
    audit.record_fields(
        actor, endpoint, "paused", now=now, reason=reason, paused_until=(was, until)
    )
    return _history(
        endpoint,
        HintKind.PAUSE,
        now=now,
        actor=actor,
        paused_until=until,
        pause_source=source,
        reason=reason,
    )


def resume_endpoint(
    endpoint: Endpoint, *, now: datetime, reason: str = "", actor: Actor = Actor.SYSTEM
) -> HintHistory:
    _refuse_bad_reason(reason)
    was = endpoint.paused_until
    Endpoint.objects.filter(pk=endpoint.pk).update(
        paused_until=None, pause_reason="", pause_source=""
    )
    endpoint.paused_until, endpoint.pause_reason, endpoint.pause_source = None, "", ""
    recompute_next_run(endpoint, now=now)
    audit.record_fields(
        actor, endpoint, "resumed", now=now, reason=reason, paused_until=(was, None)
    )
    return _history(endpoint, HintKind.RESUME, now=now, actor=actor, reason=reason)


def apply_hint(
    endpoint: Endpoint,
    *,
    now: datetime,
    interval_ms: int | None = None,
    next_run_at: datetime | None = None,
    ttl: timedelta,
    reason: str,
    actor: Actor = Actor.SYSTEM,
) -> HintHistory:
    """Set the endpoint's active hint (one TTL covers both kinds) and nudge its next run.

    The nudge only brings the next run forward: a relaxed interval applies from the next
    run on, a tighter one or an earlier one-shot takes effect at once.
    """
    _validate_hint(interval_ms, next_run_at, ttl)
    if problem := validation.hint_problem(interval_ms, next_run_at, ttl, now):
        raise OperationRefused(problem)
    _refuse_bad_reason(reason)
    _refuse_archived(endpoint, "take hints")
    values: dict[str, Any] = {"ai_hint_expires_at": now + ttl, "ai_hint_reason": reason}
    if interval_ms is not None:
        values["ai_hint_interval_ms"] = interval_ms
    else:
        values["ai_hint_next_run_at"] = next_run_at
    was = {name: getattr(endpoint, name) for name in values}
    Endpoint.objects.filter(pk=endpoint.pk).update(**values)
    for name, value in values.items():
        setattr(endpoint, name, value)
    _nudge_earlier(endpoint, now)
    pairs = {name: (was[name], value) for name, value in values.items() if name != "ai_hint_reason"}
    audit.record_fields(actor, endpoint, "hint-set", now=now, reason=reason, **pairs)
    return _history(
        endpoint,
        HintKind.INTERVAL if interval_ms is not None else HintKind.ONESHOT,
        now=now,
        actor=actor,
        interval_ms=interval_ms,
        next_run_at=next_run_at,
        expires_at=now + ttl,
        reason=reason,
    )


def _validate_hint(interval_ms: int | None, next_run_at: datetime | None, ttl: timedelta) -> None:
    if (interval_ms is None) == (next_run_at is None):
        raise OperationRefused(
            "Give exactly one of interval_ms (a new cadence) or next_run_at (a one-shot time)."
        )
    if interval_ms is not None and interval_ms < 1_000:
        raise OperationRefused(f"A hinted interval must be at least 1000 ms; got {interval_ms}.")
    if ttl <= timedelta(0):
        raise OperationRefused(f"A hint needs a positive time to live; got {ttl}.")


def clear_hints(
    endpoint: Endpoint, *, now: datetime, reason: str = "", actor: Actor = Actor.SYSTEM
) -> HintHistory:
    """Drop the active hints and plan from the baseline again (a pending one-shot is cancelled)."""
    _refuse_bad_reason(reason)
    was = {name: (getattr(endpoint, name), value) for name, value in NO_HINT.items()}
    Endpoint.objects.filter(pk=endpoint.pk).update(**NO_HINT)
    for name, value in NO_HINT.items():
        setattr(endpoint, name, value)
    recompute_next_run(endpoint, now=now)
    was.pop("ai_hint_reason", None)
    audit.record_fields(actor, endpoint, "hints-cleared", now=now, reason=reason, **was)
    return _history(endpoint, HintKind.CLEAR, now=now, actor=actor, reason=reason)


def reset_failures(endpoint: Endpoint, *, now: datetime, actor: Actor = Actor.SYSTEM) -> None:
    """Forget the failure streak, which also drops its backoff from the next run."""
    was = endpoint.failure_count
    Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=0)
    endpoint.failure_count = 0
    _nudge_earlier(endpoint, now)
    audit.record_fields(actor, endpoint, "failures-reset", now=now, failure_count=(was, 0))
    log_event(logging.INFO, f"failures reset by {actor}", endpoint_id=endpoint.pk)


def rotate_signing_secret(
    tenant: Tenant, *, now: datetime, grace: timedelta | None = None, actor: Actor = Actor.SYSTEM
) -> str:
    """Give the tenant a new request-signing secret and return it (shown once).

    The secret it replaces keeps signing beside the new one (two signatures in
    ``X-Cronicorn-Signature``) for ``grace`` (``CRONICORN_SIGNING_GRACE_SECONDS`` by
    default), so receivers can switch to the new secret at any time within it; then
    ``end_signing_grace`` drops it. A tenant that signed nothing starts signing now.
    """
    grace = (
        grace if grace is not None else timedelta(seconds=settings.CRONICORN_SIGNING_GRACE_SECONDS)
    )
    new = secrets.token_urlsafe(32)
    with transaction.atomic():
        current = Tenant.objects.select_for_update().get(pk=tenant.pk)
        previous = current.hmac_secret
        Tenant.objects.filter(pk=tenant.pk).update(
            hmac_secret=new,
            hmac_secret_previous=previous,
            hmac_previous_until=now + grace if previous else None,
        )
    tenant.refresh_from_db(fields=["hmac_secret", "hmac_secret_previous", "hmac_previous_until"])
    audit.record_fields(
        actor, tenant, "signing-secret-rotated", now=now, hmac_secret=(previous, new)
    )
    log_event(
        logging.INFO, f"signing secret of tenant {tenant.pk} rotated (the secret is not logged)"
    )
    return new


def archive_endpoint(endpoint: Endpoint, *, now: datetime, actor: Actor = Actor.SYSTEM) -> None:
    """Archive: never claimed again (its slot has no next run). A run already in flight
    finishes and is kept; its reschedule leaves the slot without a next run."""
    with transaction.atomic():
        if Endpoint.objects.filter(pk=endpoint.pk, archived_at__isnull=True).update(
            archived_at=now
        ):
            audit.record_fields(actor, endpoint, "archived", now=now, archived_at=(None, now))
        Slot.objects.filter(pk=endpoint.pk).update(next_run_at=None, next_run_source="")
    if endpoint.archived_at is None:
        endpoint.archived_at = now
    endpoint.next_run_at, endpoint.next_run_source = None, ""
    log_event(logging.INFO, f"archived by {actor}", endpoint_id=endpoint.pk)


def pause_job(job: Job, *, now: datetime, actor: Actor = Actor.SYSTEM) -> None:
    """Stop claiming the job's endpoints; their next runs stay planned for display.

    The claim joins the job and skips it. A paused job's overdue endpoints stay in the
    claim index and are read (and skipped) by each tick: fine for the few endpoints a
    job has; resume_job plans them afresh.
    """
    if job.status == JobStatus.ARCHIVED:
        raise OperationRefused(f"Job {job.name} is archived; archived jobs cannot be paused.")
    Job.objects.filter(pk=job.pk).update(status=JobStatus.PAUSED, updated_at=now)
    audit.record_fields(actor, job, "paused", now=now, status=(job.status, JobStatus.PAUSED))
    job.status = JobStatus.PAUSED
    log_event(logging.INFO, f"job {job.pk} paused by {actor}")


def resume_job(job: Job, *, now: datetime, actor: Actor = Actor.SYSTEM) -> None:
    if job.status == JobStatus.ARCHIVED:
        raise OperationRefused(f"Job {job.name} is archived; archived jobs cannot be resumed.")
    Job.objects.filter(pk=job.pk).update(status=JobStatus.ACTIVE, updated_at=now)
    audit.record_fields(actor, job, "resumed", now=now, status=(job.status, JobStatus.ACTIVE))
    job.status = JobStatus.ACTIVE
    for endpoint in Endpoint.objects.live().filter(job=job).select_related("job__tenant"):
        recompute_next_run(endpoint, now=now)
    log_event(logging.INFO, f"job {job.pk} resumed by {actor}")


def run_job_now(job: Job, *, now: datetime, actor: Actor = Actor.SYSTEM) -> tuple[int, list[str]]:
    """Run every live endpoint of an active job now (``run_now`` for each). Returns how
    many were made due and, in words, each one left out and why (paused, in flight)."""
    if job.status != JobStatus.ACTIVE:
        raise OperationRefused(f"Job {job.name} is {job.status}; resume the job first.")
    due, left_out = 0, []
    for endpoint in Endpoint.objects.live().filter(job=job).select_related("job__tenant"):
        try:
            run_now(endpoint, now=now, actor=actor)
        except OperationRefused as exc:
            left_out.append(str(exc))
            continue
        due += 1
    return due, left_out


def pause_tenant(tenant: Tenant, *, now: datetime, actor: Actor = Actor.SYSTEM) -> int:
    """Pause every active job of the tenant (``pause_job``); the number paused. A job
    paused already stays paused; resume_tenant resumes every paused job."""
    jobs = list(Job.objects.filter(tenant=tenant, status=JobStatus.ACTIVE))
    for job in jobs:
        pause_job(job, now=now, actor=actor)
    return len(jobs)


def resume_tenant(tenant: Tenant, *, now: datetime, actor: Actor = Actor.SYSTEM) -> int:
    """Resume every paused job of the tenant (``resume_job``: each endpoint planned
    afresh); the number resumed."""
    jobs = list(Job.objects.filter(tenant=tenant, status=JobStatus.PAUSED))
    for job in jobs:
        resume_job(job, now=now, actor=actor)
    return len(jobs)


def archive_job(job: Job, *, now: datetime, actor: Actor = Actor.SYSTEM) -> None:
    """Stop every endpoint of the job for good, keeping their runs, hints and sessions.

    The claim takes only active jobs' endpoints and the planner skips archived jobs, so
    nothing else changes; archiving an archived job changes nothing. ``delete_job`` is the
    way to remove a job with its history.
    """
    if job.status == JobStatus.ARCHIVED:
        return
    Job.objects.filter(pk=job.pk).update(status=JobStatus.ARCHIVED, updated_at=now)
    audit.record_fields(actor, job, "archived", now=now, status=(job.status, JobStatus.ARCHIVED))
    job.status, job.updated_at = JobStatus.ARCHIVED, now
    log_event(logging.INFO, f"job {job.pk} archived by {actor}")


def unarchive_job(job: Job, *, now: datetime, actor: Actor = Actor.SYSTEM) -> None:
    """Bring an archived job back *paused*: its endpoints may have been stopped for months,
    so someone resumes it on purpose (``resume_job`` plans every endpoint afresh)."""
    if job.status != JobStatus.ARCHIVED:
        raise OperationRefused(
            f"Job {job.name} is not archived (it is {job.status}); only an archived job "
            "can be unarchived."
        )
    Job.objects.filter(pk=job.pk).update(status=JobStatus.PAUSED, updated_at=now)
    audit.record_fields(actor, job, "unarchived", now=now, status=(job.status, JobStatus.PAUSED))
    job.status, job.updated_at = JobStatus.PAUSED, now
    log_event(logging.INFO, f"job {job.pk} unarchived (paused) by {actor}")


def delete_for_good(objects: QuerySet[Any], *, actor: Actor = Actor.SYSTEM) -> int:
    """Delete tenants, jobs, endpoints or alert channels with everything of theirs (runs,
    hints, sessions, alerts, deliveries); how many of them went. ``archive_job`` and
    ``archive_endpoint`` keep the history instead.

    Django lists the related rows, then deletes them: both in one transaction here, so
    on SQLite (IMMEDIATE, the write lock taken at BEGIN) the scheduler and the notify
    cycle write nothing in between. On PostgreSQL a row written meanwhile goes through
    its key's cascade (docs/DESIGN.md, "Retention").

    The endpoints' history goes first, set-based (``_delete_history_of``): Django would
    read every run's id into memory (``retry_of`` is SET_NULL) and delete them 100 at a
    time, and on SQLite its unlink of their retries fails past the limit of variables."""
    now = timezone.now()
    with transaction.atomic():
        for obj in objects.order_by():
            audit.record(actor, obj, "deleted", now=now)
        _delete_history_of(objects)
        return objects.delete()[1].get(objects.model._meta.label, 0)


def _delete_history_of(objects: QuerySet[Any]) -> None:
    """Delete the rows keyed to the endpoints ``objects`` cascade to (runs, analysis
    sessions, hints…) by their endpoint ids, a few statements per kind however many rows
    there are (a month of a run a second is 2.6 million runs): first what names them is
    unlinked, as Django's SET_NULL would, then they go, nothing of theirs read into
    Python. A kind that other rows depend on otherwise (an alert, which deliveries name)
    is left to Django's delete after it."""
    paths: dict[type[Model], list[str]] = {objects.model: ["pk"]}
    _follow_cascades(objects.model, "", (objects.model,), paths)
    if Endpoint not in paths:
        return  # a channel: no endpoints
    endpoints = Endpoint._base_manager.filter(_reached(paths[Endpoint], objects)).values("pk")
    for found in get_candidate_relations_to_delete(Endpoint._meta):
        relation = cast(ForeignObjectRel, found)
        model, key = relation.field.model, relation.field.name
        naming = [cast(ForeignObjectRel, r) for r in get_candidate_relations_to_delete(model._meta)]
        if relation.on_delete is not CASCADE or any(r.on_delete is not SET_NULL for r in naming):
            continue
        doomed = model._base_manager.filter(**{f"{key}__in": endpoints})
        for link in naming:
            names = link.field.model._base_manager.filter(
                **{f"{link.field.name}__in": doomed.values("pk")}
            )
            if link.field.model is model:  # a retry that goes too needs no unlinking
                names = names.exclude(**{f"{key}__in": endpoints})
            names.update(**{link.field.name: None})
        # What Django's collector runs for the rows it may delete without reading them.
        doomed._raw_delete(doomed.db)


def count_deleted(objects: QuerySet[Any]) -> dict[type[Model], int]:
    """What ``delete_for_good`` of these objects would delete, counted per model (the
    objects first, kinds with no rows left out): one COUNT per kind, as many queries for
    5 runs as for 5 million. It follows the keys Django's delete
    cascades through (``on_delete=CASCADE``); a row several keys lead to (an alert names
    its tenant, job and endpoint) is counted once."""
    paths: dict[type[Model], list[str]] = {objects.model: ["pk"]}
    _follow_cascades(objects.model, "", (objects.model,), paths)
    counts: dict[type[Model], int] = {}
    for model, ways in paths.items():
        if count := model._base_manager.filter(_reached(ways, objects)).count():
            counts[model] = count
    return counts


def _reached(ways: list[str], objects: QuerySet[Any]) -> Q:
    """The rows any of ``ways`` (key paths, ``_follow_cascades``) lead from ``objects`` to."""
    root = objects.values("pk")
    reached = Q()
    for way in ways:
        reached |= Q(**{f"{way}__in": root})
    return reached


def _follow_cascades(
    model: type[Model],
    path: str,
    chain: tuple[type[Model], ...],
    paths: dict[type[Model], list[str]],
) -> None:
    for found in get_candidate_relations_to_delete(model._meta):
        relation = cast(ForeignObjectRel, found)
        child = relation.field.model
        if relation.on_delete is not CASCADE or child in chain:
            continue  # the rows stay (SET_NULL, DO_NOTHING), or a loop of keys
        way = f"{relation.field.name}__{path}" if path else relation.field.name
        paths.setdefault(child, []).append(way)
        _follow_cascades(child, way, (*chain, child), paths)
