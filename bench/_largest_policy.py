"""The largest run policy validation accepts, for the noisy-neighbour bench's tenant A.

Every list and text at the bound read from ``endpoints.policies``, shrunk until
``validation.check_run_policy`` (the one validation path every interface calls) accepts
it, so the bench follows a new bound; its windows leave one free minute a week.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any


def refusals(policy: dict[str, Any]) -> list[str]:
    """What the one validation path says of ``policy`` (every interface calls it)."""
    from django.utils import timezone

    from endpoints.validation import check_run_policy

    problems: list[str] = []
    check_run_policy(policy, lambda _field, message: problems.append(message), now=timezone.now())
    return problems


def _largest(
    policy: dict[str, Any], make: Callable[[int], dict[str, Any]], low: int, high: int
) -> int:
    """The largest n in low..high for which ``policy`` with ``make(n)`` is accepted
    (acceptance shrinks as n grows)."""
    if problems := refusals({**policy, **make(low)}):
        raise SystemExit(f"Even the smallest {sorted(make(low))} is refused: {problems}")
    while low < high:
        middle = (low + high + 1) // 2
        if refusals({**policy, **make(middle)}):
            high = middle - 1
        else:
            low = middle
    return low


def worst_windows(count: int, free: datetime, days: int) -> dict[str, Any]:
    """``count`` allowed and ``count`` blackout windows leaving one minute a week free: the
    minute of ``free`` (UTC) on its weekday. Allowed windows spread over the day, each
    inside a blackout of the same span, so that planning hops from window to window
    through the whole week; every window lists ``days`` days (all, or all but one)."""
    from endpoints.windows import DAYS

    minute, weekday = free.hour * 60 + free.minute, free.weekday()
    every = [DAYS[i % len(DAYS)] for i in range(days)]
    others = [day for day in DAYS if day != DAYS[weekday]]
    but_one = [others[i % len(others)] for i in range(max(days - 1, len(others)))]
    step = 24 * 60 // count
    length = max(1, step // 2)

    def window(start: int, span: int, on: list[str]) -> dict[str, Any]:
        end = start + span
        return {
            "start": f"{start // 60 % 24:02d}:{start % 60:02d}",
            "end": f"{end // 60 % 24:02d}:{end % 60:02d}",
            "days": on,
        }

    spread = [window(minute + k * step, length, every) for k in range(1, count)]
    return {
        "allowed": [window(minute, 1, every), *spread],
        "blackout": [window(minute, 1, but_one), *spread],
    }


def largest_policy(free: datetime) -> dict[str, Any]:
    """The largest run policy validation accepts, the hostile way: every attempt a slot
    allows as often as allowed, no breaker, no back-off beyond the interval; then, key by
    key, the windows, the expected statuses and the texts each at the largest size the
    validation accepts beside what is already chosen (a total bound shrinks the later)."""
    from endpoints import policies
    from endpoints import windows as week

    policy: dict[str, Any] = {
        "retry_attempts": policies.MAX_ATTEMPTS,
        "retry_delay_ms": policies.MIN_DELAY_MS,
        "retry_backoff": "fixed",
        "retry_max_delay_ms": policies.MIN_DELAY_MS,
        "backoff_cap_ms": policies.MIN_DELAY_MS,
        "max_duration_ms": policies.MAX_DELAY_MS,
        "breaker_failed_slots": None,
        "breaker_needs_person": False,
        "breaker_cooldown_ms": None,
        "catchup_window_ms": None,
        "jitter_ms": 0,
        "active_from": "2000-01-01T00:00:00+00:00",
        "active_until": "9000-12-31T00:00:00+00:00",
    }
    days = len(week.DAYS)  # each day at most once in a window

    def windows(n: int) -> dict[str, Any]:
        return worst_windows(n, free, days)

    # Codes and classes the slow target's 503 is not one of: every attempt fails.
    statuses: list[int | str] = [c for c in range(100, 600) if c != 503]
    statuses += ["1xx", "2xx", "3xx", "4xx"]
    text = policies.MAX_TEXT
    growing: list[tuple[Callable[[int], dict[str, Any]], int, int]] = [
        (windows, 1, week.MAX_WINDOWS),
        (lambda n: {"expected_status": statuses[:n]}, 1, len(statuses)),
        (lambda n: {"body_contains": "x" * n}, 0, text),
        # A path of many steps ("a.a.a..."): the longest walk through the body.
        (lambda n: {"body_json_path": ".".join(["a"] * ((n + 1) // 2))}, 1, text),
        (lambda n: {"body_json_equals": "y" * n}, 0, text),
    ]
    for make, low, high in growing:
        policy.update(make(_largest(policy, make, low, high)))
    return policy


def policy_sizes(policy: dict[str, Any]) -> dict[str, int]:
    """The length of each list and text grown, and of the whole policy as JSON."""
    grown = ("allowed", "blackout", "expected_status", "body_contains", "body_json_path")
    sizes = {key: len(policy[key]) for key in (*grown, "body_json_equals")}
    return {**sizes, "days": len(policy["allowed"][0]["days"]), "JSON": len(json.dumps(policy))}
