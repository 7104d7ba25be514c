"""Running claims: record the Run, call the endpoint, record the outcome; leases renewed.

DESIGN.md "Life of a run", steps 3 to 6. ``start_claims`` records the Runs of claims that
start together (one per claim: a redelivered claim does nothing), the caller performs the
requests, ``record_outcomes`` finishes the Runs and reschedules their endpoints
(``endpoints.engine.outcomes``) several to a transaction. Every state change is a
conditional ``update()`` whose row count says who won.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import (
    DatabaseError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    connection,
    transaction,
)
from django.db.models import F, Value
from django.db.models.functions import Concat
from django.utils import timezone

from endpoints import policies
from endpoints.engine import metrics, sql
from endpoints.engine.claiming import EXPIRED_RUN_ERROR, Claim, release_claims
from endpoints.engine.executor import (
    HttpRequest,
    HttpResult,
    NetworkPolicy,
    ResultStatus,
    not_called,
    perform_request,
    submit_request,
)
from endpoints.engine.follow_ups import cause_of
from endpoints.engine.host_limits import Held, Paced, pace
from endpoints.engine.logs import log_context, log_event
from endpoints.engine.outcomes import (
    RESULT_STATUS,
    Outcome,
    after_reschedule,
    finish_columns,
    next_state,
    reschedule,
    reschedule_after_conflict,
)
from endpoints.engine.overlap_allow import Full, record_beside, side_by_side, start_beside
from endpoints.engine.sql import ClaimedEndpoint
from endpoints.governor import EndpointSchedule, plan_next_run
from endpoints.jsonb import storable
from endpoints.models import (
    Endpoint,
    JobStatus,
    Run,
    RunStatus,
    RunTrigger,
    Slot,
    Source,
)
from endpoints.secrets import strip_userinfo
from endpoints.wording import duration_words

# The database is away (restart, failover, network): worth trying the same writes again,
# unlike an error in the data. psycopg reports a lost or refused connection, and a
# deadlock, as OperationalError; a connection Django already knows is closed as
# InterfaceError.
UNAVAILABLE = (OperationalError, InterfaceError)


# After a scheduler error (not an endpoint failure) the endpoint is tried again this late.
ERROR_RETRY = timedelta(minutes=1)

# A slot's attempts, retries of lost runs included, end here: the claim that would start
# the next one records it failed without calling the endpoint, and the next slot is
# planned. A run is lost when its worker dies or stalls, and each loss retries the slot,
# so a target that kills its workers was otherwise called again every lease forever, the
# slot never ending (and past 32 767 attempts, ``Run.attempt``'s smallint, the retry could
# not even be recorded: the slot was claimed and released every tick, never run again).
# Twice the run policy's most attempts: each of those may be lost once.
MAX_SLOT_ATTEMPTS = 2 * policies.MAX_ATTEMPTS


@dataclass
class Started:
    """A run recorded as running, whose endpoint is still to be called."""

    endpoint: ClaimedEndpoint
    claim: Claim
    run: Run
    started: datetime
    # When it would have started but for its host's rate limit (``started`` otherwise).
    unpaced: datetime | None = None

    def call(self, *, policy: NetworkPolicy | None = None) -> Future[HttpResult]:
        """Start the request on its tenant's HTTP event loop at ``started`` (at once if that has
        passed); the future resolves with its result."""
        if (skipped := self._given_up() or self._skipped()) is not None:
            done: Future[HttpResult] = Future()
            done.set_result(skipped)
            return done
        # Sent only while a third of the lease is left (the renewer's turn): a process
        # stalled meanwhile (SIGSTOP, swap) may have lost the claim to another worker,
        # whose retry must not run beside this request.
        assert self.endpoint.locked_until is not None
        deadline = self.endpoint.locked_until - timedelta(
            seconds=settings.CRONICORN_LEASE_SECONDS / 3
        )
        with self._log_context():
            return submit_request(
                self._request(),
                policy=policy,
                at=self.started.timestamp(),
                deadline=deadline.timestamp(),
                lane=self.endpoint.tenant_id,
            )

    def call_and_wait(self, *, policy: NetworkPolicy | None = None) -> HttpResult:
        if (skipped := self._given_up() or self._skipped()) is not None:
            return skipped
        with self._log_context():
            return perform_request(self._request(), policy=policy, lane=self.endpoint.tenant_id)

    def outcome(self, result: HttpResult) -> Outcome:
        """The outcome, judged by the run policy's success criteria (``judged``)."""
        result, kind = judged(result, self.endpoint.policy)
        # When the request really started: the loop sends it at ``started`` or a little
        # later, and the run's record and its next slot count from that.
        started = self.started
        if result.sent_at is not None:
            started = max(started, datetime.fromtimestamp(result.sent_at, tz=UTC))
            self.run.started_at = started
        return Outcome(self.endpoint, self.claim, self.run, started, timezone.now(), result, kind)

    def _given_up(self) -> HttpResult | None:
        """A slot past ``MAX_SLOT_ATTEMPTS`` (its runs lost again and again) is not called:
        this attempt fails in words, and the next slot is planned."""
        if self.run.attempt <= MAX_SLOT_ATTEMPTS:
            return None
        return not_called(
            "failure",
            f"Given up: this slot had {self.run.attempt - 1} attempts, the last ones lost "
            "(their worker died or stalled before recording them, so their leases "
            f"expired); a slot has at most {MAX_SLOT_ATTEMPTS}. Not called again: the "
            "next slot is planned. The workers' logs say what stopped them.",
        )

    def _skipped(self) -> HttpResult | None:
        """A scheduled slot found later than the catch-up window (and than a tick) is not
        called (the default policy has no window: always run once, however late)."""
        endpoint = self.endpoint
        window = endpoint.policy.catchup_window_ms
        if window is None or self.claim.trigger != RunTrigger.SCHEDULED:
            return None
        if self.claim.source in (Source.MANUAL, Source.RETRY) or endpoint.retry_attempt:
            return None
        # A rate limit's delay is not lateness: it delays a run, never skips it.
        late = (self.unpaced or self.started) - self.claim.scheduled_for
        # Less than a tick after its slot is on time by the scheduler's own measure (its
        # timers' jitter): a shorter window counts as a tick, else 0 would skip every slot.
        tick = timedelta(seconds=settings.CRONICORN_TICK_SECONDS)
        if late <= timedelta(milliseconds=window) or late < tick:
            return None
        return not_called(
            "skipped",
            f"Skipped: found {duration_words(int(late.total_seconds() * 1000))} late, "
            f"more than the catch-up window ({duration_words(window)}); "
            "the next slot is planned instead",
        )

    def _request(self) -> HttpRequest:
        return request_for(
            self.endpoint, self.endpoint.hmac_secret, self.endpoint.hmac_secret_previous, self.run
        )

    def _log_context(self) -> AbstractContextManager[None]:
        # The executor's lines for this request carry the run's ids too.
        return log_context(
            endpoint_id=self.claim.endpoint_id,
            claim_token=str(self.claim.claim_token),
            run_id=self.run.pk,
            source=self.claim.source,
        )


def execute_claim(claim: Claim, *, policy: NetworkPolicy | None = None) -> Run | None:
    """Run one claim: record the Run, call the endpoint, finish the Run, reschedule.

    A stale or duplicate claim (its token no longer on the endpoint) does nothing and
    returns None. Errors stay inside this claim: they are logged and recorded on its Run.
    """
    called = call_claim(claim, policy=policy)
    if isinstance(called, Outcome):
        record_outcomes([called])
        return called.run
    return called


def call_claim(claim: Claim, *, policy: NetworkPolicy | None = None) -> Outcome | Run | None:
    """The first half of ``execute_claim``: record the Run and call the endpoint.

    Returns the ``Outcome`` to hand to ``record_outcomes``; or the Run, already recorded,
    when a scheduler error cut it short; or None for a stale claim (nothing done).
    """
    [started] = start_claims([claim])
    if isinstance(started, Full):  # overlap allow, its calls all in flight: left for later
        release_claims([claim])
        return None
    if not isinstance(started, Started):  # never Held: not ``ahead``
        return None
    try:
        result = started.call_and_wait(policy=policy)
    except Exception as exc:
        _recover(started.endpoint, claim, started.run, started.started, exc)
        return started.run
    return started.outcome(result)


def start_claims(
    claims: Sequence[Claim], *, ahead: bool = False
) -> list[Started | Held | Full | None]:
    """Record the Runs of claims that start together, before their requests.

    The endpoints are read in one query and the Runs of scheduled slots inserted in one
    statement (the dispatcher starts what is due together: under load, many). For each
    claim, its ``Started``, or None when there is nothing to run: a stale claim (its token
    no longer on the endpoint), an endpoint paused or archived since the claim (its lease
    released), or an error (logged; the claim given back); ``FULL`` for a claim of an
    endpoint whose ``overlap: {"allow": N}`` calls are all in flight (nothing written:
    the caller keeps the claim and tries again, or gives it back).

    By default the Runs start now, once the latest slot has come. ``ahead`` (the
    dispatcher) records them before their slots instead, each started at its own
    ``starts_at`` (or now, if that has passed): ``Started.call`` then sends each request
    at that time, so the database's latency is not the run's lateness, and the claims
    due within the dispatcher's lead share one transaction. The request's real start
    replaces the recorded one when the run finishes. ``ahead`` also keeps each run within
    its host's rate limit (``host_limits.pace``): it starts later, its Run saying why, or
    its claim is given back as ``Held``, to be started again at its reserved time.

    Raises ``UNAVAILABLE`` when the database cannot be reached before anything was
    written, so the caller, which still holds the claims, may start them again shortly.
    """
    try:
        if ahead:
            now = timezone.now()
        else:
            now = _wait_for_slot(max(claim.scheduled_for for claim in claims))
        endpoints = sql.load_endpoints([claim.endpoint_id for claim in claims])
    except UNAVAILABLE:
        raise
    except Exception:
        _give_back(claims)
        return [None] * len(claims)
    started: list[Started | Held | Full | None] = [None] * len(claims)
    ready: dict[int, tuple[int, ClaimedEndpoint, Claim]] = {}  # by endpoint: one run each
    for index, claim in enumerate(claims):
        if claim.endpoint_id in ready:
            log_event(
                logging.WARNING, "duplicate claim in the same start; nothing done", claim=claim
            )
            continue
        try:
            endpoint = _runnable(claim, endpoints.get(claim.endpoint_id), now)
        except Exception:
            _give_back([claim])
            continue
        if endpoint is not None:
            ready[claim.endpoint_id] = (index, endpoint, claim)

    def unpaced(claim: Claim) -> datetime:
        if claim.held is not None:  # held back by its host's limit before
            return claim.held.since
        return max(claim.starts_at, now) if ahead else now

    # The dispatcher's runs keep within their hosts' rate limits: later, or held back.
    paced = pace([(e, c, unpaced(c)) for _i, e, c in ready.values()], now=now) if ahead else {}
    for endpoint_id, held in paced.items():
        if isinstance(held, Held):
            started[ready.pop(endpoint_id)[0]] = held

    def start_of(claim: Claim) -> tuple[datetime, str]:
        if isinstance(later := paced.get(claim.endpoint_id), Paced):
            return later.start, later.delay_reason
        return unpaced(claim), ""

    slots = [
        (i, e, c)
        for i, e, c in ready.values()
        if c.trigger == RunTrigger.SCHEDULED and not side_by_side(e)
    ]
    inserted = _insert_runs_of_slots(slots, start_of) if len(slots) > 1 else {}
    for index, endpoint, claim in ready.values():
        run: Run | Full | None = inserted.get(index)
        if run is None:
            try:
                at, why = start_of(claim)
                if side_by_side(endpoint):
                    paced_run = functools.partial(_start_run, delay_reason=why)
                    run = start_beside(endpoint, claim, at, start_run=paced_run)
                else:
                    run = _start_run(endpoint, claim, at, why)
            except Exception:
                _give_back([claim])
                continue
        if isinstance(run, Full):
            started[index] = run
        elif run is not None:
            start = start_of(claim)[0]
            started[index] = Started(endpoint, claim, run, start, unpaced=unpaced(claim))
    return started


def _give_back(claims: Sequence[Claim]) -> None:
    """Claims whose runs could not be recorded (the database went away, say) are released
    at once for the next tick; if even that fails, their short leases expire unrenewed."""
    why = "could not start the run"
    try:
        released = release_claims(claims)
    except Exception:
        released = -1
    for claim in claims:
        if released < 0:
            lease = settings.CRONICORN_LEASE_SECONDS
            text = f"{why}; the claim could not be released either, its lease ends within {lease} s"
        else:
            text = f"{why}; the claim is released for the next tick"
        log_event(logging.ERROR, text, claim=claim, exc=True)


def _insert_runs_of_slots(
    slots: Sequence[tuple[int, ClaimedEndpoint, Claim]],
    start_of: Callable[[Claim], tuple[datetime, str]],
) -> dict[int, Run]:
    """The Runs of several scheduled slots in one statement, by claim index. A slot that
    already has a Run (a reclaimed lease), or a statement that fails, is left to
    ``_start_run``, one by one."""
    fields = [_run_fields(endpoint, claim, *start_of(claim)) for _index, endpoint, claim in slots]
    try:
        with statement_guard():
            ids = sql.insert_runs_of_slots(fields)
    except DatabaseError:
        return {}
    return {
        index: Run(pk=run_id, **values)
        for (index, _endpoint, _claim), values, run_id in zip(slots, fields, ids, strict=True)
        if run_id is not None
    }


def record_outcomes(outcomes: Sequence[Outcome]) -> datetime | None:
    """Finish the Runs and reschedule their endpoints, all in one transaction; return the
    earliest next run planned (None if none), which a tick in the same process may have to
    claim before its next turn (``embedded.EmbeddedScheduler``).

    A run's finish and its reschedule are never written apart: the release of expired
    leases (``claiming``) lets a slot go once its run is no longer ``running``, so a finish
    committed before its reschedule would let a tick, coming between the two (a worker
    stalled there past its lease), claim the slot again and run it twice. Each reschedule
    is conditional on its claim token and planning fields (see ``reschedule``); one that
    loses (a person's edit meanwhile) is re-read and planned again in the same
    transaction, behind a savepoint. If the transaction fails (a body the database
    refuses), each outcome is written on its own, so one bad run never costs the others
    their records. A schedule the governor cannot plan is recorded by ``_recover`` in the
    same transaction too.
    """
    finishes, reschedules, broken, beside = [], [], [], []
    for outcome in outcomes:
        finishes.append((outcome.run.pk, _finish_values(outcome)))
        if side_by_side(outcome.endpoint):  # its slot moved on when it started
            beside.append(outcome)
            continue
        try:
            values = next_state(outcome, outcome.endpoint)
        except Exception as exc:  # a schedule the governor cannot plan: recorded below
            broken.append((outcome, exc))
            continue
        reschedules.append((outcome, values))
    try:
        with transaction.atomic():
            finished = sql.finish_runs(finishes)
            won = sql.reschedule_all(
                [(o.endpoint, o.claim.claim_token, values) for o, values in reschedules]
            )
            lost = [o for (o, _values), ok in zip(reschedules, won, strict=True) if not ok]
            broken += _replan_in_transaction(lost)
            for outcome, error in broken:
                _recover(outcome.endpoint, outcome.claim, outcome.run, outcome.started, error)
            by_run = dict(zip((o.run.pk for o in outcomes), finished, strict=True))
            written = [(o, record_beside(o)) for o in beside if by_run[o.run.pk]]
    except UNAVAILABLE:
        raise  # nothing was written: the caller may try the whole batch again
    except DatabaseError:
        for outcome in outcomes:
            _record_alone(outcome)
        return None
    for outcome, updated in zip(outcomes, finished, strict=True):
        _log_finish(outcome, updated)
    planned = []
    for (outcome, values), ok in zip(reschedules, won, strict=True):
        if ok:
            after_reschedule(outcome, values)
            planned.append(values["next_run_at"])
    for outcome, values in written:
        if values:
            after_reschedule(outcome, values)
            planned.append(values.get("next_run_at"))
    return min((at for at in planned if at is not None), default=None)


def _replan_in_transaction(lost: Sequence[Outcome]) -> list[tuple[Outcome, Exception]]:
    """Plan again the reschedules that lost to an edit, each behind a savepoint (the
    endpoint re-read); those that raise, with their error."""
    broken = []
    for outcome in lost:
        try:
            with transaction.atomic():
                reschedule_after_conflict(outcome)
        except UNAVAILABLE:
            raise
        except Exception as exc:
            broken.append((outcome, exc))
    return broken


def _record_alone(outcome: Outcome) -> None:
    """One outcome on its own, after its batch failed: the Run (its values made storable
    if the database refuses them) and the reschedule, or the governor's error, in one
    transaction as above; if that fails, ``_recover`` records the error on its own."""
    try:
        values = _finish_values(outcome)
        with transaction.atomic():
            try:
                with transaction.atomic():  # a savepoint: the body may be refused
                    updated = sql.finish_runs([(outcome.run.pk, values)])[0]
            except UNAVAILABLE:
                raise
            except DatabaseError:  # e.g. a number past a float's range (1e400), which
                # the body's decoding lets through as infinity and jsonb refuses
                values = storable(values)
                updated = sql.finish_runs([(outcome.run.pk, values)])[0]
            try:
                with transaction.atomic():  # a savepoint: the finish stays if this fails
                    if not side_by_side(outcome.endpoint):
                        reschedule(outcome, outcome.endpoint)
                    elif updated and (values := record_beside(outcome)):
                        after_reschedule(outcome, values)
            except UNAVAILABLE:
                raise
            except Exception as exc:  # the governor's, or a write the database refused
                _recover(outcome.endpoint, outcome.claim, outcome.run, outcome.started, exc)
        _log_finish(outcome, updated)
    except UNAVAILABLE:
        raise  # the database is away: the caller may try again
    except Exception as exc:
        _recover(outcome.endpoint, outcome.claim, outcome.run, outcome.started, exc)


def _wait_for_slot(scheduled_for: datetime) -> datetime:
    """Never start before the slot: a cron run started early would plan the same slot again.

    Callers already start claims on time; this only absorbs a few ms of timer jitter and
    is capped at one tick.
    """
    now = timezone.now()
    early = (scheduled_for - now).total_seconds()
    if early > 0:
        time.sleep(min(early, settings.CRONICORN_TICK_SECONDS))
        now = timezone.now()
    return now


def _runnable(
    claim: Claim, endpoint: ClaimedEndpoint | None, now: datetime
) -> ClaimedEndpoint | None:
    """The endpoint if the claim is still ours and still meant to run."""
    if endpoint is None or endpoint.claim_token != claim.claim_token:
        log_event(
            logging.INFO, "stale claim: the lease is no longer ours; nothing done", claim=claim
        )
        return None
    reason = _why_not_runnable(endpoint, now)
    if reason:
        _drop_claim(claim, endpoint, now)
        log_event(logging.INFO, f"claim dropped: {reason}", claim=claim)
        return None
    return _ensure_lease_at_start(endpoint, claim, now)


def _drop_claim(claim: Claim, endpoint: ClaimedEndpoint, now: datetime) -> None:
    """Release a claim that will not run. The claim reads only slots, so a slot that
    disagrees with its endpoint is put right here, or the next tick would take it again:
    an archived endpoint gets no next run, a paused one its pause's end (the governor's
    plan). A paused job's endpoints keep theirs; the claim skips the job."""
    values: dict[str, Any] = {}
    if endpoint.archived_at is not None:
        values = {"next_run_at": None, "next_run_source": ""}
    elif endpoint.is_paused(now):
        plan = plan_next_run(now, EndpointSchedule.from_endpoint(endpoint))
        values = {"next_run_at": plan.next_run_at, "next_run_source": plan.source}
    Slot.objects.filter(pk=claim.endpoint_id, claim_token=claim.claim_token).update(
        claim_token=None, locked_until=None, **values
    )


def _why_not_runnable(endpoint: ClaimedEndpoint, now: datetime) -> str:
    if endpoint.archived_at is not None:
        return "the endpoint was archived"
    if endpoint.job_status != JobStatus.ACTIVE:
        return f"the job is {endpoint.job_status}"
    if endpoint.is_paused(now):
        return f"the endpoint is paused until {endpoint.paused_until}"
    return ""


def _ensure_lease_at_start(
    endpoint: ClaimedEndpoint, claim: Claim, now: datetime
) -> ClaimedEndpoint | None:
    """A claim that starts late (a busy worker) renews its lease before calling out if less
    than half of it is left, so it cannot expire before the first renewal (``renew_leases``)
    and let a second claimer run the slot concurrently. An expired lease is not revived:
    another claimer may hold the slot already."""
    assert endpoint.locked_until is not None
    lease = timedelta(seconds=settings.CRONICORN_LEASE_SECONDS)
    if endpoint.locked_until >= now + lease / 2:
        return endpoint
    extended = Slot.objects.filter(
        pk=endpoint.pk, claim_token=claim.claim_token, locked_until__gt=now
    ).update(locked_until=now + lease)
    if not extended:
        log_event(logging.WARNING, "stale claim: the lease expired before the run", claim=claim)
        return None
    endpoint.locked_until = now + lease
    return endpoint


def statement_guard() -> AbstractContextManager[Any]:
    """Lets a statement fail without spoiling the connection: a savepoint inside a
    transaction; nothing in autocommit (the hot path), where a failed statement is its own
    rolled-back transaction and BEGIN/COMMIT would double the run's round trips."""
    return transaction.atomic() if connection.in_atomic_block else nullcontext()


def _start_run(
    endpoint: ClaimedEndpoint, claim: Claim, started: datetime, delay_reason: str = ""
) -> Run | None:
    """Create the Run before the request; None if this claim's run exists already.

    One run per claim (DESIGN "Redelivery is a no-op"): a broker may deliver the same
    claim again (a connection drop restores unacknowledged messages, a duplicate publish,
    a visibility timeout) while its run is in flight, and the token is still on the slot.
    The database decides, not the message: a slot's attempts are unique
    (``endpoints_run_one_per_slot`` for scheduled runs, ``endpoints_run_one_per_attempt``
    for the others), so of two deliveries racing here one insert fails and finds the
    other's run, with its own token. An earlier attempt under *another* token is a run
    whose lease expired (its worker stopped renewing it): only then is it retried.
    """
    fields = _run_fields(endpoint, claim, started, delay_reason)
    if claim.trigger == RunTrigger.FOLLOW_UP:
        fields["caused_by"] = cause_of(endpoint.pk)
    previous = None
    if claim.trigger != RunTrigger.SCHEDULED:
        previous = _latest_attempt(endpoint.pk, claim.scheduled_for)
    if previous is None:
        try:
            with statement_guard():
                return Run(pk=sql.insert_run(fields), **fields)
        except IntegrityError:
            previous = _latest_attempt(endpoint.pk, claim.scheduled_for)
            if previous is None:
                raise
    if previous.claim_token == claim.claim_token:
        _log_redelivered(claim, previous)
        return None
    _mark_lost(previous, started, _lost_reason(previous, claim))
    fields.pop("retry_of_id")  # a lost run's retry links to the lost run
    fields.update(trigger=RunTrigger.RETRY, attempt=previous.attempt + 1, retry_of=previous)
    try:
        with statement_guard():
            run = Run.objects.create(**fields)
    except IntegrityError:  # the same claim, delivered twice, started its retry first
        latest = _latest_attempt(endpoint.pk, claim.scheduled_for)
        if latest is None or latest.claim_token != claim.claim_token:
            raise
        _log_redelivered(claim, latest)
        return None
    log_event(logging.WARNING, f"retrying run {previous.pk} (lost)", claim=claim, run_id=run.pk)
    return run


def _log_redelivered(claim: Claim, run: Run) -> None:
    log_event(
        logging.INFO,
        f"claim delivered again; its run {run.pk} already started ({run.status}); nothing done",
        claim=claim,
        run_id=run.pk,
    )


def _lost_reason(previous: Run, claim: Claim) -> str:
    expired = previous.lease_expires_at
    when = f" at {expired:%H:%M:%S}Z" if expired else ""
    return (
        f"its lease expired{when} without being renewed (its worker died, stalled or lost "
        f"the database); retried by claim {claim.claim_token}"
    )


def _run_fields(
    endpoint: ClaimedEndpoint, claim: Claim, started: datetime, delay_reason: str = ""
) -> dict[str, Any]:
    """The columns of a Run as it starts."""
    return {
        "endpoint_id": endpoint.pk,
        "trigger": claim.trigger,
        "source": claim.source,
        "scheduled_for": claim.scheduled_for,
        "started_at": started,
        "status": RunStatus.RUNNING,
        "claim_token": claim.claim_token,
        "lease_expires_at": endpoint.locked_until,
        "request_method": endpoint.method,
        "request_url": strip_userinfo(endpoint.url),  # the password is a secret
        # A retry within the slot (run policy) is the attempt the endpoint planned,
        # linked to the slot's first run; anything else starts a slot (attempt 1).
        "attempt": _attempt(endpoint, claim),
        "retry_of_id": endpoint.retry_of_run if _attempt(endpoint, claim) > 1 else None,
        "response_truncated": False,
        "error": "",
        "delay_reason": delay_reason,
    }


def _attempt(endpoint: ClaimedEndpoint, claim: Claim) -> int:
    if endpoint.retry_attempt > 1 and claim.trigger == RunTrigger.SCHEDULED:
        return endpoint.retry_attempt
    return 1


def _latest_attempt(endpoint_id: int, scheduled_for: datetime) -> Run | None:
    return (
        Run.objects.filter(endpoint_id=endpoint_id, scheduled_for=scheduled_for)
        .exclude(trigger=RunTrigger.TEST)
        .only("pk", "status", "attempt", "claim_token", "lease_expires_at")
        .order_by("-attempt", "-pk")
        .first()
    )


def _mark_lost(run: Run, now: datetime, why: str) -> None:
    """The run is lost, and its record says why and which claim retried it (the release
    of its lease may have marked it lost already, without naming the retry)."""
    Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(
        status=RunStatus.LOST, finished_at=now, error=f"Lost: {why}."
    )
    Run.objects.filter(pk=run.pk, status=RunStatus.LOST, error=EXPIRED_RUN_ERROR).update(
        error=f"Lost: {why}."
    )


def judged(result: HttpResult, policy: policies.RunPolicy) -> tuple[HttpResult, str]:
    """``result`` as the run policy's success criteria see it, and the kind of its failure
    (``policies.RETRYABLE``, ``NEEDS_PERSON`` or ``OTHER``; "" for a success). Every call
    of an endpoint is judged here, a scheduled run's and a test's alike. Without criteria
    (the default) the executor's verdict, 2xx, stands and nothing more is computed."""
    kind = ""
    if result.status in ("success", "failure", "timeout"):
        if policy.checks_success:
            verdict = policies.judge(
                policy,
                status=result.status,
                status_code=result.status_code,
                body=result.body,
                duration_ms=result.duration_ms,
                error=result.error,
            )
            kind = verdict.kind
            if verdict.success and result.status != "success":
                result = replace(result, status="success", error="")
            elif not verdict.success:
                failed: ResultStatus = "timeout" if result.status == "timeout" else "failure"
                result = replace(result, status=failed, error=verdict.reason or result.error)
        elif result.status != "success":
            kind = policies.classify(result.status, result.status_code)
    return result, kind


def request_for(
    endpoint: ClaimedEndpoint | Endpoint, hmac_secret: str, hmac_previous: str, run: Run
) -> HttpRequest:
    """The request of ``run`` of the endpoint, signed with the tenant's secrets, saying
    which slot it is (``executor.SLOT_HEADERS``)."""
    return HttpRequest(
        url=endpoint.url,
        method=endpoint.method,
        headers=dict(endpoint.headers or {}),
        body=endpoint.body,
        timeout_ms=endpoint.timeout_ms,
        max_response_size_kb=endpoint.max_response_size_kb,
        hmac_secret=hmac_secret,
        hmac_previous_secret=hmac_previous,
        secret_header_names=tuple(endpoint.secret_header_names or ()),
        slot=slot_identity(run),
    )


def slot_identity(run: Run) -> tuple[str, str, str, str]:
    """What the target is told of the run's slot: its scheduled time (ISO 8601 UTC to the
    millisecond; a retry's is its slot's first attempt's, so all attempts of a slot share
    it), the run's id, the attempt, the trigger."""
    slot, first = run.scheduled_for, run.retry_of_id
    # A retry links to the slot's first run, or (a lost lease's) to the attempt before,
    # itself linked to the first: a few primary-key reads, on the retry path alone.
    for _ in range(MAX_SLOT_ATTEMPTS):
        if first is None:
            break
        found = Run.objects.filter(pk=first).values_list("scheduled_for", "retry_of_id").first()
        if found is None:  # pruned by retention: the retry's own time is what is left
            break
        slot, first = found
    scheduled = slot.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return scheduled, str(run.pk), str(run.attempt or 1), run.trigger


def _finish_values(outcome: Outcome) -> dict[str, Any]:
    """The Run's outcome columns."""
    return finish_columns(outcome.result, started=outcome.started, finished=outcome.finished)


def _log_finish(outcome: Outcome, updated: bool) -> None:
    """Count a finished run; the run's line is logged once its next run is known
    (``log_rescheduled``). ``updated`` is False if its row was no longer running
    (declared lost meanwhile) or is gone (its endpoint was deleted): said here."""
    status = RESULT_STATUS.get(outcome.result.status, RunStatus.FAILURE)
    duration = outcome.result.duration_ms
    if updated:
        metrics.record_run(outcome.run, status=status, duration_ms=max(int(duration), 0))
        return
    if Run.objects.filter(pk=outcome.run.pk).exists():
        word = f"{status} after it was declared lost; the record stays lost"
    else:
        word = f"{status} after its endpoint was deleted; nothing recorded"
    log_event(
        logging.WARNING, f"run {word} ({duration} ms)", claim=outcome.claim, run_id=outcome.run.pk
    )


def _recover(
    endpoint: ClaimedEndpoint, claim: Claim, run: Run, started: datetime, exc: Exception
) -> None:
    """Log and record the error on the run and try again later, so one broken endpoint (a
    corrupt schedule, a body the database refuses) neither loops nor holds its lease.
    The run and its slot are written in one transaction (a savepoint inside the writer's),
    as every finish is. The log line carries ``exc``'s traceback."""
    log_event(logging.ERROR, "scheduler error during the run", claim=claim, run_id=run.pk, exc=exc)
    now = timezone.now()
    note = f"Scheduler error: {type(exc).__name__}: {exc}"
    try:
        with transaction.atomic():
            Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(
                status=RunStatus.FAILURE, finished_at=now
            )
            Run.objects.filter(pk=run.pk).update(error=Concat(F("error"), Value(f"\n{note}")))
            # The endpoint's row first, as every writer of both rows locks them.
            Endpoint.objects.select_for_update(no_key=True).filter(pk=endpoint.pk).exists()
            if Slot.objects.filter(pk=endpoint.pk, claim_token=claim.claim_token).update(
                last_run_at=started,
                next_run_at=now + ERROR_RETRY,
                locked_until=None,
                claim_token=None,
            ):
                Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=F("failure_count") + 1)
    except Exception:
        log_event(logging.ERROR, "could not record the error", claim=claim, run_id=run.pk, exc=True)
