"""The one wording helper: counts and durations said one way by every message (alerts,
the admin, the commands, the API and MCP, the run lines). Pure: no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from endpoints import breaker
from endpoints.choices import PauseSource
from endpoints.wording import count_words, delta_words, duration_words, pause_words

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("count", "noun", "words"),
    [
        (1, "failed run", "1 failed run"),
        (3, "failed run", "3 failed runs"),
        (0, "job", "0 jobs"),
        (2, "entry", "2 entries"),
    ],
)
def test_a_count_agrees_with_its_noun(count: int, noun: str, words: str) -> None:
    plural = "entries" if noun == "entry" else ""
    assert count_words(count, noun, plural) == words


@pytest.mark.parametrize(
    ("ms", "words"),
    [
        (None, "—"),
        (0, "0 ms"),
        (340, "340 ms"),
        (999.6, "1 second"),
        (1_000, "1 second"),
        (5_600, "5.6 seconds"),
        (45_000, "45 seconds"),
        (59_600, "1 minute"),
        (120_000, "2 minutes"),
        (119_999, "2 minutes"),
        (336_089, "5 minutes 36 seconds"),
        (3_599_700, "1 hour"),
        (5_400_000, "1 hour 30 minutes"),
        (7_560_000, "2 hours 6 minutes"),
        (86_399_000, "1 day"),
        (259_200_000, "3 days"),
        (365 * 86_400_000, "365 days"),
        (-2_500, "-2.5 seconds"),
    ],
)
def test_durations_read_in_words_with_at_most_two_units(ms: float | None, words: str) -> None:
    assert duration_words(ms) == words


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(minutes=5), "in 5 minutes"),
        (timedelta(minutes=4, seconds=59.9), "in 5 minutes"),
        (timedelta(seconds=1), "in 1 second"),
        (timedelta(0), "in less than a second"),
        (timedelta(seconds=-3), "3 seconds ago"),
        (timedelta(hours=25), "in 1 day 1 hour"),
        (timedelta(hours=-2, minutes=-10), "2 hours 10 minutes ago"),
    ],
    ids=str,
)
def test_relative_times_say_the_same_durations(delta: timedelta, text: str) -> None:
    assert delta_words(delta) == text


def test_a_pause_says_its_end_and_how_long_it_lasts() -> None:
    until = NOW + timedelta(hours=2)
    assert pause_words(until, NOW) == "until 2026-11-22 14:00 UTC (for 2 hours)"
    assert pause_words(until, NOW, brief=True) == "until 2026-11-22 14:00"
    assert pause_words(until, NOW, until_resumed=True) == "until resumed"


def test_the_breakers_pause_without_a_cool_down_lasts_until_resumed() -> None:
    hold, text, source = breaker.pause_of("Breaker: 3 failed slots in a row (last: 503)", None)
    assert (hold, source) == (breaker.HOLD_MS, PauseSource.HELD)
    assert text.endswith("; resume it once the cause is fixed")

    hold, text, source = breaker.pause_of("Breaker: 3 failed slots in a row (last: 503)", 300_000)
    assert (hold, source) == (300_000, PauseSource.BREAKER)
    assert text.endswith("; a probe run after 5 minutes")


def test_a_long_error_never_cuts_off_how_the_breakers_pause_ends() -> None:
    _, text, _ = breaker.pause_of(
        "Breaker: a failure a person must fix (" + "x" * 5_000 + ")", None
    )
    assert len(text) <= 1_000
    assert text.endswith("; resume it once the cause is fixed")
