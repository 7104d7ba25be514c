"""The rules backend: decisions from response bodies, then end to end through the scheduler."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from endpoints import operations
from endpoints.engine import claiming, running
from endpoints.engine.executor import NetworkPolicy
from endpoints.governor import MAX_PLANNABLE_MS
from endpoints.models import Endpoint, HintHistory, HintKind, Run
from planner.analysis import analyze_endpoint, plan_cycle
from planner.backends.rules import (
    Observation,
    RulesInput,
    Verdict,
    baseline_interval_ms,
    body_severity,
    decide,
    queue_trend,
    retry_after,
)
from planner.models import AnalysisSession
from tests.planning import policy_job

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
MINUTE = 60_000


def _observations(*bodies: Any, code: int = 200) -> tuple[Observation, ...]:
    """Newest first, one minute apart."""
    return tuple(
        Observation(code, body, NOW - timedelta(minutes=index)) for index, body in enumerate(bodies)
    )


def _decide(*bodies: Any, code: int = 200, **fields: Any) -> Verdict:
    values: dict[str, Any] = {"now": NOW, "baseline_ms": 4 * MINUTE}
    values.update(fields)
    return decide(RulesInput(observations=_observations(*bodies, code=code), **values))


# Severity and trends.


@pytest.mark.parametrize(
    ("body", "severity"),
    [
        ({"status": "healthy"}, "healthy"),
        ({"status": "Degraded"}, "degraded"),
        ({"status": "critical"}, "critical"),
        ({"status": "down"}, "critical"),
        ({"error_rate_pct": 1.2}, "healthy"),
        ({"error_rate_pct": 6}, "degraded"),
        ({"error_rate_pct": 25.0}, "critical"),
        ({"current_value": 250, "warning_threshold": 300, "critical_threshold": 500}, "healthy"),
        ({"current_value": 300, "warning_threshold": 300, "critical_threshold": 500}, "degraded"),
        ({"current_value": 800, "warning_threshold": 300, "critical_threshold": 500}, "critical"),
        ({"status": "healthy", "error_rate_pct": 30}, "critical"),
        ({"status": 3, "error_rate_pct": "lots", "current_value": True}, "healthy"),
        ("plain text", "healthy"),
        (None, "healthy"),
    ],
)
def test_the_body_says_how_bad_things_are(body: Any, severity: str) -> None:
    assert body_severity(body)[0] == severity


@pytest.mark.parametrize(
    ("depths", "trend"),
    [
        ((30, 20, 10), "rising"),
        ((30, 30, 10), None),
        ((10, 20, 30), None),
        ((0, 0, 0, 0, 0), "empty"),
        ((0, 0, 0, 0), None),
        ((0, 0, 0, 0, 3), None),
    ],
)
def test_queue_depth_trends_read_newest_first(depths: tuple[int, ...], trend: str | None) -> None:
    observations = _observations(*({"queue_depth": depth} for depth in depths))
    assert queue_trend(observations) == trend


@pytest.mark.parametrize(
    ("body", "seconds"),
    [
        ({"retry_after": 30}, 30),
        ({"retry_after_seconds": "45"}, 45),
        ({"retryAfter": "2026-11-22T12:02:00Z"}, 120),
        ({"Retry-After": "Sun, 22 Nov 2026 12:01:00 GMT"}, 60),
        ({"retry_after": -5}, 300),
        # 401 digits: more than a float holds; the longest wait anything is planned with.
        ({"retry_after": 10**400}, MAX_PLANNABLE_MS // 1000),
        ({"retry_after": "9" * 401}, 300),  # as text it reads as infinity: no wait from it
        ({"error": "slow down"}, 300),
        ("Too Many Requests", 300),
    ],
)
def test_retry_after_comes_from_the_body_or_a_default(body: Any, seconds: int) -> None:
    wait, _ = retry_after({}, body, NOW, code=503)
    assert wait == timedelta(seconds=seconds)


def test_without_retry_after_a_429_waits_out_a_rate_limit_window_and_a_503_less() -> None:
    limited, said = retry_after({}, {}, NOW, code=429)
    unavailable, _ = retry_after({}, {}, NOW, code=503)
    told, _ = retry_after({}, {"retry_after": 30}, NOW, code=429)

    assert (limited, unavailable) == (timedelta(minutes=15), timedelta(minutes=5))
    assert said == "without Retry-After: backing off 900 s"
    assert told == timedelta(seconds=30)  # the answer's own wait wins whatever the code


@pytest.mark.parametrize(
    ("header", "seconds", "source"),
    [
        ("120", 120, "Retry-After header"),
        ("Sun, 22 Nov 2026 12:03:00 GMT", 180, "Retry-After header"),
        ("soon", 30, "retry_after"),  # unreadable: the body's value is used
        ("Sun, 22 Nov 2026 11:00:00 GMT", 30, "retry_after"),  # already past
    ],
)
def test_the_retry_after_header_wins_over_the_body(header: str, seconds: int, source: str) -> None:
    wait, said = retry_after({"retry-after": header}, {"retry_after": 30}, NOW, code=429)
    assert wait == timedelta(seconds=seconds)
    assert f"({source})" in said


# Decisions.


def test_critical_tightens_to_a_quarter_and_degraded_to_half_the_baseline() -> None:
    critical = _decide({"status": "critical"})
    degraded = _decide({"status": "degraded"})

    assert critical.tool == "propose_interval"
    assert critical.arguments["intervalMs"] == MINUTE
    assert "status is 'critical'" in critical.reasoning
    assert "tightening to every minute" in critical.reasoning
    assert degraded.arguments["intervalMs"] == 2 * MINUTE


def test_tightening_stays_inside_the_minimum_and_relaxing_inside_the_maximum() -> None:
    tightened = _decide({"status": "critical"}, min_interval_ms=3 * MINUTE)
    relaxed = _decide(*[{"queue_depth": 0}] * 5, max_interval_ms=5 * MINUTE)

    assert tightened.arguments["intervalMs"] == 3 * MINUTE
    assert relaxed.tool == "propose_interval"
    assert relaxed.arguments["intervalMs"] == 5 * MINUTE


def test_nothing_is_written_when_the_bounds_pin_the_baseline() -> None:
    verdict = _decide({"status": "critical"}, min_interval_ms=4 * MINUTE)
    assert verdict.tool is None
    assert "bounds keep it at the baseline" in verdict.reasoning


def test_a_rising_queue_tightens_and_an_empty_one_relaxes() -> None:
    rising = _decide({"queue_depth": 30}, {"queue_depth": 20}, {"queue_depth": 10})
    empty = _decide(*[{"queue_depth": 0}] * 5)

    assert rising.arguments["intervalMs"] == 2 * MINUTE
    assert "queue_depth rose" in rising.reasoning
    assert empty.arguments["intervalMs"] == 8 * MINUTE
    assert "relaxing" in empty.reasoning


def test_healthy_after_tightening_clears_the_planners_hint() -> None:
    verdict = _decide(
        {"status": "healthy"},
        planner_interval_ms=MINUTE,
        planner_hint_expires_at=NOW + timedelta(minutes=30),
    )
    assert verdict.tool == "clear_hints"


def test_healthy_without_a_hint_changes_nothing() -> None:
    verdict = _decide({"status": "healthy"})
    assert verdict.tool is None
    assert "baseline stands" in verdict.reasoning


def test_a_standing_hint_is_not_rewritten_until_half_its_ttl_is_spent() -> None:
    fresh = _decide(
        {"status": "critical"},
        planner_interval_ms=MINUTE,
        planner_hint_expires_at=NOW + timedelta(minutes=50),
    )
    aging = _decide(
        {"status": "critical"},
        planner_interval_ms=MINUTE,
        planner_hint_expires_at=NOW + timedelta(minutes=20),
    )
    assert fresh.tool is None and "still stands" in fresh.reasoning
    assert aging.tool == "propose_interval"


def test_a_rate_limit_pauses_until_retry_after_capped_at_an_hour() -> None:
    short = _decide({"retry_after_seconds": 90}, code=429)
    long = _decide({"retry_after": 86_400}, code=503)

    assert short.tool == "pause_until"
    assert short.arguments["untilIso"] == (NOW + timedelta(seconds=90)).isoformat()
    assert long.arguments["untilIso"] == (NOW + timedelta(hours=1)).isoformat()
    assert "capped" in long.reasoning


def test_a_rate_limit_is_left_to_a_run_policy_that_retries_it_within_its_slot() -> None:
    retrying = "the run policy retries this failure within its slot (attempt 2 of 3)"
    bare = _decide({}, code=503, policy_retry=retrying)
    said = _decide({"retry_after": 90}, code=429, policy_retry=retrying)
    spent = _decide({}, code=503)

    assert bare.tool is None and said.tool is None
    assert bare.reasoning == (
        f"HTTP 503: {retrying}, as a person configured; the planner does not pause over it "
        "(the retry waits for a Retry-After itself)."
    )
    # Retries spent (or none configured): the planner's own backoff.
    assert spent.tool == "pause_until"
    assert spent.arguments["untilIso"] == (NOW + timedelta(minutes=5)).isoformat()


def test_a_503_without_retry_after_keeps_the_retry_the_person_configured(
    make_endpoint: Callable[..., Endpoint], target: Any, loopback_allowed: None
) -> None:
    # The case: the rules paused the endpoint 5 minutes on a 503 without
    # Retry-After, overriding the run policy's retry in 10 s.
    target.reply("/flaky", status=503)
    endpoint = make_endpoint(url=target.url("/flaky"), baseline_interval_ms=600_000)
    policy_job(endpoint.job, retry_attempts=3, retry_delay_ms=10_000)
    operations.run_now(endpoint, now=timezone.now())
    [claim] = claiming.claim_due_endpoints(now=timezone.now(), limit=10, horizon_ms=0)
    failed = running.execute_claim(claim)
    failed.refresh_from_db()
    endpoint.refresh_from_db()
    retry_at = endpoint.next_run_at

    session = analyze_endpoint(endpoint, now=timezone.now(), backend="rules")

    endpoint.refresh_from_db()
    assert failed.status_code == 503 and endpoint.retry_attempt == 2
    assert retry_at == failed.finished_at + timedelta(seconds=10)
    assert endpoint.paused_until is None
    assert (endpoint.next_run_at, endpoint.next_run_source) == (retry_at, "retry")
    assert "retries this failure within its slot (attempt 2 of 3)" in session.reasoning
    assert not HintHistory.objects.filter(endpoint=endpoint).exists()


def test_once_the_retries_are_spent_a_503_without_retry_after_pauses_the_planner_backoff(
    make_endpoint: Callable[..., Endpoint], target: Any, loopback_allowed: None
) -> None:
    target.reply("/flaky", status=503)
    endpoint = make_endpoint(url=target.url("/flaky"), baseline_interval_ms=60_000)
    policy_job(endpoint.job, retry_attempts=2, retry_delay_ms=1_000)
    operations.run_now(endpoint, now=timezone.now())
    [first] = claiming.claim_due_endpoints(now=timezone.now(), limit=10, horizon_ms=0)
    running.execute_claim(first)
    endpoint.refresh_from_db()
    assert (endpoint.next_run_source, endpoint.retry_attempt) == ("retry", 2)
    [retry] = claiming.claim_due_endpoints(
        now=endpoint.next_run_at + timedelta(milliseconds=1), limit=10, horizon_ms=0
    )
    last = running.execute_claim(retry)
    last.refresh_from_db()
    endpoint.refresh_from_db()
    assert (last.attempt, last.status_code, endpoint.retry_attempt) == (2, 503, 0)
    assert endpoint.next_run_source == "baseline-interval"  # 2 min: the failure backoff

    session = analyze_endpoint(endpoint, now=timezone.now(), backend="rules")

    endpoint.refresh_from_db()
    # Both attempts answered 503: 5 minutes doubled once (2 rate-limited answers in a row).
    assert endpoint.paused_until == last.finished_at + timedelta(minutes=10)
    assert endpoint.next_run_source == "paused"
    assert (
        "HTTP 503 without Retry-After: backing off 600 s (2 rate-limited answers in a row)"
        in session.reasoning
    )
    [pause] = HintHistory.objects.filter(endpoint=endpoint)
    assert pause.kind == HintKind.PAUSE and pause.session_id == session.pk


# The 503 rule (README "The planner"), branch by branch: while the run policy retries
# the failure within its slot, no pause (above, and end to end below); after the
# retries, or with none, the answer's Retry-After (header, else body), capped at an
# hour (above); without one 5 minutes (a 429: 15), doubled per rate-limited answer in
# a row, and no pause when the failure backoff already comes later.


def test_after_the_retries_a_503_pauses_until_its_retry_after_header() -> None:
    answer = Observation(503, {}, NOW, headers={"retry-after": "120"})
    verdict = decide(RulesInput(now=NOW, baseline_ms=MINUTE, observations=(answer,)))

    assert verdict.tool == "pause_until"
    assert verdict.arguments["untilIso"] == (NOW + timedelta(seconds=120)).isoformat()
    assert "(Retry-After header)" in verdict.reasoning


def test_without_retry_after_the_pause_doubles_for_each_rate_limited_answer_in_a_row() -> None:
    def pause_minutes(*codes: int) -> float:
        verdict = _decide_codes(*codes)
        until = datetime.fromisoformat(verdict.arguments["untilIso"])
        return (until - NOW) / timedelta(minutes=1)

    # The latest answer's code picks the first pause: a 429 15 min, a 503 5 min.
    assert pause_minutes(429) == 15
    assert pause_minutes(429, 200, 429) == 15
    assert pause_minutes(429, 503) == 30
    assert pause_minutes(429, 429, 429) == 60
    assert pause_minutes(503) == 5
    assert pause_minutes(503, 429) == 10
    assert pause_minutes(503, 429, 429, 429) == 40
    assert pause_minutes(*[429] * 10) == 60  # capped at an hour
    assert pause_minutes(*[503] * 10) == 60
    assert "2 rate-limited answers in a row" in _decide_codes(429, 429).reasoning


def _decide_codes(*codes: int, **fields: Any) -> Verdict:
    observations = tuple(
        Observation(code, {}, NOW - timedelta(minutes=index)) for index, code in enumerate(codes)
    )
    return decide(RulesInput(now=NOW, baseline_ms=MINUTE, observations=observations, **fields))


def test_without_retry_after_no_pause_when_the_backoff_already_comes_later() -> None:
    later = _decide_codes(503, next_run_at=NOW + timedelta(minutes=8))
    sooner = _decide_codes(503, next_run_at=NOW + timedelta(minutes=2))
    told = decide(
        RulesInput(
            now=NOW,
            baseline_ms=MINUTE,
            observations=(Observation(429, {"retry_after": 60}, NOW),),
            next_run_at=NOW + timedelta(minutes=8),
        )
    )

    assert later.tool is None
    assert "already comes later (the failure backoff); no pause needed" in later.reasoning
    assert sooner.tool == "pause_until"
    # A wait the answer gave is kept to: the run comes right after it, not at the backoff.
    assert told.arguments["untilIso"] == (NOW + timedelta(seconds=60)).isoformat()


# Relaxing a calm endpoint (rule 5).


def test_six_calm_answers_relax_to_twice_the_baseline_within_the_maximum() -> None:
    roomy = _decide(*[{"status": "healthy"}] * 6, max_interval_ms=10 * MINUTE)
    tight = _decide(*[{"status": "healthy"}] * 6, max_interval_ms=5 * MINUTE)
    bodiless = _decide(*[None] * 6, max_interval_ms=10 * MINUTE)

    assert roomy.tool == "propose_interval" and roomy.arguments["intervalMs"] == 8 * MINUTE
    assert "the last 6 answers were calm" in roomy.reasoning
    assert tight.arguments["intervalMs"] == 5 * MINUTE
    assert bodiless.arguments["intervalMs"] == 8 * MINUTE


def test_a_calm_endpoint_is_not_relaxed_without_room_or_a_calm_streak() -> None:
    healthy = [{"status": "healthy"}] * 6
    no_max = _decide(*healthy)
    max_at_baseline = _decide(*healthy, max_interval_ms=4 * MINUTE)
    five = _decide(*healthy[:5], {"status": "degraded"}, max_interval_ms=10 * MINUTE)
    queue = _decide(*[{"queue_depth": 7}] * 6, max_interval_ms=10 * MINUTE)
    failed = (Observation(500, None, NOW - timedelta(minutes=6), succeeded=False),)
    after_failure = decide(
        RulesInput(
            now=NOW,
            baseline_ms=4 * MINUTE,
            observations=_observations(*healthy[:5]) + failed,
            max_interval_ms=10 * MINUTE,
        )
    )

    assert [no_max.tool, max_at_baseline.tool, five.tool, queue.tool, after_failure.tool] == [
        None
    ] * 5


def test_a_rate_limit_whose_wait_is_over_needs_no_pause() -> None:
    stale = decide(
        RulesInput(
            now=NOW,
            baseline_ms=MINUTE,
            observations=(Observation(429, {"retry_after": 30}, NOW - timedelta(minutes=5)),),
        )
    )
    assert stale.tool is None and "already over" in stale.reasoning


def test_the_planners_pause_is_lifted_once_the_endpoint_answers_normally() -> None:
    verdict = _decide(
        {"status": "healthy"}, paused_until=NOW + timedelta(minutes=10), paused_by_planner=True
    )
    assert verdict.tool == "pause_until"
    assert verdict.arguments["untilIso"] is None


def test_a_persons_pause_or_hint_is_left_alone() -> None:
    paused = _decide({"status": "critical"}, paused_until=NOW + timedelta(minutes=10))
    hinted = _decide({"status": "critical"}, person_hint_active=True)
    assert paused.tool is None and "Paused by a person" in paused.reasoning
    assert hinted.tool is None and "person's hint" in hinted.reasoning


def test_a_failing_endpoint_drops_the_planners_tightening_so_backoff_applies() -> None:
    failing = (Observation(500, {"status": "critical"}, NOW, succeeded=False),)
    hinted = decide(
        RulesInput(
            now=NOW,
            baseline_ms=MINUTE,
            observations=failing,
            planner_interval_ms=15_000,
            planner_hint_expires_at=NOW + timedelta(minutes=30),
        )
    )
    plain = decide(RulesInput(now=NOW, baseline_ms=MINUTE, observations=failing))

    assert hinted.tool == "clear_hints"
    assert "The latest run failed (HTTP 500)" in hinted.reasoning
    assert plain.tool is None and "failure backoff" in plain.reasoning


@pytest.mark.parametrize(
    ("cron", "minutes"),
    [("*/15 * * * *", 15), ("0 9 * * *", 24 * 60), ("0 9 * * 1-5", 24 * 60), ("@hourly", 60)],
)
def test_a_cron_baseline_counts_as_its_typical_gap(cron: str, minutes: int) -> None:
    endpoint = Endpoint(baseline_cron=cron, timezone="Europe/Berlin")
    assert baseline_interval_ms(endpoint, NOW) == minutes * MINUTE


def test_without_runs_there_is_nothing_to_decide() -> None:
    verdict = decide(RulesInput(now=NOW, baseline_ms=MINUTE, observations=()))
    assert verdict.tool is None
    assert verdict.confidence == "low"


def test_long_intervals_get_a_ttl_long_enough_to_be_used() -> None:
    verdict = _decide({"status": "degraded"}, baseline_ms=24 * 60 * MINUTE)
    assert verdict.arguments["intervalMs"] == 12 * 60 * MINUTE
    assert verdict.arguments["ttlMinutes"] == 1_440


# End to end: a real local endpoint whose answers change, the scheduler's claim and
# execution, and a planner cycle at every step, with the clock driven by time-machine.

BASELINE = 20 * MINUTE


@dataclass
class Scenario:
    """Serves ``answer(request_index, minute)`` (status, body and optionally headers) and
    drives scheduler + planner."""

    endpoint: Endpoint
    answer: Callable[[int, int], tuple[Any, ...]]
    minute: int = 0
    served: int = 0

    def respond(self, request: Request) -> Response:
        status, body, *headers = self.answer(self.served, self.minute)
        self.served += 1
        return Response(
            json.dumps(body),
            status=status,
            content_type="application/json",
            headers=headers[0] if headers else None,
        )

    def run(self, *, until: int, step: int = 5) -> list[int]:
        """Minutes (after NOW) at which the endpoint ran, planning every ``step`` minutes."""
        policy = NetworkPolicy(allow_private=True)
        ran = []
        with time_machine.travel(NOW, tick=False) as clock:
            for minute in range(0, until + 1, step):
                at = NOW + timedelta(minutes=minute)
                clock.move_to(at)
                self.minute = minute
                for claim in claiming.claim_due_endpoints(now=at, limit=10, horizon_ms=0):
                    if running.execute_claim(claim, policy=policy):
                        ran.append(minute)
                plan_cycle(now=at)
        return ran

    def hints(self) -> list[tuple[int, str, int | None]]:
        rows = HintHistory.objects.filter(endpoint=self.endpoint).order_by("created_at", "id")
        return [
            (int((row.created_at - NOW).total_seconds() // 60), row.kind, row.interval_ms)
            for row in rows
        ]


@pytest.fixture
def scenario(
    httpserver: HTTPServer, make_endpoint: Callable[..., Endpoint]
) -> Callable[[Callable[[int, int], tuple[int, Any]]], Scenario]:
    def make(answer: Callable[[int, int], tuple[int, Any]]) -> Scenario:
        endpoint = make_endpoint(
            name="watched",
            url=httpserver.url_for("/state"),
            baseline_interval_ms=BASELINE,
            next_run_at=NOW,
        )
        built = Scenario(endpoint, answer)
        httpserver.expect_request("/state").respond_with_handler(built.respond)
        return built

    return make


def test_health_degrading_then_recovering_tightens_then_returns_to_the_baseline(
    scenario: Callable[..., Scenario],
) -> None:
    def health(index: int, minute: int) -> tuple[int, Any]:
        if 40 <= minute < 60:
            return 200, {"status": "degraded"}
        if 60 <= minute < 80:
            return 200, {"status": "critical"}
        return 200, {"status": "healthy"}

    watched = scenario(health)

    ran = watched.run(until=120)

    assert ran == [0, 20, 40, 50, 60, 65, 70, 75, 80, 100, 120]
    assert watched.hints() == [
        (40, HintKind.INTERVAL, 10 * MINUTE),
        (60, HintKind.INTERVAL, 5 * MINUTE),
        (80, HintKind.CLEAR, None),
    ]
    sessions = AnalysisSession.objects.filter(endpoint=watched.endpoint)
    assert all(s.backend == "rules" and s.status == "succeeded" for s in sessions)
    tightening = sessions.get(hints__kind=HintKind.INTERVAL, hints__interval_ms=5 * MINUTE)
    assert "status is 'critical'" in tightening.reasoning
    assert tightening.actions_taken == ["propose_interval"]


def test_a_rising_queue_tightens_a_draining_one_clears_and_an_empty_one_relaxes(
    scenario: Callable[..., Scenario],
) -> None:
    depths = [10, 20, 30, 40, 25]
    watched = scenario(lambda index, minute: (200, {"queue_depth": (depths + [0] * 99)[index]}))

    ran = watched.run(until=220)

    assert ran == [0, 20, 40, 50, 60, 80, 100, 120, 140, 160, 180, 220]
    assert watched.hints() == [
        (40, HintKind.INTERVAL, 10 * MINUTE),
        (60, HintKind.CLEAR, None),
        (160, HintKind.INTERVAL, 40 * MINUTE),
        (220, HintKind.INTERVAL, 40 * MINUTE),  # half its 120-minute TTL spent: refreshed
    ]


def test_a_429_with_retry_after_pauses_until_then_and_runs_right_after(
    scenario: Callable[..., Scenario],
) -> None:
    def limited(index: int, minute: int) -> tuple[int, Any]:
        if index == 0:
            return 429, {"error": "rate limited", "retry_after_seconds": 600}
        return 200, {"status": "healthy"}

    watched = scenario(limited)

    ran = watched.run(until=30)

    assert ran == [0, 10, 30]
    assert watched.hints() == [(0, HintKind.PAUSE, None)]
    pause = HintHistory.objects.get(endpoint=watched.endpoint)
    assert pause.paused_until == NOW + timedelta(minutes=10)
    assert "HTTP 429 asks to retry after 600 s (retry_after_seconds)" in pause.reason


def test_a_429_whose_retry_after_is_a_header_pauses_for_that_long(
    scenario: Callable[..., Scenario],
) -> None:
    def limited(index: int, minute: int) -> tuple[Any, ...]:
        if index == 0:
            headers = {"Retry-After": "900", "Set-Cookie": "session=secret"}
            return 429, {"error": "rate limited"}, headers
        return 200, {"status": "healthy"}

    watched = scenario(limited)

    ran = watched.run(until=20)

    assert ran == [0, 15]
    pause = HintHistory.objects.get(endpoint=watched.endpoint)
    assert pause.paused_until == NOW + timedelta(minutes=15)
    assert "HTTP 429 asks to retry after 900 s (Retry-After header)" in pause.reason
    first = Run.objects.filter(endpoint=watched.endpoint).earliest("started_at")
    assert first.response_headers == {"retry-after": "900", "content-type": "application/json"}


def test_the_planners_pause_is_lifted_when_a_test_run_answers_normally(
    scenario: Callable[..., Scenario], settings: Any
) -> None:
    settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = True
    watched = scenario(
        lambda index, minute: (503, {"retry_after": 3600}) if index == 0 else (200, {"ok": True})
    )
    watched.run(until=0)
    watched.endpoint.refresh_from_db()
    assert watched.endpoint.paused_until == NOW + timedelta(hours=1)

    later = NOW + timedelta(minutes=5)
    with time_machine.travel(later, tick=False):
        operations.test_endpoint(watched.endpoint, now=later)
        [session] = plan_cycle(now=later)

    watched.endpoint.refresh_from_db()
    assert session.actions_taken == ["pause_until"]
    assert watched.endpoint.paused_until is None
    assert watched.endpoint.next_run_at < NOW + timedelta(hours=1)
    assert [kind for _, kind, _ in watched.hints()] == [HintKind.PAUSE, HintKind.RESUME]
