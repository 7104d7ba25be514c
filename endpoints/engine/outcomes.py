"""What a finished run makes of its endpoint: the next state and the one conditional write.

DESIGN.md "Life of a run", step 4: the failure count first, then hints (expired ones
dropped, a consumed one-shot cleared), then the governor's plan start-to-start, written in
one update conditional on the claim token, which also releases the lease.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from endpoints import breaker
from endpoints.engine import sql
from endpoints.engine.claiming import Claim
from endpoints.engine.executor import HttpResult
from endpoints.engine.follow_ups import start_follow_ups
from endpoints.engine.logs import log_event, logger
from endpoints.engine.overlap import record_overlapped, slots_in_flight
from endpoints.engine.sql import ClaimedEndpoint
from endpoints.governor import (
    HINT_FIELDS,
    RETRY,
    EndpointSchedule,
    Plan,
    plan_next_run,
)
from endpoints.models import (
    Endpoint,
    Run,
    RunStatus,
    RunTrigger,
)
from endpoints.policies import RETRYABLE, retry_after_ms
from endpoints.wording import duration_words

RESULT_STATUS = {
    "success": RunStatus.SUCCESS,
    "failure": RunStatus.FAILURE,
    "timeout": RunStatus.TIMEOUT,
    "skipped": RunStatus.SKIPPED,
}
NO_HINT: dict[str, Any] = {**dict.fromkeys(HINT_FIELDS), "ai_hint_reason": ""}


@dataclass
class Outcome:
    """A run whose request is done and whose outcome is not written yet."""

    endpoint: ClaimedEndpoint
    claim: Claim
    run: Run
    started: datetime
    finished: datetime
    result: HttpResult
    # For a failure: policies.RETRYABLE, NEEDS_PERSON or OTHER (decides retry and breaker).
    failure_kind: str = ""
    # Slots due while it was in flight, under ``overlap: skip`` (``engine.overlap``).
    overlapped: list[Plan] = field(default_factory=list)


def finish_columns(result: HttpResult, *, started: datetime, finished: datetime) -> dict[str, Any]:
    """A finished Run's outcome columns (every run's: scheduled, manual, retry, backfill)."""
    return {
        "status": RESULT_STATUS.get(result.status, RunStatus.FAILURE),
        "started_at": started,
        "finished_at": finished,
        "duration_ms": max(int(result.duration_ms), 0),
        "status_code": result.status_code,
        "response_body": result.body,
        "response_truncated": result.truncated,
        "response_size_bytes": result.size_bytes,
        "response_headers": result.headers or None,
        "error": result.error or "",
    }


def reschedule(outcome: Outcome, endpoint: ClaimedEndpoint) -> bool:
    """DESIGN step 4 in one conditional update on our claim token, which releases the lease.

    A person may change the schedule, hints or pause while the run is in flight; the
    update only wins if those are as ``endpoint`` read them, otherwise it re-reads and
    plans again. Returns False when the lease was lost: the run is kept, the endpoint
    left alone.
    """
    for _attempt in range(3):
        values = next_state(outcome, endpoint)
        if sql.reschedule_all([(endpoint, outcome.claim.claim_token, values)])[0]:
            after_reschedule(outcome, values)
            return True
        fresh = _reread_own(outcome.claim)
        if fresh is None:
            return False
        endpoint = fresh
    log_event(
        logging.ERROR, "endpoint kept changing; left for the lease to expire", claim=outcome.claim
    )
    return False


def reschedule_after_conflict(outcome: Outcome) -> bool:
    """A batched reschedule that lost: plan again from the endpoint as it is now."""
    fresh = _reread_own(outcome.claim)
    return fresh is not None and reschedule(outcome, fresh)


def _reread_own(claim: Claim) -> ClaimedEndpoint | None:
    """The endpoint as it is now, or None (logged) if our claim is no longer on it."""
    fresh = sql.load_endpoint(claim.endpoint_id)
    if fresh is None:
        log_event(
            logging.INFO, "the endpoint was deleted during its run; nothing to plan", claim=claim
        )
        return None
    if fresh.claim_token != claim.claim_token:
        log_event(logging.WARNING, "lease lost; run kept, endpoint not rescheduled", claim=claim)
        return None
    return fresh


def log_rescheduled(outcome: Outcome, values: Mapping[str, Any]) -> None:
    """The run's one line: ``job/endpoint status HTTP code in duration, next run at
    (source)`` and the error for a failure. Successes at INFO; failures and recoveries
    at WARNING, so ``runscheduler --quiet`` shows just those. JSON logs carry the same
    fields."""
    result, failed = outcome.result, outcome.result.status != "success"
    recovered = not failed and outcome.endpoint.failure_count > 0
    level = logging.WARNING if failed or recovered else logging.INFO
    if not logger.isEnabledFor(level):
        return
    word = RESULT_STATUS.get(result.status, RunStatus.FAILURE).value
    word = "success (recovered)" if recovered else word
    code = f" HTTP {result.status_code}" if result.status_code else ""
    when, why = values["next_run_at"], values["next_run_source"]
    then = (
        f"next run {when:%Y-%m-%d %H:%M:%S}Z ({why})"
        if when
        else f"no next run ({why or 'archived'})"
    )
    error = f": {result.error}" if failed and result.error else ""
    ref = endpoint_ref(outcome.claim.endpoint_id)
    fields = {
        "endpoint": ref,
        "status": word,
        "status_code": result.status_code,
        "duration_ms": result.duration_ms,
        "next_run_at": when.isoformat() if when else None,
        "next_run_source": why,
        "error": result.error or None,
    }
    logger.log(
        level,
        f"{ref} {word}{code} in {duration_words(result.duration_ms)}, {then}{error}",
        extra={**_ids(outcome.claim, outcome.run.pk), **fields},
    )


# Names of endpoints for run lines, read once per endpoint and kept a minute (a rename
# shows within a minute); the hot path reads no names.
_REFS: dict[int, tuple[str, float]] = {}
REF_TTL_SECONDS = 60.0


def endpoint_ref(endpoint_id: int) -> str:
    """``job/endpoint`` of an endpoint, cached for a minute."""
    cached = _REFS.get(endpoint_id)
    if cached is not None and time.monotonic() - cached[1] < REF_TTL_SECONDS:
        return cached[0]
    row = Endpoint.objects.filter(pk=endpoint_id).values_list("job__name", "name").first()
    ref = f"{row[0]}/{row[1]}" if row else f"endpoint {endpoint_id}"
    _REFS[endpoint_id] = (ref, time.monotonic())
    return ref


def next_state(outcome: Outcome, endpoint: ClaimedEndpoint) -> dict[str, Any]:
    """What the endpoint becomes after ``outcome``: failure count, hints, retry, next run.

    A failed attempt the policy may retry (a retryable kind, attempts left) plans the
    next attempt of the same slot: the failure count stays (a slot counts once, by its
    last attempt) and the governor weighs the retry against the next slot. A skipped
    slot (catch-up window) changes no count."""
    started, finished, result = outcome.started, outcome.finished, outcome.result
    # The attempt the run was, not the one the endpoint planned: a run retried after its
    # lease was lost is an attempt of its slot too (numbered after the lost one), so the
    # policy's next attempt follows it and no number is used twice in a slot.
    attempt = outcome.run.attempt if outcome.claim.trigger == RunTrigger.SCHEDULED else 1
    retry: dict[str, Any] = {"retry_attempt": 0, "retry_of_run": None}
    if result.status == "success":
        failure_count = 0
    elif result.status == "skipped":
        failure_count = endpoint.failure_count
    else:
        failure_count = endpoint.failure_count + 1
    hints = hints_after_run(endpoint, started)
    schedule = replace(
        EndpointSchedule.from_endpoint(endpoint),
        failure_count=failure_count,
        **{k: v for k, v in hints.items() if k != "ai_hint_reason"},
    )
    policy = endpoint.policy
    if (
        failure_count > endpoint.failure_count
        and outcome.failure_kind == RETRYABLE
        and attempt < policy.retry_attempts
    ):
        delay = policy.retry_delay(attempt, retry_after_ms(result.headers))
        planned = plan_next_run(
            finished,
            replace(
                schedule,
                failure_count=endpoint.failure_count,
                retry_at=finished + timedelta(milliseconds=delay),
                retry_attempt=attempt,
            ),
        )
        if planned.source == RETRY:
            # The slot's first run; a retry of a lost first attempt links to that run.
            first = (
                (endpoint.retry_of_run or outcome.run.retry_of_id)
                if attempt > 1
                else outcome.run.pk
            )
            return {
                "last_run_at": started,
                "next_run_at": None if endpoint.archived_at is not None else planned.next_run_at,
                "next_run_source": "" if endpoint.archived_at is not None else RETRY,
                "failure_count": endpoint.failure_count,
                **hints,
                "retry_attempt": attempt + 1,
                "retry_of_run": first,
            }
    # Start-to-start cadence, a scheduled run that started late keeping its slot's phase
    # (the governor's ``phase_slot``); a run slower than its interval plans from its end
    # instead, or the endpoint would be due again the moment it finished (trap 3).
    plan = plan_next_run(started, on_phase(schedule, outcome.claim))
    outcome.overlapped = []
    if plan.next_run_at is not None and plan.next_run_at <= finished:
        if policy.overlap == "skip":
            plan, outcome.overlapped = slots_in_flight(plan, schedule, finished)
        else:
            plan = plan_next_run(finished, schedule)
    archived = endpoint.archived_at is not None  # archived in flight: no next run
    return {
        "last_run_at": started,
        "next_run_at": None if archived else plan.next_run_at,
        "next_run_source": "" if archived else plan.source,
        "failure_count": failure_count,
        **hints,
        **retry,
    }


def on_phase(schedule: EndpointSchedule, claim: Claim) -> EndpointSchedule:
    """The schedule with the run's slot, whose phase the governor keeps for a late run on
    the baseline interval (issue 23); manual runs plan from their start."""
    if claim.trigger != RunTrigger.SCHEDULED:
        return schedule
    return replace(schedule, phase_slot=claim.scheduled_for)


def breaker_reason(outcome: Outcome, values: Mapping[str, Any]) -> str:
    """Why the breaker opens after this outcome, in words (``endpoints.breaker``); "" when
    it stays closed. Only a slot's last attempt counts."""
    if values.get("retry_attempt") or outcome.result.status in ("success", "skipped"):
        return ""
    return breaker.reason_after_slot(
        outcome.endpoint.policy,
        failures=values["failure_count"],
        failure_kind=outcome.failure_kind,
        last=outcome.result.error or outcome.result.status,
    )


def open_breaker(outcome: Outcome, reason: str) -> None:
    """Open the breaker after a run's outcome and log it."""
    if text := breaker.open_breaker(
        outcome.claim.endpoint_id, outcome.endpoint.policy, now=outcome.finished, reason=reason
    ):
        log_event(logging.WARNING, text, claim=outcome.claim, run_id=outcome.run.pk)


def after_reschedule(outcome: Outcome, values: Mapping[str, Any]) -> None:
    """Once the outcome is written: its line, the breaker if it opens, and the follow-ups
    (``engine.follow_ups``)."""
    log_rescheduled(outcome, values)
    if reason := breaker_reason(outcome, values):
        open_breaker(outcome, reason)
    if outcome.overlapped:
        record_overlapped(
            outcome.claim.endpoint_id,
            outcome.run,
            outcome.overlapped,
            started=outcome.started,
            finished=outcome.finished,
        )
    rules = outcome.endpoint.policy.follow_ups
    # A failed attempt with a retry planned has not failed its slot yet; a skip is no run.
    if rules and outcome.result.status != "skipped" and not values.get("retry_attempt"):
        start_follow_ups(
            endpoint_id=outcome.claim.endpoint_id,
            run_id=outcome.run.pk,
            rules=rules,
            succeeded=outcome.result.status == "success",
            now=outcome.finished,
        )


def hints_after_run(endpoint: ClaimedEndpoint, started: datetime) -> dict[str, Any]:
    """Expired hints go entirely; a one-shot whose time has come is consumed (trap 12)."""
    current = {name: getattr(endpoint, name) for name in NO_HINT}
    expires = endpoint.ai_hint_expires_at
    if expires is not None and expires <= started:
        return dict(NO_HINT)
    oneshot = endpoint.ai_hint_next_run_at
    if oneshot is not None and oneshot <= started:
        if endpoint.ai_hint_interval_ms is None:
            return dict(NO_HINT)
        return {**current, "ai_hint_next_run_at": None}
    return current


def _ids(claim: Claim, run_id: int) -> dict[str, Any]:
    return {
        "endpoint_id": claim.endpoint_id,
        "run_id": run_id,
        "claim_token": str(claim.claim_token),
        "source": claim.source,
    }
