"""A small inline SVG bar chart of recent run durations, coloured by status.

Rendered on the server with escaped text only, so the admin needs no script or
external asset to show it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

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
        f"{len(bars)} run{'s' if len(bars) != 1 else ''}, longest {longest} ms",
        WIDTH,
        HEIGHT + AXIS - 3,
        "newest →",
    )


def _rect(index: int, bar: Bar, slot: float, longest: int) -> tuple[object, ...]:
    # A run without a duration (still running, lost) keeps a stub so its colour shows.
    height = max(2.0, (bar.duration_ms or 0) / longest * (HEIGHT - 4))
    duration = f"{bar.duration_ms} ms" if bar.duration_ms is not None else "no duration"
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
