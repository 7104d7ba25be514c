"""Small inline SVG charts: recent run durations coloured by status, and the adaptation
chart (the gap between runs over time, hint periods and pauses marked, durations below).

Rendered on the server with escaped text only, so the admin needs no script or
external asset to show it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from endpoints.wording import count_words, duration_words

STATUS_COLOURS = {
    "success": "#2e7d32",
    "failure": "#c62828",
    "timeout": "#ef6c00",
    "lost": "#6a1b9a",
    "running": "#1565c0",
}
WIDTH, HEIGHT, GAP, AXIS = 600, 120, 2, 16


@dataclass(frozen=True)
class Bar:
    started_at: datetime
    duration_ms: int | None
    status: str


def duration_chart(bars: Sequence[Bar], *, slots: int = 50) -> SafeString:
    """Oldest run on the left, newest at the right edge; height is the duration, colour
    the status. ``slots`` fixes the bar width, so a few runs do not fill the chart."""
    if not bars:
        return format_html('<p class="cc-muted">{}</p>', "No runs yet.")
    longest = max((bar.duration_ms or 0) for bar in bars) or 1
    slot = WIDTH / max(slots, len(bars))
    first = max(slots, len(bars)) - len(bars)
    rects = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>',
        (_rect(first + index, bar, slot, longest) for index, bar in enumerate(bars)),
    )
    return format_html(
        '<svg class="cc-chart" role="img" aria-label="{}" viewBox="0 0 {} {}" width="{}" '
        'height="{}" xmlns="http://www.w3.org/2000/svg">'
        '<line x1="0" y1="{}" x2="{}" y2="{}" stroke="#999" stroke-width="1"/>{}'
        '<text x="0" y="{}" font-size="11" fill="#666">{}</text>'
        '<text x="{}" y="{}" font-size="11" fill="#666" text-anchor="end">{}</text></svg>',
        f"Durations of the last {len(bars)} runs",
        WIDTH,
        HEIGHT + AXIS,
        WIDTH,
        HEIGHT + AXIS,
        HEIGHT,
        WIDTH,
        HEIGHT,
        rects,
        HEIGHT + AXIS - 3,
        f"{count_words(len(bars), 'run')}, longest {duration_words(longest)}",
        WIDTH,
        HEIGHT + AXIS - 3,
        "newest →",
    )


def _rect(index: int, bar: Bar, slot: float, longest: int) -> tuple[object, ...]:
    # A run without a duration (still running, lost) keeps a stub so its colour shows.
    height = max(2.0, (bar.duration_ms or 0) / longest * (HEIGHT - 4))
    duration = duration_words(bar.duration_ms) if bar.duration_ms is not None else "no duration"
    return (
        f"{index * slot + GAP / 2:.1f}",
        f"{HEIGHT - height:.1f}",
        f"{max(slot - GAP, 1.0):.1f}",
        f"{height:.1f}",
        STATUS_COLOURS.get(bar.status, "#757575"),
        f"{bar.started_at:%Y-%m-%d %H:%M:%S} UTC · {bar.status} · {duration}",
    )


def chart_legend() -> SafeString:
    return format_html_join(
        " ",
        '<span class="cc-legend"><span class="cc-swatch" style="background:{}"></span>{}</span>',
        ((colour, status) for status, colour in STATUS_COLOURS.items()),
    )


# --- Adaptation: the gap between runs over time, hint periods and pauses marked --------

GAP_HEIGHT, DURATION_HEIGHT, LABEL_WIDTH = 150, 50, 64
BAND_COLOURS = {"hint": "#b2ebf2", "pause": "#cfd8dc"}
GAP_COLOUR = "#1565c0"
GAP_TICKS_MS = (100, 1_000, 10_000, 60_000, 600_000, 3_600_000, 21_600_000, 86_400_000)


@dataclass(frozen=True)
class Period:
    """A stretch of time marked on the chart: an active hint or a pause."""

    start: datetime
    end: datetime
    kind: str  # "hint" or "pause"
    label: str


@dataclass(frozen=True)
class _Axes:
    start: datetime
    span: float  # seconds
    low: float  # log10 of the smallest gap shown
    high: float

    def x(self, at: datetime) -> float:
        offset = min(max((at - self.start).total_seconds(), 0.0), self.span)
        return LABEL_WIDTH + offset / self.span * (WIDTH - LABEL_WIDTH)

    def y(self, ms: float) -> float:
        share = (math.log10(max(ms, 1.0)) - self.low) / (self.high - self.low)
        return 6 + (1 - share) * (GAP_HEIGHT - 12)


def adaptation_chart(
    bars: Sequence[Bar], periods: Sequence[Period], *, now: datetime
) -> SafeString:
    """Top: each run's gap since the previous run's start (log scale, in words), with the
    hint periods (teal) and pauses (grey) behind. Bottom: each run's duration, coloured by
    outcome, on the same time axis. Oldest on the left."""
    if len(bars) < 2:
        return format_html('<p class="cc-muted">{}</p>', "Not enough runs to show the gaps yet.")
    gaps = [
        (b.started_at, (b.started_at - a.started_at).total_seconds() * 1000)
        for a, b in itertools.pairwise(bars)
    ]
    end = max(now, bars[-1].started_at)
    low, high = _log_bounds([ms for _at, ms in gaps])
    axes = _Axes(
        bars[0].started_at, max((end - bars[0].started_at).total_seconds(), 1.0), low, high
    )
    total = GAP_HEIGHT + AXIS + DURATION_HEIGHT + AXIS
    return format_html(
        '<svg class="cc-chart" id="cc-adaptation" role="img" aria-label="{}" viewBox="0 0 {} {}" '
        'width="{}" height="{}" xmlns="http://www.w3.org/2000/svg">{}{}{}{}'
        '<text x="{}" y="{}" font-size="11" fill="#666">{}</text>'
        '<text x="{}" y="{}" font-size="11" fill="#666" text-anchor="end">{}</text></svg>',
        f"Gaps between the last {len(bars)} runs, with hints and pauses, and their durations",
        WIDTH,
        total,
        WIDTH,
        total,
        _bands(axes, periods, end),
        _gap_scale(axes),
        _gap_line(axes, gaps),
        _duration_strip(axes, bars),
        LABEL_WIDTH,
        total - 3,
        f"{axes.start:%Y-%m-%d %H:%M} UTC",
        WIDTH,
        total - 3,
        f"{end:%H:%M} UTC →",
    )


def _bands(axes: _Axes, periods: Sequence[Period], end: datetime) -> SafeString:
    shown = [p for p in periods if p.end > axes.start and p.start < end]
    return format_html_join(
        "",
        '<rect x="{}" y="0" width="{}" height="{}" fill="{}"><title>{}</title></rect>',
        (
            (_n(axes.x(p.start)), _n(max(axes.x(p.end) - axes.x(p.start), 1.5)), GAP_HEIGHT,
             BAND_COLOURS[p.kind], p.label)
            for p in shown
        ),
    )  # fmt: skip


def _gap_scale(axes: _Axes) -> SafeString:
    """A grid line at each round duration within the chart (1 s, 10 s, 1 min, 10 min…)."""
    shown = [ms for ms in GAP_TICKS_MS if 10**axes.low <= ms <= 10**axes.high]
    return format_html_join(
        "",
        '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#eee"/>'
        '<text x="{}" y="{}" font-size="10" fill="#666" text-anchor="end">{}</text>',
        (
            (LABEL_WIDTH, _n(axes.y(ms)), WIDTH, _n(axes.y(ms)), LABEL_WIDTH - 4,
             _n(axes.y(ms) + 3), duration_words(ms))
            for ms in shown
        ),
    )  # fmt: skip


def _gap_line(axes: _Axes, gaps: Sequence[tuple[datetime, float]]) -> SafeString:
    points = " ".join(f"{axes.x(at):.1f},{axes.y(ms):.1f}" for at, ms in gaps)
    dots = format_html_join(
        "",
        '<circle cx="{}" cy="{}" r="2.5" fill="{}"><title>{}</title></circle>',
        (
            (_n(axes.x(at)), _n(axes.y(ms)), GAP_COLOUR,
             f"{at:%Y-%m-%d %H:%M:%S} UTC · gap {duration_words(ms)}")
            for at, ms in gaps
        ),
    )  # fmt: skip
    return format_html(
        '<polyline points="{}" fill="none" stroke="{}" stroke-width="1.5"/>{}',
        points,
        GAP_COLOUR,
        dots,
    )


def _duration_strip(axes: _Axes, bars: Sequence[Bar]) -> SafeString:
    """Each run's duration as a thin bar under its start, coloured by outcome."""
    top = GAP_HEIGHT + AXIS
    longest = max((bar.duration_ms or 0) for bar in bars) or 1

    def rect(bar: Bar) -> tuple[object, ...]:
        height = max(2.0, (bar.duration_ms or 0) / longest * DURATION_HEIGHT)
        return (
            _n(axes.x(bar.started_at) - 1),
            _n(top + DURATION_HEIGHT - height),
            _n(height),
            STATUS_COLOURS.get(bar.status, "#757575"),
            f"{bar.started_at:%Y-%m-%d %H:%M:%S} UTC · {bar.status} · "
            f"{duration_words(bar.duration_ms)}",
        )

    rects = format_html_join(
        "",
        '<rect x="{}" y="{}" width="2" height="{}" fill="{}"><title>{}</title></rect>',
        (rect(bar) for bar in bars),
    )
    return format_html(
        '<text x="0" y="{}" font-size="11" fill="#333">duration</text>'
        '<text x="0" y="{}" font-size="10" fill="#666">max {}</text>{}',
        top + 12,
        top + 26,
        duration_words(longest),
        rects,
    )


def _n(value: float) -> str:
    # format_html escapes its arguments into strings first: numbers are formatted here.
    return f"{value:.1f}"


def _log_bounds(values: Sequence[float]) -> tuple[float, float]:
    """log10 bounds around the values, at least one decade apart."""
    low = math.floor(math.log10(max(min(values), 1.0)))
    high = math.ceil(math.log10(max(max(values), 1.0)))
    return float(low), float(max(high, low + 1))


def adaptation_legend() -> SafeString:
    items = [
        (GAP_COLOUR, "gap between runs"),
        (BAND_COLOURS["hint"], "planner hint active"),
        (BAND_COLOURS["pause"], "paused"),
    ]
    return format_html_join(
        " ",
        '<span class="cc-legend"><span class="cc-swatch" style="background:{}"></span>{}</span>',
        items,
    )
