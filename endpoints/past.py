"""Why a past slot ran or did not: ``explain ENDPOINT --at PAST``, the API's and MCP's
explain_slot and the admin's line ask ``explain_past``.

The answer comes from what was recorded, never from planning again: the runs (a run of
the slot, or one the catch-up window skipped), the audit trail (who archived the
endpoint, paused or archived its job, paused it), the hint history (pauses with their
source and end, hints), the scheduler's gaps (``audit.SchedulerGap``, and the tick
heartbeat for a gap still going on). Only the run policy's windows are read as they are
now (the trail says if the policy changed since).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from django.conf import settings

from endpoints.audit import GAP_SECONDS, AuditEntry, SchedulerGap
from endpoints.choices import BREAKER_SOURCES, FAILED_STATUSES, HintKind, RunStatus
from endpoints.models import Endpoint, Heartbeat, HintHistory, Run
from endpoints.schedules import last_cron_at_or_before
from endpoints.windows import free_week, is_free

RAN, SKIPPED, NOT_YET, ARCHIVED, JOB_STOPPED = "ran", "skipped", "not-created", "archived", "job"
RATE_LIMITED = "rate-limit"  # ran, later than its slot: its host's rate limit held it back
PAUSED, BREAKER, WINDOW, DOWN, HINTED, UNKNOWN = (
    "paused",
    "breaker",
    "window",
    "scheduler-down",
    "hint",
    "unknown",
)


@dataclass(frozen=True)
class PastSlot:
    """What happened to the slot due at ``at``: ``reason`` (one of the names above), in
    words, with the run, the actor or the end of a pause where there is one."""

    at: datetime
    slot: datetime
    reason: str
    words: str
    run_id: int | None = None
    actor: str = ""
    until: datetime | None = None


def explain_past(endpoint: Endpoint, at: datetime, *, now: datetime) -> PastSlot:
    """The slot due at ``at`` (a cron endpoint's last occurrence at or before it; an
    interval endpoint's run within the interval before it) and why it ran or did not."""
    slot, span = _slot_of(endpoint, at)
    answer = _ran(endpoint, slot, span)
    for check in (_not_yet, _archived, _job_stopped, _paused, _window, _down, _hinted):
        answer = answer or check(endpoint, slot)
    return replace(answer or _unknown(slot, now), at=at)


def _slot_of(endpoint: Endpoint, at: datetime) -> tuple[datetime, tuple[datetime, datetime]]:
    if endpoint.baseline_cron:
        slot = last_cron_at_or_before(endpoint.baseline_cron, endpoint.timezone, at)
        return slot, (slot, slot + timedelta(minutes=1))
    every = timedelta(milliseconds=endpoint.baseline_interval_ms or 60_000)
    return at, (at - every, at + timedelta(seconds=1))


def _stamp(at: datetime) -> str:
    return f"{at:%Y-%m-%d %H:%M:%S} UTC"


def _ran(endpoint: Endpoint, slot: datetime, span: tuple[datetime, datetime]) -> PastSlot | None:
    run = (
        Run.objects.filter(endpoint_id=endpoint.pk, scheduled_for__gte=span[0])
        .filter(scheduled_for__lt=span[1])
        .exclude(trigger="test")
        .order_by("scheduled_for", "attempt")
        .first()
    )
    if run is None:
        return None
    if run.status == RunStatus.SKIPPED:
        words = f"Skipped (run {run.pk}): {run.error or 'found later than the catch-up window'}."
        return PastSlot(slot, slot, SKIPPED, words, run_id=run.pk)
    outcome = "failed" if run.status in FAILED_STATUSES else run.status
    words = f"Ran: run {run.pk} started {_stamp(run.started_at)}, {outcome}."
    if run.delay_reason:
        return PastSlot(slot, slot, RATE_LIMITED, f"{words} {run.delay_reason}", run_id=run.pk)
    return PastSlot(slot, slot, RAN, words, run_id=run.pk)


def _not_yet(endpoint: Endpoint, slot: datetime) -> PastSlot | None:
    if slot >= endpoint.created_at:
        return None
    words = f"The endpoint did not exist yet: it was created {_stamp(endpoint.created_at)}."
    return PastSlot(slot, slot, NOT_YET, words)


def _entry(kind: str, pk: int, actions: tuple[str, ...], before: datetime) -> AuditEntry | None:
    return (
        AuditEntry.objects.filter(object_type=kind, object_id=pk, action__in=actions)
        .filter(at__lte=before)
        .order_by("-at", "-pk")
        .first()
    )


def _archived(endpoint: Endpoint, slot: datetime) -> PastSlot | None:
    if endpoint.archived_at is None or endpoint.archived_at > slot:
        return None
    entry = _entry("endpoint", endpoint.pk, ("archived",), endpoint.archived_at)
    actor = entry.actor if entry else ""
    by = f" by {actor}" if actor else ""
    words = f"Archived{by} at {_stamp(endpoint.archived_at)}: archived endpoints never run."
    return PastSlot(slot, slot, ARCHIVED, words, actor=actor)


def _job_stopped(endpoint: Endpoint, slot: datetime) -> PastSlot | None:
    actions = ("paused", "resumed", "archived", "unarchived")
    entry = _entry("job", endpoint.job_id, actions, slot)
    if entry is None or entry.action == "resumed":
        return None
    state = "archived" if entry.action == "archived" else "paused"
    words = f"Its job {endpoint.job.name} was {state} by {entry.actor} at {_stamp(entry.at)}."
    return PastSlot(slot, slot, JOB_STOPPED, words, actor=entry.actor)


def _paused(endpoint: Endpoint, slot: datetime) -> PastSlot | None:
    pause = (
        HintHistory.objects.filter(endpoint_id=endpoint.pk, created_at__lte=slot)
        .filter(kind__in=(HintKind.PAUSE, HintKind.RESUME))
        .select_related("created_by")
        .order_by("-created_at", "-pk")
        .first()
    )
    if pause is None or pause.kind != HintKind.PAUSE or not pause.paused_until:
        return None
    if pause.paused_until <= slot:
        return None
    until = pause.paused_until
    if pause.pause_source in BREAKER_SOURCES:
        words = f"The breaker was open (since {_stamp(pause.created_at)}): {pause.reason}."
        return PastSlot(slot, slot, BREAKER, words, actor="breaker", until=until)
    entry = _entry("endpoint", endpoint.pk, ("paused",), pause.created_at)
    actor = (
        entry.actor
        if entry and entry.at == pause.created_at
        else pause.created_by.get_username()
        if pause.created_by
        else f"planner session {pause.session_id}"
        if pause.session_id
        else "someone (not recorded)"
    )
    reason = f" ({pause.reason})" if pause.reason else ""
    words = f"Paused by {actor} at {_stamp(pause.created_at)} until {_stamp(until)}{reason}."
    return PastSlot(slot, slot, PAUSED, words, actor=actor, until=until)


def _window(endpoint: Endpoint, slot: datetime) -> PastSlot | None:
    policy = endpoint.policy
    if not (policy.allowed or policy.blackout):
        return None
    free = free_week(policy.allowed, policy.blackout)
    if is_free(slot, ZoneInfo(endpoint.timezone or "UTC"), free):
        return None
    changed = _entry("endpoint", endpoint.pk, ("updated",), endpoint.updated_at)
    since = (
        " (by the run policy as it is now; it was changed after that slot)"
        if changed and changed.at > slot and "run_policy" in changed.change_words
        else ""
    )
    what = "in a blackout window" if policy.blackout else "outside its allowed windows"
    words = f"The slot was {what} of its run policy{since}; the run moved to the next free time."
    return PastSlot(slot, slot, WINDOW, words)


def _down(endpoint: Endpoint, slot: datetime) -> PastSlot | None:
    gap = SchedulerGap.objects.filter(started_at__lt=slot, ended_at__gt=slot).first()
    if gap is not None:
        words = (
            f"The scheduler was not running: no tick from {_stamp(gap.started_at)} "
            f"to {_stamp(gap.ended_at)}."
        )
        return PastSlot(slot, slot, DOWN, words)
    tick = Heartbeat.objects.filter(name="tick").first()
    if tick is None:
        return PastSlot(slot, slot, DOWN, "The scheduler has never ticked (no tick recorded).")
    if tick.at + timedelta(seconds=GAP_SECONDS) < slot:
        words = f"The scheduler was not running: its last tick was {_stamp(tick.at)}."
        return PastSlot(slot, slot, DOWN, words)
    return None


def _hinted(endpoint: Endpoint, slot: datetime) -> PastSlot | None:
    hint = (
        HintHistory.objects.filter(endpoint_id=endpoint.pk, created_at__lte=slot)
        .filter(kind__in=(HintKind.INTERVAL, HintKind.ONESHOT, HintKind.CLEAR))
        .order_by("-created_at", "-pk")
        .first()
    )
    if hint is None or hint.kind == HintKind.CLEAR or not hint.expires_at:
        return None
    if hint.expires_at <= slot:
        return None
    what = f"an interval of {hint.interval_ms} ms" if hint.interval_ms else "a one-shot run"
    words = f"A hint ({what}, until {_stamp(hint.expires_at)}) replaced the baseline slot."
    return PastSlot(slot, slot, HINTED, words)


def _unknown(slot: datetime, now: datetime) -> PastSlot:
    if slot < now - timedelta(days=settings.CRONICORN_RUN_RETENTION_DAYS):
        words = "No record: the slot is older than the run retention."
    else:
        words = "No run of this slot and no recorded reason (no pause, window, gap or hint)."
    return PastSlot(slot, slot, UNKNOWN, words)
