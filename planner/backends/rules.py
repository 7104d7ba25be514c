"""The built-in planner: deterministic rules over the latest responses, no network.

``decide`` is a pure function from what the endpoint answered (and its schedule) to at
most one action; ``analyze`` gathers that input from the database and carries the action
out through the same tools the LLM uses, so both backends record the same sessions.

The rules, first match wins:
1. The latest answer is 429/503: while the run policy retries it within its slot
   (attempts left), no pause: what a person configured wins, and the retry waits for
   the answer's Retry-After itself. Otherwise pause until its Retry-After (the response
   header, else body keys ``retry_after``, ``retry_after_seconds``, ``retryAfter``;
   seconds or a time), never longer than an hour. Without one, a 429 15 minutes (a
   rate limit's window), a 503 5 minutes (an overload, whose end is worth seeing soon),
   doubled for each rate-limited answer in a row before it (15, 30, 60 min; 5, 10, 20,
   40, 60 min), and no pause when the next run (the failure backoff) already comes
   after that: a pause would bring it forward.
2. A pause the planner wrote is still on but the endpoint no longer rate-limits: resume.
3. The latest run failed otherwise: leave it to the baseline's failure backoff (and
   clear a planner interval hint, which would override that backoff).
4. Signals in the latest body: ``status`` critical/down -> a quarter of the baseline
   interval, degraded -> half; ``error_rate_pct`` and ``current_value`` against warning
   and critical thresholds likewise; ``queue_depth`` rising over the last three answers
   -> half; zero for the last five -> twice the baseline. Always inside min/max.
5. Calm: the last six answers all succeeded with nothing abnormal in them, and the owner
   set a maximum interval above the baseline -> twice the baseline, at most that maximum.
   Without a maximum (or with one at the baseline) the baseline stands: the maximum is
   how an owner says how far the planner may relax.
6. Healthy again with a planner interval hint still on: clear it.
A person's own hint or pause is left alone.
"""

from __future__ import annotations

import email.utils
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

from endpoints.governor import MAX_PLANNABLE_MS
from endpoints.models import Endpoint, HintHistory, HintKind, RunStatus
from endpoints.schedules import describe_interval, next_cron_after
from planner.tools import (
    MAX_TTL_MINUTES,
    MIN_INTERVAL_MS,
    MIN_NEXT_ANALYSIS_MS,
    EndpointTools,
    finished_runs,
    policy_retry_words,
)

HISTORY = 10
RATE_LIMIT_CODES = (429, 503)
RETRY_AFTER_KEYS = ("retry_after", "retry_after_seconds", "retryAfter", "Retry-After")
# Without a Retry-After the first pause is the length a limit of that kind commonly
# lasts: a 429 is a rate limit, whose windows are minutes to an hour (GitHub's hour,
# X's 15 minutes), so probing it every 5 minutes only collects more 429s; a 503 is an
# overload or an outage, which may end in a minute and whose recovery is worth seeing.
FIRST_PAUSE_WITHOUT_RETRY_AFTER = {429: timedelta(minutes=15), 503: timedelta(minutes=5)}
MAX_RATE_LIMIT_PAUSE = timedelta(hours=1)
ERROR_RATE_WARNING_PCT = 5.0
ERROR_RATE_CRITICAL_PCT = 10.0
CRITICAL_WORDS = ("critical", "down", "unhealthy", "error", "failing")
DEGRADED_WORDS = ("degraded", "warning", "warn", "slow")
HINT_TTL_MINUTES = 60
# A standing hint is rewritten only once half its TTL is spent, so a long incident
# does not add a hint-history row every analysis.
REFRESH_AFTER = 0.5
CRON_SAMPLE = 6

SEVERITY_FACTOR = {"critical": 0.25, "degraded": 0.5}
# Rule 5: this many calm answers in a row relax to RELAX_FACTOR x the baseline, within
# the owner's maximum interval (only when one is set above the baseline).
CALM_ANSWERS = 6
RELAX_FACTOR = 2
SEVERITY_RANK = {"healthy": 0, "degraded": 1, "critical": 2}


@dataclass(frozen=True)
class Observation:
    """One finished run as the rules see it (newest first in RulesInput)."""

    status_code: int | None
    body: Any
    at: datetime
    succeeded: bool = True
    headers: Mapping[str, str] = field(default_factory=dict)  # as kept on the Run


@dataclass(frozen=True)
class RulesInput:
    now: datetime
    baseline_ms: int
    observations: tuple[Observation, ...]
    min_interval_ms: int = 0
    max_interval_ms: int = 0
    planner_interval_ms: int | None = None
    planner_hint_expires_at: datetime | None = None
    person_hint_active: bool = False
    paused_until: datetime | None = None
    paused_by_planner: bool = False
    policy_retry: str = ""  # the run policy retries the latest failure: in words
    next_run_at: datetime | None = None  # as planned now (the failure backoff included)


@dataclass(frozen=True)
class Verdict:
    """At most one tool call, and the reasoning for the session."""

    reasoning: str
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    confidence: str = "high"
    next_analysis_in_ms: int = MIN_NEXT_ANALYSIS_MS


def decide(data: RulesInput) -> Verdict:
    if not data.observations:
        return Verdict("No finished runs yet: nothing to go on.", confidence="low")
    latest = data.observations[0]
    if data.paused_until and data.paused_until > data.now and not data.paused_by_planner:
        return Verdict(f"Paused by a person until {data.paused_until.isoformat()}: left alone.")
    if latest.status_code in RATE_LIMIT_CODES:
        return _rate_limited(data, latest)
    if data.paused_until and data.paused_until > data.now:
        return Verdict(
            f"The endpoint no longer rate-limits (HTTP {latest.status_code}): resuming.",
            tool="pause_until",
            arguments={"untilIso": None, "reason": "the rate limit is over"},
        )
    if data.person_hint_active:
        return Verdict("A person's hint is active: left alone.")
    if not latest.succeeded:
        return _failing(data, latest)
    target, why = _target_interval(data)
    if target is None:
        return _healthy(data, why)
    return _tighten_or_relax(data, target, why)


def _rate_limited(data: RulesInput, latest: Observation) -> Verdict:
    if data.policy_retry:
        return Verdict(
            f"HTTP {latest.status_code}: {data.policy_retry}, as a person configured; "
            "the planner does not pause over it (the retry waits for a Retry-After itself)."
        )
    wait, source = retry_after(
        latest.headers,
        latest.body,
        latest.at,
        code=latest.status_code,
        streak=rate_limited_streak(data.observations),
    )
    capped = min(wait, MAX_RATE_LIMIT_PAUSE)
    until = latest.at + capped
    said = f"HTTP {latest.status_code} {source}"
    if capped < wait:
        said += f", capped at {_seconds(capped)}"
    if until <= data.now:
        return Verdict(f"{said}: that wait is already over, no pause needed.")
    if given_wait(latest.headers, latest.body, latest.at) is None and (
        data.next_run_at is not None and data.next_run_at >= until
    ):
        return Verdict(
            f"{said}: the next run, at {data.next_run_at.isoformat()}, already comes later "
            "(the failure backoff); no pause needed."
        )
    if data.paused_until and data.paused_until >= until:
        return Verdict(f"{said}: already paused until {data.paused_until.isoformat()}.")
    return Verdict(
        f"{said}: pausing until {until.isoformat()}.",
        tool="pause_until",
        arguments={"untilIso": until.isoformat(), "reason": f"{said}; respecting it"},
    )


def _failing(data: RulesInput, latest: Observation) -> Verdict:
    """A failing endpoint is left to the baseline's failure backoff: a planner interval
    hint would override that backoff and keep calling it at the hinted pace."""
    answer = f"HTTP {latest.status_code}" if latest.status_code else "no answer"
    why = f"The latest run failed ({answer})"
    if _planner_hint_fresh(data):
        return Verdict(
            f"{why}: clearing the planner's interval hint so the failure backoff applies.",
            tool="clear_hints",
            arguments={"reason": f"{why}: back to the baseline and its failure backoff"},
        )
    return Verdict(f"{why}: the baseline and its failure backoff apply.")


def retry_after(
    headers: Mapping[str, str], body: Any, at: datetime, *, code: int | None, streak: int = 1
) -> tuple[timedelta, str]:
    """How long a rate-limited answer (``code`` 429 or 503) asks us to wait, and where
    that came from: the Retry-After header (RFC 9110: seconds or an HTTP date), else the
    body, else the first pause of its code, doubled for each rate-limited answer in a row
    before it (``streak``: a 429 15, 30, 60 min; a 503 5, 10, 20, 40, 60 min; the caller
    caps it at an hour)."""
    given = given_wait(headers, body, at)
    if given is not None:
        return given
    first = FIRST_PAUSE_WITHOUT_RETRY_AFTER[429 if code == 429 else 503]
    default = first * 2 ** min(max(streak, 1) - 1, 5)
    in_a_row = f" ({streak} rate-limited answers in a row)" if streak > 1 else ""
    return default, f"without Retry-After: backing off {_seconds(default)}{in_a_row}"


def given_wait(headers: Mapping[str, str], body: Any, at: datetime) -> tuple[timedelta, str] | None:
    """The wait the answer itself gives (header, else body), and where; None without."""
    wait = _wait_from(headers.get("retry-after"), at)
    if wait is not None:
        return wait, f"asks to retry after {_seconds(wait)} (Retry-After header)"
    if isinstance(body, dict):
        for key in RETRY_AFTER_KEYS:
            wait = _wait_from(body.get(key), at)
            if wait is not None:
                return wait, f"asks to retry after {_seconds(wait)} ({key})"
    return None


def _wait_from(value: Any, at: datetime) -> timedelta | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        # JSON allows any number of digits: an int too large for a float is the longest
        # wait, not an OverflowError that would fail every analysis of the endpoint.
        return _seconds_wait(float(min(value, MAX_PLANNABLE_MS // 1000)))
    if isinstance(value, float):
        return _seconds_wait(value)
    if not isinstance(value, str):
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        return _wait_until(text, at)
    return _seconds_wait(seconds)


def _seconds_wait(seconds: float) -> timedelta | None:
    # A server may answer any number: capped at the longest duration anything is planned
    # with, so that 1e300 is "a year", never an OverflowError.
    if not math.isfinite(seconds) or seconds <= 0:
        return None
    return timedelta(seconds=min(seconds, MAX_PLANNABLE_MS / 1000))


def _wait_until(text: str, at: datetime) -> timedelta | None:
    when: datetime | None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
    if when is None or when.tzinfo is None or when <= at:
        return None
    return when - at


def _target_interval(data: RulesInput) -> tuple[int | None, str]:
    """The interval the signals ask for (None: nothing abnormal), and why."""
    severity, reasons = body_severity(data.observations[0].body)
    factor = SEVERITY_FACTOR.get(severity)
    queue = queue_trend(data.observations)
    if queue == "rising" and (factor is None or factor > 0.5):
        factor = 0.5
        reasons.append("queue_depth rose over the last three answers")
    if factor is not None:
        return int(data.baseline_ms * factor), "; ".join(reasons)
    if queue == "empty":
        return data.baseline_ms * 2, "queue_depth was 0 in the last five answers"
    if data.max_interval_ms > data.baseline_ms and calm_streak(data.observations) >= CALM_ANSWERS:
        return (
            data.baseline_ms * RELAX_FACTOR,
            f"the last {CALM_ANSWERS} answers were calm and the maximum interval allows more",
        )
    return None, "; ".join(reasons) or "no warning signs in the latest answer"


def calm_streak(observations: tuple[Observation, ...]) -> int:
    """How many of the newest answers in a row succeeded with nothing going on in them:
    no rate limit, a healthy body, no queue (or an empty one)."""
    streak = 0
    for observation in observations:
        body = observation.body
        depth = _number(body.get("queue_depth")) if isinstance(body, dict) else None
        if (
            not observation.succeeded
            or observation.status_code in RATE_LIMIT_CODES
            or body_severity(body)[0] != "healthy"
            or (depth is not None and depth != 0)
        ):
            break
        streak += 1
    return streak


def rate_limited_streak(observations: tuple[Observation, ...]) -> int:
    """How many of the newest answers in a row were 429/503."""
    streak = 0
    for observation in observations:
        if observation.status_code not in RATE_LIMIT_CODES:
            break
        streak += 1
    return streak


def body_severity(body: Any) -> tuple[str, list[str]]:
    """healthy / degraded / critical from the common body shapes, with the reasons."""
    if not isinstance(body, dict):
        return "healthy", []
    found: list[tuple[str, str]] = []
    status = body.get("status")
    if isinstance(status, str):
        word = status.strip().lower()
        if word in CRITICAL_WORDS:
            found.append(("critical", f"status is {status!r}"))
        elif word in DEGRADED_WORDS:
            found.append(("degraded", f"status is {status!r}"))
    rate = _number(body.get("error_rate_pct"))
    if rate is not None:
        level = _level(rate, ERROR_RATE_WARNING_PCT, ERROR_RATE_CRITICAL_PCT)
        if level:
            found.append((level, f"error_rate_pct {rate:g} is at or above {level} level"))
    value = _number(body.get("current_value"))
    if value is not None:
        level = _level(
            value, _number(body.get("warning_threshold")), _number(body.get("critical_threshold"))
        )
        if level:
            found.append((level, f"current_value {value:g} crossed the {level} threshold"))
    if not found:
        return "healthy", []
    worst = max(found, key=lambda item: SEVERITY_RANK[item[0]])[0]
    return worst, [reason for _, reason in found]


def _level(value: float, warning: float | None, critical: float | None) -> str | None:
    if critical is not None and value >= critical:
        return "critical"
    if warning is not None and value >= warning:
        return "degraded"
    return None


def queue_trend(observations: tuple[Observation, ...]) -> str | None:
    """'rising' (strictly, over the newest three), 'empty' (0 in the newest five) or None."""
    depths: list[float] = []
    for observation in observations:
        body = observation.body
        depth = _number(body.get("queue_depth")) if isinstance(body, dict) else None
        if depth is None:
            break
        depths.append(depth)
    if len(depths) >= 3 and depths[0] > depths[1] > depths[2]:
        return "rising"
    if len(depths) >= 5 and all(depth == 0 for depth in depths[:5]):
        return "empty"
    return None


def _tighten_or_relax(data: RulesInput, target: int, why: str) -> Verdict:
    bounded = bounded_interval(target, data.min_interval_ms, data.max_interval_ms)
    verb = "tightening" if target < data.baseline_ms else "relaxing"
    words = describe_interval(bounded)
    if bounded == data.baseline_ms:
        return _healthy(data, f"{why}; but the endpoint's bounds keep it at the baseline")
    ttl = min(MAX_TTL_MINUTES, max(HINT_TTL_MINUTES, math.ceil(3 * bounded / 60_000)))
    if _standing(data, bounded, ttl):
        return Verdict(f"{why}: the hint ({words}) still stands.")
    base_words = describe_interval(data.baseline_ms).removeprefix("every ")
    return Verdict(
        f"{why}: {verb} to {words} (baseline {base_words}) for {ttl} minutes.",
        tool="propose_interval",
        arguments={"intervalMs": bounded, "ttlMinutes": ttl, "reason": f"{why}: {verb}"},
    )


def _standing(data: RulesInput, interval: int, ttl_minutes: int) -> bool:
    expires = data.planner_hint_expires_at
    if data.planner_interval_ms != interval or expires is None or expires <= data.now:
        return False
    return expires - data.now > timedelta(minutes=REFRESH_AFTER * ttl_minutes)


def _planner_hint_fresh(data: RulesInput) -> bool:
    expires = data.planner_hint_expires_at
    return data.planner_interval_ms is not None and expires is not None and expires > data.now


def _healthy(data: RulesInput, why: str) -> Verdict:
    if _planner_hint_fresh(data):
        return Verdict(
            f"{why}: back to the baseline, clearing the planner's interval hint.",
            tool="clear_hints",
            arguments={"reason": f"{why}: back to the baseline"},
        )
    return Verdict(f"{why}: the baseline stands.")


def bounded_interval(interval: int, minimum: int, maximum: int) -> int:
    """Inside [minimum, maximum] like the governor's clamp (min first, max wins)."""
    bounded = max(interval, minimum, MIN_INTERVAL_MS)
    return min(bounded, maximum) if maximum else bounded


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _seconds(wait: timedelta) -> str:
    return f"{int(wait.total_seconds())} s"


# Gathering the input and carrying the verdict out.


def baseline_interval_ms(endpoint: Any, now: datetime) -> int:
    """The interval the baseline amounts to: the interval, or a cron's typical gap."""
    if endpoint.baseline_interval_ms:
        return endpoint.baseline_interval_ms
    times = [now]
    for _ in range(CRON_SAMPLE):
        times.append(next_cron_after(endpoint.baseline_cron, endpoint.timezone, times[-1]))
    occurrences = times[1:]
    gaps = [(later - earlier).total_seconds() for earlier, later in pairwise(occurrences)]
    return max(MIN_INTERVAL_MS, int(statistics.median(gaps) * 1000))


def gather(endpoint: Endpoint, now: datetime) -> RulesInput:
    runs = finished_runs(endpoint)[:HISTORY]
    observations = tuple(
        Observation(
            run.status_code,
            run.response_body,
            run.finished_at or run.started_at,
            succeeded=run.status == RunStatus.SUCCESS,
            headers=run.response_headers or {},
        )
        for run in runs
    )
    hint_kinds = (HintKind.INTERVAL, HintKind.ONESHOT, HintKind.CLEAR)
    return rules_input(
        endpoint,
        now,
        observations,
        tenant_min_interval_ms=endpoint.job.tenant.min_interval_ms,
        hint_by_planner=_latest_by_planner(endpoint, hint_kinds),
        paused_by_planner=_latest_by_planner(endpoint, (HintKind.PAUSE, HintKind.RESUME)),
    )


def rules_input(
    endpoint: Any,
    now: datetime,
    observations: tuple[Observation, ...],
    *,
    tenant_min_interval_ms: int,
    hint_by_planner: bool,
    paused_by_planner: bool,
) -> RulesInput:
    """What the rules read of an endpoint (an ``Endpoint``, or anything with its fields,
    as the simulator's), its newest finished runs and who wrote its hint and pause."""
    hint_fresh = endpoint.ai_hint_expires_at is not None and endpoint.ai_hint_expires_at > now
    return RulesInput(
        now=now,
        baseline_ms=baseline_interval_ms(endpoint, now),
        observations=observations[:HISTORY],
        min_interval_ms=max(endpoint.min_interval_ms or 0, tenant_min_interval_ms),
        max_interval_ms=endpoint.max_interval_ms or 0,
        planner_interval_ms=endpoint.ai_hint_interval_ms if hint_by_planner else None,
        planner_hint_expires_at=endpoint.ai_hint_expires_at if hint_by_planner else None,
        person_hint_active=hint_fresh and not hint_by_planner,
        paused_until=endpoint.paused_until,
        paused_by_planner=paused_by_planner,
        policy_retry=policy_retry_words(endpoint),
        next_run_at=endpoint.next_run_at,
    )


def _latest_by_planner(endpoint: Endpoint, kinds: tuple[str, ...]) -> bool:
    latest = HintHistory.objects.filter(endpoint=endpoint, kind__in=kinds).first()
    return latest is not None and latest.session_id is not None


def analyze(tools: EndpointTools) -> None:
    """Decide and act through the tools; ends with submit_analysis like the LLM does."""
    verdict = decide(gather(tools.endpoint, tools.now))
    reasoning = verdict.reasoning
    if verdict.tool:
        result = tools.call(verdict.tool, verdict.arguments)
        if "error" in result:
            reasoning += f" The action was refused: {result['error']}"
    tools.call(
        "submit_analysis",
        {
            "reasoning": reasoning,
            "actions_taken": list(tools.actions),
            "confidence": verdict.confidence,
            "next_analysis_in_ms": verdict.next_analysis_in_ms,
        },
    )
