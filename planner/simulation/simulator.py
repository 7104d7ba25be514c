"""The simulator: an endpoint's schedule, run policy and planner over a scenario, in
simulated time.

Nothing here decides anything itself; it strings together the pure parts the engine and
the planner use, in the order the scheduler would:

- a run: the answer the scenario gives at its start (a timeout past ``timeout_ms``),
  judged by the run policy (``engine.running.judged``), and its outcome planned by the
  engine's own ``engine.outcomes.next_state`` (failure count, hints, retry within the
  slot, the governor's plan start to start); the breaker opens as
  ``outcomes.breaker_reason`` says (``breaker.pause_of``);
- a planner cycle every ``planner_seconds``: the endpoints ``planner.analysis``
  selects (new runs and ``next_analysis_at`` passed, a risen failure count, or never
  analysed), analysed by a ``Planner``; the tool calls it made are applied as the
  operations apply them (``apply_call``): a hint nudges the next run through
  ``governor.plan_after_edit`` and ``governor.nudged``, a pause, a resume or a clear
  plans it again as an edit (``operations.held_schedule``).

Runs start exactly on time (no claim latency) and take the answer's latency.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, cast

from endpoints import breaker
from endpoints.engine.claiming import Claim
from endpoints.engine.executor import HttpResult
from endpoints.engine.outcomes import NO_HINT, Outcome, breaker_reason, next_state
from endpoints.engine.running import _run_fields, judged
from endpoints.engine.sql import ClaimedEndpoint
from endpoints.governor import (
    PAUSED,
    EndpointSchedule,
    Plan,
    nudged,
    plan_after_edit,
    plan_next_run,
)
from endpoints.models import Run, RunTrigger
from endpoints.operations import held_schedule
from endpoints.policies import policy_problems, stored_policy
from planner.backends import rules
from planner.simulation.scenarios import Answer, Scenario, ScenarioError
from planner.tools import ACTION_TOOLS, parse_arguments

TENANT_MIN_INTERVAL_MS = 1_000
PLANNER_SECONDS = 60
TARGET_URL = "http://target.invalid/scenario"


@dataclass
class SimEndpoint(ClaimedEndpoint):
    """The endpoint as the engine reads it, plus its slot and what the planner keeps."""

    next_run_at: datetime | None = None
    next_run_source: str = ""
    last_run_at: datetime | None = None
    paused_by_planner: bool = False
    hint_by_planner: bool = False
    last_analyzed_at: datetime | None = None
    next_analysis_at: datetime | None = None
    analyzed_failure_count: int = 0


@dataclass(frozen=True)
class _RunRow:
    """What a run's outcome reads of its Run row (``outcomes.next_state``)."""

    pk: int
    attempt: int
    retry_of_id: int | None


@dataclass(frozen=True)
class Call:
    """One call the target saw, and what the scheduler made of it."""

    started: datetime
    finished: datetime
    source: str  # the governor's source that scheduled it
    attempt: int
    status: str  # success, failure, timeout
    status_code: int | None
    state: str  # the target's state (the scenario's phase)
    next_run_source: str  # what the outcome planned next
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Written:
    """One action the planner wrote (a hint, a pause, a resume, a clear)."""

    at: datetime
    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Analysis:
    """What one analysis did: its accepted action calls, when to look again, its cost."""

    calls: list[tuple[str, dict[str, Any]]]
    next_analysis_in_ms: int
    tokens: int = 0
    reasoning: str = ""


class Planner(Protocol):
    name: str

    def analyse(self, sim: Simulation, now: datetime) -> Analysis: ...


class FixedPlanner:
    """No planner: the baseline (and the run policy) alone."""

    name = "fixed"

    def analyse(self, sim: Simulation, now: datetime) -> Analysis:  # pragma: no cover
        raise AssertionError("the fixed schedule has no planner")


class RulesPlanner:
    """The built-in rules: ``rules.decide`` over what ``rules.rules_input`` reads."""

    name = "rules"

    def analyse(self, sim: Simulation, now: datetime) -> Analysis:
        endpoint = sim.endpoint
        data = rules.rules_input(
            endpoint,
            now,
            sim.observations(),
            tenant_min_interval_ms=endpoint.tenant_min_interval_ms,
            hint_by_planner=endpoint.hint_by_planner,
            paused_by_planner=endpoint.paused_by_planner,
        )
        verdict = rules.decide(data)
        calls = []
        if verdict.tool:
            calls.append((verdict.tool, parse_arguments(verdict.tool, verdict.arguments)))
        return Analysis(calls, verdict.next_analysis_in_ms, reasoning=verdict.reasoning)


def sim_endpoint(config: Any, *, pk: int = 1) -> SimEndpoint:
    """The scenario's endpoint as the engine would read it from the database."""
    policy = dict(config.get("run_policy") or {})
    if problems := policy_problems(policy):
        raise ScenarioError(f"run_policy: {'; '.join(problems)}")
    version = "sim-" + hashlib.sha256(json.dumps(policy, sort_keys=True).encode()).hexdigest()[:16]
    return SimEndpoint(
        pk=pk,
        url=TARGET_URL,
        method="GET",
        headers={},
        secret_header_names=[],
        body=None,
        timeout_ms=int(config.get("timeout_ms", 30_000)),
        max_response_size_kb=100,
        claim_token=None,
        locked_until=None,
        archived_at=None,
        paused_until=None,
        baseline_cron=config.get("baseline_cron", ""),
        timezone=config.get("timezone", "UTC"),
        baseline_interval_ms=config.get("baseline_interval_ms"),
        min_interval_ms=config.get("min_interval_ms"),
        max_interval_ms=config.get("max_interval_ms"),
        ai_hint_interval_ms=None,
        ai_hint_next_run_at=None,
        ai_hint_expires_at=None,
        ai_hint_reason="",
        failure_count=0,
        job_status="active",
        hmac_secret="",
        hmac_secret_previous="",
        tenant_min_interval_ms=int(config.get("tenant_min_interval_ms", TENANT_MIN_INTERVAL_MS)),
        tenant_id=0,
        host_rate_limits_json="{}",  # the simulated target is never rate limited
        retry_attempt=0,
        retry_of_run=None,
        policy_version=version,
        policy=stored_policy({}, policy, version=version),
    )


def result_of(answer: Answer, endpoint: SimEndpoint) -> HttpResult:
    """What the executor would report for ``answer``."""
    if answer.latency_ms > endpoint.timeout_ms:
        return HttpResult(
            status="timeout",
            status_code=None,
            body=None,
            truncated=False,
            size_bytes=0,
            duration_ms=endpoint.timeout_ms,
            error=f"Timed out after {endpoint.timeout_ms} ms",
            final_url=endpoint.url,
        )
    ok = 200 <= answer.status < 300
    text = json.dumps(answer.body)
    return HttpResult(
        status="success" if ok else "failure",
        status_code=answer.status,
        body=answer.body,
        truncated=False,
        size_bytes=len(text),
        duration_ms=answer.latency_ms,
        error="" if ok else f"HTTP {answer.status}",
        final_url=endpoint.url,
        headers=dict(answer.headers),
    )


@dataclass
class Simulation:
    scenario: Scenario
    planner: Planner | None
    offset_s: float = 0.0  # the first run, after the scenario's start
    planner_seconds: float = PLANNER_SECONDS
    planner_phase_s: float = 0.0  # the first planner cycle, after the scenario's start
    endpoint: SimEndpoint = field(init=False)
    calls: list[Call] = field(default_factory=list)
    written: list[Written] = field(default_factory=list)
    sessions: int = 0
    tokens: int = 0
    breaker_opened: int = 0
    on_analysis: Callable[[datetime, Analysis], None] | None = None

    def __post_init__(self) -> None:
        self.endpoint = sim_endpoint(self.scenario.endpoint)

    def observations(self) -> tuple[rules.Observation, ...]:
        """The finished runs, newest first, as the rules see them."""
        return tuple(
            rules.Observation(
                call.status_code,
                call.body,
                call.finished,
                succeeded=call.status == "success",
                headers=call.headers,
            )
            for call in reversed(self.calls[-rules.HISTORY :])
        )

    def run(self) -> Simulation:
        """Play the whole scenario; returns self, with ``calls`` and ``written`` filled."""
        scenario, endpoint = self.scenario, self.endpoint
        first = scenario.start + timedelta(seconds=self.offset_s)
        if endpoint.baseline_cron:
            plan = plan_next_run(first, EndpointSchedule.from_endpoint(endpoint))
            endpoint.next_run_at, endpoint.next_run_source = plan.next_run_at, plan.source
        else:
            endpoint.next_run_at, endpoint.next_run_source = first, "baseline-interval"
        cycle = scenario.start + timedelta(seconds=self.planner_phase_s)
        step = timedelta(seconds=self.planner_seconds)
        end = scenario.end
        while True:
            due = endpoint.next_run_at
            if self.planner is not None and cycle < end and (due is None or cycle < due):
                self._plan(cycle)
                cycle += step
                continue
            if due is None or due >= end:
                break
            cycle = self._run(due, cycle, step)
        return self

    # A run.

    def _run(self, started: datetime, cycle: datetime, step: timedelta) -> datetime:
        """One run at ``started``; returns the next planner cycle's time."""
        endpoint = self.endpoint
        claim = Claim(
            endpoint_id=endpoint.pk,
            claim_token=uuid.uuid4(),
            scheduled_for=started,
            source=endpoint.next_run_source,
            trigger=RunTrigger.SCHEDULED,
        )
        endpoint.claim_token = claim.claim_token
        fields = _run_fields(endpoint, claim, started)
        run = cast(Run, _RunRow(len(self.calls) + 1, fields["attempt"], fields["retry_of_id"]))
        answer = self.scenario.answer_at(started)
        result, kind = judged(result_of(answer, endpoint), endpoint.policy)
        finished = started + timedelta(milliseconds=result.duration_ms)
        # Planner cycles during the request see it running (not finished): their hints
        # are read by the outcome's plan, as the engine re-reads them.
        while self.planner is not None and cycle < finished and cycle < self.scenario.end:
            self._plan(cycle)
            cycle += step
        outcome = Outcome(endpoint, claim, run, started, finished, result, failure_kind=kind)
        values = next_state(outcome, endpoint)
        for name, value in values.items():
            setattr(endpoint, name, value)
        endpoint.claim_token = None
        if reason := breaker_reason(outcome, values):
            self._open_breaker(reason, finished)
        self.calls.append(
            Call(
                started=started,
                finished=finished,
                source=claim.source,
                attempt=run.attempt,
                status=result.status,
                status_code=result.status_code,
                state=answer.state,
                next_run_source=endpoint.next_run_source,
                body=result.body,
                headers=dict(result.headers),
            )
        )
        return cycle

    def _open_breaker(self, reason: str, now: datetime) -> None:
        endpoint = self.endpoint
        if endpoint.paused_until is not None and endpoint.paused_until > now:
            return
        hold, _text, _source = breaker.pause_of(reason, endpoint.policy.breaker_cooldown_ms)
        endpoint.paused_until = now + timedelta(milliseconds=hold)
        endpoint.paused_by_planner = False
        endpoint.next_run_at, endpoint.next_run_source = endpoint.paused_until, PAUSED
        self.breaker_opened += 1

    # The planner.

    def _due_for_analysis(self, now: datetime) -> bool:
        """``planner.analysis.due_for_analysis`` for this one endpoint."""
        endpoint = self.endpoint
        if not self.calls:  # (a call is kept once it finished: before any later cycle)
            return False
        if endpoint.last_analyzed_at is None:
            return True
        new_runs = self.calls[-1].finished > endpoint.last_analyzed_at
        time_has_come = endpoint.next_analysis_at is None or endpoint.next_analysis_at <= now
        return (new_runs and time_has_come) or (
            endpoint.failure_count > endpoint.analyzed_failure_count
        )

    def _plan(self, now: datetime) -> None:
        assert self.planner is not None
        if not self._due_for_analysis(now):
            return
        endpoint = self.endpoint
        failure_count = endpoint.failure_count
        analysis = self.planner.analyse(self, now)
        self.sessions += 1
        self.tokens += analysis.tokens
        for tool, arguments in analysis.calls:
            apply_call(self, now, tool, arguments)
        endpoint.last_analyzed_at = now
        endpoint.next_analysis_at = now + timedelta(milliseconds=analysis.next_analysis_in_ms)
        endpoint.analyzed_failure_count = failure_count
        if self.on_analysis is not None:
            self.on_analysis(now, analysis)


def apply_call(sim: Simulation, now: datetime, tool: str, arguments: dict[str, Any]) -> None:
    """One accepted action call, as ``planner.tools`` carries it out through
    ``endpoints.operations`` (hint + nudge, pause or resume + plan, clear + plan)."""
    if tool not in ACTION_TOOLS:
        return
    endpoint = sim.endpoint
    sim.written.append(Written(now, tool, arguments))
    if tool == "propose_interval" or tool == "propose_next_time":
        endpoint.ai_hint_expires_at = now + timedelta(minutes=arguments["ttlMinutes"])
        endpoint.ai_hint_reason = arguments.get("reason", "")
        if tool == "propose_interval":
            endpoint.ai_hint_interval_ms = int(arguments["intervalMs"])
        else:
            endpoint.ai_hint_next_run_at = datetime.fromisoformat(arguments["nextRunAtIso"])
        endpoint.hint_by_planner = True
        _nudge(endpoint, now)
        return
    if tool == "pause_until":
        until = arguments["untilIso"]
        endpoint.paused_until = datetime.fromisoformat(until) if until else None
        endpoint.paused_by_planner = True
    else:  # clear_hints
        for name, value in NO_HINT.items():
            setattr(endpoint, name, value)
        endpoint.hint_by_planner = True
    _replan(endpoint, now)


def _plan_held(endpoint: SimEndpoint, now: datetime) -> Plan:
    held = held_schedule(cast(Any, endpoint))
    return plan_after_edit(now, endpoint.last_run_at, held)


def _nudge(endpoint: SimEndpoint, now: datetime) -> None:
    if endpoint.claim_token is not None:
        return  # a run is in flight: its outcome plans with the hint
    plan = _plan_held(endpoint, now)
    retrying = endpoint.next_run_source == "retry"
    if not retrying and endpoint.next_run_at is not None:
        plan = nudged(Plan(endpoint.next_run_at, endpoint.next_run_source), plan)
    endpoint.next_run_at, endpoint.next_run_source = plan.next_run_at, plan.source


def _replan(endpoint: SimEndpoint, now: datetime) -> None:
    if endpoint.claim_token is not None:
        return
    plan = _plan_held(endpoint, now)
    endpoint.next_run_at, endpoint.next_run_source = plan.next_run_at, plan.source
