"""The run policy's one owner (issue 32): every list and the whole object bounded by the
one validation, the largest policy every key allows within that bound, and a stored
policy resolved once per content into the value every reader takes, bad data handled one
way (the defaults, said in ``explain``). Pure: no database."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from endpoints import policies
from endpoints.calendars import MAX_EXCLUDE_DATES
from endpoints.governor import EndpointSchedule, explain_plan
from endpoints.policies import (
    DEFAULT,
    MAX_ATTEMPTS,
    MAX_DELAY_MS,
    MAX_FOLLOW_UPS,
    MAX_POLICY_BYTES,
    MAX_TEXT,
    json_size,
    policy_problems,
    stored_policy,
)
from endpoints.windows import DAYS, MAX_WINDOWS

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def largest_policy() -> dict[str, Any]:
    """Every key at its largest: the longest texts of four-byte characters, the most
    windows of both kinds on every day, fifty status codes."""
    every_day = [{"start": "23:58", "end": "00:01", "days": list(DAYS)}] * MAX_WINDOWS
    return {
        "expected_status": [*range(200, 249), "2xx"],
        "body_contains": "𝄞" * MAX_TEXT,
        "body_json_path": "𝄞" * MAX_TEXT,
        "body_json_equals": "x" * (MAX_TEXT - 2),
        "max_duration_ms": MAX_DELAY_MS,
        "retry_attempts": MAX_ATTEMPTS,
        "retry_delay_ms": MAX_DELAY_MS,
        "retry_backoff": "exponential",
        "retry_max_delay_ms": MAX_DELAY_MS,
        "backoff_cap_ms": MAX_DELAY_MS,
        "breaker_failed_slots": 1_000,
        "breaker_needs_person": True,
        "breaker_cooldown_ms": MAX_DELAY_MS,
        "catchup_window_ms": MAX_DELAY_MS,
        "jitter_ms": 3_600_000,
        "blackout": every_day,
        "allowed": [{"start": "00:00", "end": "23:59", "days": list(DAYS)}] * MAX_WINDOWS,
        "active_from": "2026-01-01T00:00:00+01:00",
        "active_until": "9000-01-01T00:00:00+01:00",
        "exclude_dates": ["2026-12-24..2026-12-26"] * MAX_EXCLUDE_DATES,
        "holidays": {"country": "DE", "subdivision": "Augsburg"},
        "follow_ups": [
            {"endpoint": f"{'j' * 199}/{n:0200d}", "on": "always"} for n in range(MAX_FOLLOW_UPS)
        ],
        "overlap": "skip",
    }


def test_the_largest_policy_every_key_allows_fits_the_size_bound() -> None:
    policy = largest_policy()
    assert policy_problems(policy) == []
    assert json_size(policy) <= MAX_POLICY_BYTES


@pytest.mark.parametrize(
    ("policy", "words"),
    [
        # The 2.2 MB policy the API took: one window's days repeated.
        (
            {"blackout": [{"start": "02:00", "end": "04:00", "days": ["mon"] * 300_000}]},
            "bytes of JSON; at most 20480 are allowed",
        ),
        (
            {"blackout": [{"start": "02:00", "end": "04:00", "days": ["mon", "tue", "mon"]}]},
            "window 1: days is a list of mon, tue, wed, thu, fri, sat, sun, each at most once.",
        ),
        ({f"key{n}": n for n in range(2_000)}, "bytes of JSON; at most 20480 are allowed"),
    ],
)
def test_a_policy_over_a_bound_is_refused_in_words(policy: dict[str, Any], words: str) -> None:
    problems = policy_problems(policy)
    assert len(problems) == 1 and words in problems[0], problems


def test_a_stored_policy_is_resolved_once_per_content(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    resolve = policies.resolve_policy
    monkeypatch.setattr(
        policies, "resolve_policy", lambda *both: calls.append(both) or resolve(*both)
    )
    policies._RESOLVED.clear()
    job_policy = {"retry_attempts": 3, "blackout": [{"start": "02:00", "end": "04:00"}]}
    first = [stored_policy(job_policy, {}) for _ in range(100)]
    # The same content in other objects (each endpoint of a job reads its own copy).
    again = stored_policy(json.loads(json.dumps(job_policy)), None)
    assert len(calls) == 1
    assert first[0].retry_attempts == 3 and all(p is first[0] for p in [*first, again])
    assert stored_policy({}, None) is DEFAULT and len(calls) == 1


@pytest.mark.parametrize(
    "stored",
    [
        {"retry_attempts": 99},  # edited in the database
        {"blackout": [{"start": "02:00", "end": "04:00", "days": ["mon"] * 300_000}]},
        ["not", "an", "object"],
    ],
)
def test_a_stored_policy_that_does_not_validate_runs_by_the_defaults_and_says_so(
    stored: Any,
) -> None:
    policy = stored_policy({}, stored)
    assert policy.problem
    assert policies.replace(policy, problem="") == DEFAULT
    schedule = EndpointSchedule(
        baseline_interval_ms=60_000,
        **{"policy_problem": policy.problem},
    )
    text = explain_plan(NOW, schedule)
    assert "the stored run policy cannot be used (" in text
    assert "the defaults apply; correct the run policy" in text
