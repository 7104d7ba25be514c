"""Planner workflows: which endpoints to analyse, the leases, and session recording.

- ``plan_cycle`` picks endpoints due for analysis (new runs and ``next_analysis_at``
  passed, a risen failure count, or never analysed with a run; paused ones too), round
  robin across tenants, at most CRONICORN_PLANNER_BATCH_SIZE, and analyses each. A lease
  on the ``planner-cycle`` Heartbeat row keeps cycles from overlapping.
- ``analyze_endpoint`` runs one session under the endpoint's analysis lease
  (``analysis_locked_until``, taken by a conditional update), so no endpoint is analysed
  twice at once.
- An ``llm`` session first reserves CRONICORN_LLM_SESSION_TOKENS of its tenant's monthly
  token budget (``open_session``, under a lock on the tenant's row) and is settled to
  what it spent when it finishes; without room in the budget it is a ``rules`` session
  that says why.
- Every session is recorded, also when the backend fails (error, tokens so far); a
  failed session pushes ``next_analysis_at`` back with backoff and no planner error
  leaves ``plan_cycle``: the scheduler never sees one.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet, Sum, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from endpoints.engine import metrics
from endpoints.jsonb import storable
from endpoints.models import Endpoint, Heartbeat, JobStatus, Run, RunStatus, Tenant
from planner.backends import llm, rules
from planner.models import AnalysisSession, Backend, SessionStatus
from planner.tools import EndpointTools

logger = logging.getLogger("cronicorn.planner")

CYCLE_LEASE_ROW = "planner-cycle"
HEARTBEAT_ROW = "planner"
RULES_LEASE = timedelta(minutes=2)
# The LLM conversation as a whole gets ten request timeouts; the lease outlasts it.
LLM_BUDGET_TIMEOUTS = 10
LEASE_MARGIN = timedelta(minutes=1)
DEFAULT_NEXT_ANALYSIS = timedelta(minutes=15)
FAILURE_BACKOFF_BASE = timedelta(minutes=5)
FAILURE_BACKOFF_MAX = timedelta(hours=24)
NEVER = datetime(2000, 1, 1, tzinfo=UTC)


class AnalysisBusy(Exception):
    """The endpoint is being analysed right now; the message says until when."""


def analyze_endpoint(
    endpoint: Endpoint, *, now: datetime | None = None, backend: str | None = None
) -> AnalysisSession:
    """Analyse one endpoint now (under its lease) and return the recorded session."""
    now = now or timezone.now()
    name = backend or settings.CRONICORN_PLANNER_BACKEND
    if name not in Backend.values:
        raise ValueError(f"Unknown planner backend {name!r}; use one of: {', '.join(Backend)}.")
    lease_until = take_analysis_lease(endpoint.pk, now=now, backend=name)
    if lease_until is None:
        endpoint.refresh_from_db(fields=["analysis_locked_until"])
        raise AnalysisBusy(
            f"{endpoint} is being analysed until {endpoint.analysis_locked_until}; try later."
        )
    return _analyze_leased(endpoint, now=now, backend=name, lease_until=lease_until)


def plan_cycle(*, now: datetime | None = None) -> list[AnalysisSession]:
    """One planner cycle; [] when another cycle is still running."""
    started = now or timezone.now()
    backend = settings.CRONICORN_PLANNER_BACKEND
    token = _take_cycle_lease(started, started + analysis_lease(backend) + LEASE_MARGIN)
    if token is None:
        return []
    sessions: list[AnalysisSession] = []
    try:
        for endpoint in select_for_analysis(
            now=started, limit=settings.CRONICORN_PLANNER_BATCH_SIZE
        ):
            at = now or timezone.now()
            if not _renew_cycle_lease(token, at + analysis_lease(backend) + LEASE_MARGIN):
                break
            session = _analyze_safely(endpoint, now=at, backend=backend)
            if session is not None:
                sessions.append(session)
    finally:
        _release_cycle_lease(token, now or timezone.now())
    failed = sum(session.status == SessionStatus.FAILED for session in sessions)
    Heartbeat.beat(HEARTBEAT_ROW, now=now or timezone.now(), sessions=len(sessions), failed=failed)
    return sessions


def _analyze_safely(endpoint: Endpoint, *, now: datetime, backend: str) -> AnalysisSession | None:
    try:
        lease_until = take_analysis_lease(endpoint.pk, now=now, backend=backend)
        if lease_until is None:
            return None
        return _analyze_leased(endpoint, now=now, backend=backend, lease_until=lease_until)
    except Exception:
        # A planner bug (or a database hiccup) costs one endpoint's analysis, never the
        # cycle, and never reaches the scheduler.
        logger.exception("planner: analysing endpoint %s failed", endpoint.pk)
        return None


# Selection.


def select_for_analysis(*, now: datetime, limit: int) -> list[Endpoint]:
    """Endpoints due for analysis, round robin across tenants (each tenant's most
    overdue first), at most ``limit``. Leases are taken per endpoint right before its
    analysis, so a long cycle never sits on leases it has not reached yet."""
    due_first = [F("next_analysis_at").asc(nulls_first=True), F("id").asc()]
    ranked = due_for_analysis(now=now).annotate(
        turn=Window(RowNumber(), partition_by=[F("job__tenant_id")], order_by=due_first)
    )
    return list(ranked.select_related("job__tenant").order_by("turn", *due_first)[:limit])


def due_for_analysis(*, now: datetime) -> QuerySet[Endpoint]:
    finished = Run.objects.filter(endpoint=OuterRef("pk")).exclude(status=RunStatus.RUNNING)
    new_runs = finished.filter(finished_at__gt=OuterRef("last_analyzed_at"))
    # The latest session failed and is still backing off: even a risen failure count
    # waits, or a broken backend would be retried (and paid for) every cycle.
    backing_off = AnalysisSession.objects.filter(
        endpoint=OuterRef("pk"),
        status=SessionStatus.FAILED,
        started_at__gte=OuterRef("last_analyzed_at"),
        next_analysis_at__gt=now,
    )
    time_has_come = Q(next_analysis_at__isnull=True) | Q(next_analysis_at__lte=now)
    return (
        Endpoint.objects.live()
        .exclude(job__status=JobStatus.ARCHIVED)
        .filter(Q(analysis_locked_until__isnull=True) | Q(analysis_locked_until__lte=now))
        .filter(
            (Q(last_analyzed_at__isnull=True) & Exists(finished))
            | (Exists(new_runs) & time_has_come)
            | (Q(failure_count__gt=F("analyzed_failure_count")) & ~Exists(backing_off))
        )
    )


# Leases.


def analysis_lease(backend: str) -> timedelta:
    if backend == Backend.LLM:
        return llm_budget() + LEASE_MARGIN
    return RULES_LEASE


def llm_budget() -> timedelta:
    return timedelta(seconds=settings.CRONICORN_LLM_TIMEOUT_SECONDS * LLM_BUDGET_TIMEOUTS)


def take_analysis_lease(endpoint_id: int, *, now: datetime, backend: str) -> datetime | None:
    """The lease's expiry when we won it (conditional update), else None."""
    until = now + analysis_lease(backend)
    won = (
        Endpoint.objects.filter(pk=endpoint_id, archived_at__isnull=True)
        .filter(Q(analysis_locked_until__isnull=True) | Q(analysis_locked_until__lte=now))
        .update(analysis_locked_until=until)
    )
    return until if won else None


def _take_cycle_lease(now: datetime, until: datetime) -> str | None:
    Heartbeat.objects.get_or_create(name=CYCLE_LEASE_ROW, defaults={"at": NEVER})
    token = uuid.uuid4().hex
    won = Heartbeat.objects.filter(name=CYCLE_LEASE_ROW, at__lte=now).update(
        at=until, info={"owner": token}
    )
    return token if won else None


def _renew_cycle_lease(token: str, until: datetime) -> bool:
    return bool(Heartbeat.objects.filter(name=CYCLE_LEASE_ROW, info__owner=token).update(at=until))


def _release_cycle_lease(token: str, now: datetime) -> None:
    Heartbeat.objects.filter(name=CYCLE_LEASE_ROW, info__owner=token).update(at=now, info={})


# One session.


def open_session(
    endpoint: Endpoint, requested: str, *, now: datetime, lease_until: datetime
) -> AnalysisSession:
    """The session row, with the backend it will use. An ``llm`` session reserves
    CRONICORN_LLM_SESSION_TOKENS of its tenant's monthly budget first; when the budget
    left cannot cover that, the session is a ``rules`` one and its note says why.

    Reserving is a check and a write under one lock on the tenant's row (PostgreSQL's
    row lock; SQLite's BEGIN IMMEDIATE takes the database's), so concurrent analyses of
    one tenant reserve one after another and never together pass the budget. The
    session row is the reservation: it is settled by ``_finish`` (what the session spent
    counts from then on) and, if the process dies, it lapses with the analysis lease."""
    if requested != Backend.LLM:
        return _create_session(endpoint, Backend.RULES, now=now)
    allowance = settings.CRONICORN_LLM_SESSION_TOKENS
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=endpoint.job.tenant_id)
        committed = tokens_committed_this_month(tenant.pk, now=now)
        if tenant.monthly_token_budget - committed >= allowance:
            return _create_session(
                endpoint,
                Backend.LLM,
                now=now,
                reserved_tokens=allowance,
                reserved_until=lease_until,
            )
    note = (
        f"Fell back to rules: tenant {tenant.name} has spent or reserved {committed} of its "
        f"{tenant.monthly_token_budget} LLM tokens this month, and an analysis reserves "
        f"{allowance} (CRONICORN_LLM_SESSION_TOKENS)."
    )
    return _create_session(endpoint, Backend.RULES, now=now, note=note)


def _create_session(
    endpoint: Endpoint, backend: str, *, now: datetime, **fields: Any
) -> AnalysisSession:
    return AnalysisSession.objects.create(
        endpoint=endpoint,
        backend=backend,
        model=settings.CRONICORN_LLM_MODEL if backend == Backend.LLM else "",
        started_at=now,
        failure_count_snapshot=endpoint.failure_count,
        **fields,
    )


def tokens_spent_this_month(tenant_id: int, *, now: datetime) -> int:
    spent = (
        AnalysisSession.objects.this_month(now)
        .filter(endpoint__job__tenant_id=tenant_id)
        .aggregate(total=Sum("total_tokens"))["total"]
    )
    return spent or 0


def tokens_committed_this_month(tenant_id: int, *, now: datetime) -> int:
    """Spent, plus what running sessions have reserved beyond what they spent so far."""
    sessions = AnalysisSession.objects.this_month(now).filter(endpoint__job__tenant_id=tenant_id)
    return sessions.tokens_committed(now)


def _analyze_leased(
    endpoint: Endpoint, *, now: datetime, backend: str, lease_until: datetime
) -> AnalysisSession:
    clock = time.monotonic()
    endpoint = Endpoint.objects.select_related("job__tenant").get(pk=endpoint.pk)
    session = open_session(endpoint, backend, now=now, lease_until=lease_until)
    tools = EndpointTools(endpoint=endpoint, session=session, now=now)
    usage = llm.Usage(on_add=partial(_record_spend, session.pk))
    error = _run_backend(session, tools, usage, deadline=clock + llm_budget().total_seconds())
    _finish(session, tools, usage, error=error, elapsed=time.monotonic() - clock)
    Endpoint.objects.filter(pk=endpoint.pk, analysis_locked_until=lease_until).update(
        last_analyzed_at=now,
        next_analysis_at=session.next_analysis_at,
        analyzed_failure_count=session.failure_count_snapshot,
        analysis_locked_until=None,
    )
    logger.info(
        "planner: %s analysis of %s %s (%s tokens)%s",
        session.backend,
        endpoint,
        session.status,
        session.total_tokens,
        f": {session.error}" if session.error else "",
    )
    return session


def _record_spend(session_id: int, usage: llm.Usage) -> None:
    """What a running session has spent so far, after each reply: a process that dies
    mid-conversation leaves it counted once its reservation lapses."""
    AnalysisSession.objects.filter(pk=session_id, status=SessionStatus.RUNNING).update(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
    )


def _run_backend(
    session: AnalysisSession, tools: EndpointTools, usage: llm.Usage, *, deadline: float
) -> str:
    """Run the conversation; the error text for the session ("" when it went through)."""
    backend = session.backend
    try:
        if backend == Backend.LLM:
            llm.analyze(tools, usage, deadline=deadline, allowance=session.reserved_tokens)
        else:
            rules.analyze(tools)
    except llm.LLMError as exc:
        return str(exc)
    except Exception as exc:
        logger.exception("planner: %s backend failed on endpoint %s", backend, tools.endpoint.pk)
        return f"Internal planner error ({type(exc).__name__}): {exc}"
    if tools.submission is None:
        return "The analysis ended without submit_analysis."
    return ""


def _finish(
    session: AnalysisSession,
    tools: EndpointTools,
    usage: llm.Usage,
    *,
    error: str,
    elapsed: float,
) -> None:
    submission = tools.submission
    session.status = SessionStatus.FAILED if error else SessionStatus.SUCCEEDED
    session.error = storable(error)
    session.finished_at = session.started_at + timedelta(seconds=elapsed)
    session.duration_ms = int(elapsed * 1000)
    session.tool_calls = storable(tools.calls)
    session.actions_taken = storable(tools.actions)
    session.prompt_tokens = usage.prompt_tokens
    session.completion_tokens = usage.completion_tokens
    session.total_tokens = usage.total_tokens
    if submission is not None:
        session.reasoning = storable(submission.reasoning)
        session.confidence = submission.confidence_score
    rejected = [call["error"] for call in tools.calls if "error" in call]
    if rejected:
        session.note = storable(
            " ".join(
                filter(None, [session.note, f"{len(rejected)} tool call(s) refused: {rejected[0]}"])
            )
        )
    session.next_analysis_at = session.started_at + _next_analysis_delay(session, tools)
    session.save(
        update_fields=[
            "status",
            "error",
            "finished_at",
            "duration_ms",
            "tool_calls",
            "actions_taken",
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
            "reasoning",
            "confidence",
            "note",
            "next_analysis_at",
        ]
    )
    metrics.record_planner_session(
        backend=session.backend, status=session.status, tokens=session.total_tokens or 0
    )


def _next_analysis_delay(session: AnalysisSession, tools: EndpointTools) -> timedelta:
    if session.status == SessionStatus.FAILED:
        earlier = AnalysisSession.objects.filter(endpoint_id=session.endpoint_id).exclude(
            pk=session.pk
        )
        streak = 1
        for status in earlier.values_list("status", flat=True)[:8]:
            if status != SessionStatus.FAILED:
                break
            streak += 1
        return min(FAILURE_BACKOFF_BASE * 2 ** (streak - 1), FAILURE_BACKOFF_MAX)
    requested = tools.submission.next_analysis_in_ms if tools.submission else None
    return timedelta(milliseconds=requested) if requested else DEFAULT_NEXT_ANALYSIS
