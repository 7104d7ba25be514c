"""Small HTML pieces the admin pages share: badges, links, times in words, pretty JSON.

Everything goes through ``format_html`` so values from endpoints and responses (which
are untrusted) are escaped.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.contrib import admin
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from endpoints import operations
from endpoints.governor import ENDED, SOURCE_WORDS, preview_runs
from endpoints.models import Endpoint
from endpoints.schedules import format_interval
from endpoints.wording import count_words, delta_words

PRETTY_JSON_LIMIT = 200_000


def when(at: datetime | None) -> str:
    return f"{at:%Y-%m-%d %H:%M:%S} UTC" if at else "—"


def when_precisely(at: datetime | None) -> str:
    """To the millisecond: run timings are read at that grain."""
    return f"{at:%Y-%m-%d %H:%M:%S}.{at.microsecond // 1000:03d} UTC" if at else "—"


def status_badge(status: str) -> SafeString:
    return format_html('<span class="cc-badge cc-{}">{}</span>', status, status)


def endpoint_link(endpoint: Endpoint) -> SafeString:
    url = reverse("admin:endpoints_endpoint_change", args=[endpoint.pk])
    return format_html('<a href="{}">{}/{}</a>', url, endpoint.job.name, endpoint.name)


def run_link(run_id: int) -> SafeString:
    url = reverse("admin:endpoints_run_change", args=[run_id])
    return format_html('<a href="{}">run {}</a>', url, run_id)


def next_run_words(endpoint: Endpoint, now: datetime) -> str:
    """'in 4 minutes (the baseline interval)', or why there is no next run."""
    if endpoint.archived_at:
        return "never (archived)"
    if endpoint.next_run_at is None and endpoint.next_run_source == ENDED:
        return f"never: {SOURCE_WORDS[ENDED]}"
    if endpoint.next_run_at is None:
        return "not planned yet"
    source = SOURCE_WORDS.get(endpoint.next_run_source, endpoint.next_run_source or "unknown")
    return f"{delta_words(endpoint.next_run_at - now)} ({source})"


def _hint_fresh(endpoint: Endpoint, now: datetime) -> bool:
    return endpoint.ai_hint_expires_at is not None and endpoint.ai_hint_expires_at > now


def _hint_words(endpoint: Endpoint) -> str:
    parts = []
    if endpoint.ai_hint_interval_ms is not None:
        parts.append(f"every {format_interval(endpoint.ai_hint_interval_ms)}")
    if endpoint.ai_hint_next_run_at is not None:
        parts.append(f"once at {endpoint.ai_hint_next_run_at:%H:%M:%S}")
    return " and ".join(parts) or "hint"


def hint_badge(endpoint: Endpoint, now: datetime) -> SafeString | None:
    if not _hint_fresh(endpoint, now):
        return None
    return format_html(
        '<span class="cc-badge cc-hinted" title="{}">hint: {} until {}</span>',
        endpoint.ai_hint_reason,
        _hint_words(endpoint),
        f"{endpoint.ai_hint_expires_at:%H:%M}",
    )


def hint_summary(endpoint: Endpoint, now: datetime) -> SafeString:
    if not _hint_fresh(endpoint, now):
        return format_html("{}", "None: the baseline schedule applies.")
    expires = endpoint.ai_hint_expires_at
    assert expires is not None
    return format_html(
        "<strong>{}</strong>, expires {} ({}).<br>Reason: {}",
        _hint_words(endpoint).capitalize(),
        when(expires),
        delta_words(expires - now),
        endpoint.ai_hint_reason or "—",
    )


def pretty_json(value: Any) -> SafeString:
    """JSON indented in a <pre>; text stays text. Capped so a huge body cannot stall a page."""
    if value is None:
        return format_html('<span class="cc-muted">{}</span>', "no body")
    text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
    if len(text) > PRETTY_JSON_LIMIT:
        text = text[:PRETTY_JSON_LIMIT] + "\n… (cut for display)"
    return format_html('<pre class="cc-json">{}</pre>', text)


def waiting_words(endpoint: Endpoint, now: datetime, *, in_flight_of_job: int) -> str:
    """Why the endpoint is not running now when it is waiting, else ''."""
    if endpoint.archived_at:
        return ""
    if endpoint.is_paused(now):
        reason = endpoint.pause_reason or "no reason given"
        return f"Paused {endpoint.pause_words(now)}: {reason}."
    due = endpoint.next_run_at is not None and endpoint.next_run_at <= now
    limit = endpoint.job.max_concurrent
    if due and limit is not None and in_flight_of_job >= limit:
        return (
            f"Due, waiting for a free place: its job runs at most {limit} at once and "
            f"{in_flight_of_job} are running."
        )
    if endpoint.failure_count and endpoint.baseline_interval_ms and endpoint.next_run_at:
        factor = 2 ** min(endpoint.failure_count, 5)
        return (
            f"Backing off after {count_words(endpoint.failure_count, 'failure')} in a row: "
            f"{factor} times the interval, next attempt at {when(endpoint.next_run_at)}."
        )
    return ""


PREVIEW_RUNS = 5


@admin.display(description="next runs")
def next_runs(model_admin: Any, obj: Endpoint) -> SafeString | str:
    """The next runs as saved (each on time and successful), in the endpoint's zone with
    its UTC offset (so DST shows) and in UTC; ``explain --next`` and the API's preview
    say the same."""
    if obj.pk is None or obj.archived_at:
        return "—"
    try:
        plans = preview_runs(
            timezone.now(),
            operations.held_schedule(obj),
            PREVIEW_RUNS,
            last_run_at=obj.last_run_at,
        )
    except ValueError as exc:
        return f"cannot be planned: {exc}"
    zone = ZoneInfo(obj.timezone or "UTC")
    return format_html_join(
        "",
        "<div class='cc-code'>{} &nbsp;|&nbsp; {} UTC &nbsp;({})</div>",
        ((local_stamp(plan.next_run_at, zone), utc_stamp(plan.next_run_at), plan.source)
         for plan in plans),
    )  # fmt: skip


def local_stamp(at: datetime, zone: ZoneInfo) -> str:
    """'Sun 2026-11-01 01:30:00 EST (UTC-05:00)': the offset beside the zone's
    abbreviation, so a DST change shows even where the abbreviation does not change."""
    local = at.astimezone(zone)
    offset = local.strftime("%z")
    return f"{local:%a %Y-%m-%d %H:%M:%S}{_millis(local)} {local:%Z} (UTC{offset[:3]}:{offset[3:]})"


def utc_stamp(at: datetime) -> str:
    utc = at.astimezone(UTC)
    return f"{utc:%Y-%m-%d %H:%M:%S}{_millis(utc)}"


def _millis(at: datetime) -> str:
    # Only when there are any: a jittered run lands between seconds.
    return f".{at.microsecond // 1000:03d}" if at.microsecond else ""
