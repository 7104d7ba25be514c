"""The governor: a pure function from (now, schedule) to the next run time and why.

No ORM, no settings, no clock: ``now`` is passed in and the schedule is a frozen
dataclass whose fields are named like the Endpoint fields. The rules, in order:

1. Baseline: cron -> next occurrence strictly after ``now`` in the endpoint's time zone
   (``baseline-cron``); interval -> ``now + interval * 2**min(failure_count, 5)``
   (``baseline-interval``). Backoff applies to the baseline interval only. A late
   scheduled run's interval keeps its slot's phase (``phase_slot``, issue 23): the first
   ``slot + k * interval`` at least half an interval (and the minimum intervals) after
   ``now``; every rule below applies to that time as to any baseline.
2. Hints are fresh only while ``ai_hint_expires_at > now`` (strict). Interval hint ->
   ``now + ai_hint_interval_ms`` (``ai-interval``); one-shot -> ``ai_hint_next_run_at``
   (``ai-oneshot``).
3. Choose: both hints -> the earlier (tie -> interval), baseline ignored; interval only ->
   interval (overrides the baseline either way); one-shot only -> earlier of one-shot
   and baseline (tie -> baseline); no fresh hint -> baseline.
4. A one-shot in the past becomes ``now``.
5. Clamp relative to ``now``: below ``now + min`` -> ``now + min`` (``clamped-min``); then
   above ``now + max`` -> ``now + max`` (``clamped-max``). Zero or empty means no bound,
   so with min > max the max wins. Last, the tenant's floor (its plan's shortest
   interval): below ``now + floor`` -> ``now + floor`` (``clamped-min``); it wins over
   everything but a pause, the endpoint's max included, so nothing (a hint, a bound)
   gets an endpoint run more often than its tenant's plan allows.
6. Windows (run policy): a run before ``active_from`` moves to the schedule's first slot
   at or after it; one inside a blackout moves to its end, one outside the allowed
   windows to their next opening (``window``); one on a closed day (``exclude_dates``,
   ``holidays``) to the first open day: a cron to its first slot that day or after, any
   other run to the day's start (``calendar``), then the windows again; only later, so
   every minimum holds.
7. Pause wins: ``paused_until > now`` -> ``(paused_until, "paused")``, except that it
   never brings a run before ``active_from`` or a one-off before its time.
8. The end: a run after ``active_until``, or a one-off that has had its time, is no run
   at all: a Plan without a time (``ended``); a retry within the one-off's slot still
   comes first.

A one-off (``run_once_at``) replaces the baseline and the hints: ``once`` until its time
has come, then ``ended``.

Cron across daylight saving time follows classic cron: a wall time skipped by the
spring-forward gap runs once at the first valid instant after it (``30 2 * * *`` in
America/New_York on 2026-03-08 -> 03:00 EDT, 07:00 UTC); a wall time repeated by the
fall-back fold runs once, at its first occurrence (``30 1 * * *`` there on 2026-11-01 ->
05:30 UTC, next 2026-11-02 06:30 UTC), even when ``now`` is inside the repeated hour;
wildcard and stepped hours follow elapsed time, never doubled nor stalled (``*/15`` at
01:50 EST on 2026-03-08 -> 03:00 EDT). See ``endpoints.schedules.next_cron_after``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from endpoints.calendars import Calendar, closed_reason, next_open
from endpoints.policies import DEFAULT as DEFAULT_POLICY
from endpoints.policies import RunPolicy, jitter_offset_ms, stored_policy
from endpoints.schedules import (
    MAX_PLANNABLE_MS,
    describe_schedule,
    next_cron_after,
)
from endpoints.windows import Window, free_week, minute_of_week, next_free
from endpoints.wording import count_words, delta_words, duration_words

MAX_BACKOFF_EXPONENT = 5
BOUNDED_FIELDS = ("baseline_interval_ms", "min_interval_ms", "max_interval_ms")

BASELINE_CRON = "baseline-cron"
BASELINE_INTERVAL = "baseline-interval"
AI_INTERVAL = "ai-interval"
AI_ONESHOT = "ai-oneshot"
CLAMPED_MIN = "clamped-min"
CLAMPED_MAX = "clamped-max"
PAUSED = "paused"
WINDOW = "window"  # moved by a window: blackout, allowed hours, active period (run policy)
CALENDAR = "calendar"  # moved off a closed day: an excluded date or a holiday (run policy)
ONCE = "once"  # a one-off endpoint's one run (run policy ``run_once_at``)
ENDED = "ended"  # no next run: the active period is over, or the one-off has run
RETRY = "retry"  # a retry within the slot (run policy), after a failed attempt
MANUAL = "manual"  # not the governor's: a person asked for a run now
FOLLOW_UP = "follow-up"  # not the governor's: a run of another endpoint asked for it


# The schedule a person sets (an edit of any of these is planned again at once) and the
# active hint the planner sets; both named as the Endpoint fields and as below.
SCHEDULE_FIELDS = (
    "baseline_cron",
    "timezone",
    "baseline_interval_ms",
    "min_interval_ms",
    "max_interval_ms",
)
# An edit of these plans the next run again at once (the run policy holds the windows).
REPLAN_FIELDS = (*SCHEDULE_FIELDS, "run_policy")
# Fields of EndpointSchedule that come from the run policy or the engine, not from
# endpoint fields of the same name.
POLICY_FIELDS = (
    "backoff_cap_ms",
    "jitter_offset_ms",
    "retry_at",
    "retry_attempt",
    "blackout",
    "allowed",
    "active_from",
    "active_until",
    "run_once_at",
    "calendar",
    "phase_slot",
    "policy_problem",
)
HINT_FIELDS = ("ai_hint_interval_ms", "ai_hint_next_run_at", "ai_hint_expires_at")


@dataclass(frozen=True)
class EndpointSchedule:
    baseline_cron: str = ""
    timezone: str = "UTC"
    baseline_interval_ms: int | None = None
    min_interval_ms: int | None = None
    max_interval_ms: int | None = None
    ai_hint_interval_ms: int | None = None
    ai_hint_next_run_at: datetime | None = None
    ai_hint_expires_at: datetime | None = None
    paused_until: datetime | None = None
    failure_count: int = 0
    tenant_min_interval_ms: int | None = None
    # Run policy (``endpoints.policies``): the defaults keep the original's rules.
    backoff_cap_ms: int | None = (
        DEFAULT_POLICY.backoff_cap_ms
    )  # the backed-off interval never exceeds max(it, cap)
    jitter_offset_ms: int = 0  # added to every cron slot (start-to-start kept)
    retry_at: datetime | None = None  # a retry within the slot is wanted at this time
    retry_attempt: int = 0  # the attempt that retry would be (for the words)
    blackout: tuple[Window, ...] = ()  # local windows when it never runs
    allowed: tuple[Window, ...] = ()  # local windows it may run in (empty: any time)
    active_from: datetime | None = None  # no run before
    active_until: datetime | None = None  # no run after
    run_once_at: datetime | None = None  # a one-off: this run, then none
    calendar: Calendar | None = None  # local dates it never runs on
    # The engine's, for a scheduled run: its slot, whose phase a late run's interval keeps.
    phase_slot: datetime | None = None
    # Why the stored run policy could not be used (its defaults apply), else "".
    policy_problem: str = ""

    @classmethod
    def from_endpoint(cls, endpoint: Any) -> EndpointSchedule:
        return cls(
            baseline_cron=endpoint.baseline_cron or "",
            timezone=endpoint.timezone or "UTC",
            baseline_interval_ms=endpoint.baseline_interval_ms,
            min_interval_ms=endpoint.min_interval_ms,
            max_interval_ms=endpoint.max_interval_ms,
            ai_hint_interval_ms=endpoint.ai_hint_interval_ms,
            ai_hint_next_run_at=endpoint.ai_hint_next_run_at,
            ai_hint_expires_at=endpoint.ai_hint_expires_at,
            paused_until=endpoint.paused_until,
            failure_count=endpoint.failure_count or 0,
            tenant_min_interval_ms=endpoint.tenant_min_interval_ms,
            **policy_fields(endpoint),
        )

    def hints_fresh(self, now: datetime) -> bool:
        return self.ai_hint_expires_at is not None and self.ai_hint_expires_at > now


@dataclass(frozen=True)
class Candidate:
    source: str
    at: datetime


@dataclass(frozen=True)
class Plan:
    next_run_at: datetime | None  # None: no next run (``ENDED``)
    source: str


@dataclass(frozen=True)
class Upcoming:
    """One run of a preview: always a time."""

    next_run_at: datetime
    source: str


@dataclass(frozen=True)
class Decision:
    """The whole trail behind a Plan, for people (``explain``) and the admin."""

    now: datetime
    plan: Plan
    baseline: Candidate
    hints_fresh: bool
    candidates: tuple[Candidate, ...]
    chosen: Candidate | None  # None: a one-off whose time has come, without a retry
    steps: tuple[str, ...] = field(default=())


def policy_fields(endpoint: Any) -> dict[str, Any]:
    """The governor's share of an endpoint's run policy: ``endpoint.policy`` where its
    reader resolved it (``policies.stored_policy``), else from the two stored objects."""
    policy: RunPolicy | None = getattr(endpoint, "policy", None)
    if policy is None:
        policy = stored_policy(
            getattr(endpoint, "job_run_policy", None), getattr(endpoint, "run_policy", None)
        )
    offset = jitter_offset_ms(endpoint.pk or 0, policy.jitter_ms) if policy.jitter_ms else 0
    return {
        "backoff_cap_ms": policy.backoff_cap_ms,
        "jitter_offset_ms": offset,
        "blackout": policy.blackout,
        "allowed": policy.allowed,
        "active_from": policy.active_from,
        "active_until": policy.active_until,
        "run_once_at": policy.run_once_at,
        "calendar": policy.calendar,
        "policy_problem": policy.problem,
    }


def plan_next_run(now: datetime, schedule: EndpointSchedule) -> Plan:
    return decide(now, schedule).plan


def plan_after_edit(
    now: datetime, last_run_at: datetime | None, schedule: EndpointSchedule
) -> Plan:
    """The next run after the schedule was edited, planned as a run is: start-to-start
    from the last run's start (the new cadence, or the first cron slot after it, clamps
    included), or ``now`` if that moment has passed, so an edit never postpones a due
    run (trap 18). Without a past run it plans from ``now``. Hints count if they are
    fresh now; a pause in force now wins."""
    return decide_after_edit(now, last_run_at, schedule).plan


def decide_after_edit(
    now: datetime, last_run_at: datetime | None, schedule: EndpointSchedule
) -> Decision:
    """``plan_after_edit`` with its trail: what the scheduler holds between two runs, so
    the explanation (API, MCP, admin, ``explain``) says what the scheduler will do rather
    than plan as if a run started now."""
    schedule = missed_one_off(now, last_run_at, schedule)
    if last_run_at is None or last_run_at >= now:
        return decide(now, schedule)
    if not schedule.hints_fresh(now):
        schedule = replace(
            schedule, ai_hint_interval_ms=None, ai_hint_next_run_at=None, ai_hint_expires_at=None
        )
    decision = decide(last_run_at, replace(schedule, paused_until=None))
    at = decision.plan.next_run_at
    if at is None:
        return replace(decision, now=now)
    if schedule.paused_until is not None and schedule.paused_until > now:
        return decide(now, schedule)  # the pause, within the windows' limits
    baseline = decision.baseline
    steps = [
        f"baseline: {_when(baseline.at, now)} ({baseline.source}), start to start from "
        f"the last run's start, {_stamp(last_run_at)}",
        *decision.steps[1:],
    ]
    if at < now:
        steps.append(f"that time, {_stamp(at)}, has passed: run now")
    return replace(
        decision, now=now, plan=Plan(max(at, now), decision.plan.source), steps=tuple(steps)
    )


def nudged(current: Plan | None, plan: Plan) -> Plan:
    """What a hint (or a reset of failures) makes of the planned next run: ``plan`` may
    bring it forward, never push it back, so the planned run stands when it comes first
    or at the same time; the new cadence takes over from that run on."""
    if (
        current is not None
        and current.next_run_at is not None
        and plan.next_run_at is not None
        and current.next_run_at <= plan.next_run_at
    ):
        return current
    return plan


def missed_one_off(
    now: datetime, last_run_at: datetime | None, schedule: EndpointSchedule
) -> EndpointSchedule:
    """A one-off whose time has passed without a run since (the scheduler was down, the
    endpoint paused over it) is due now rather than never: for a plan made outside a run
    (an edit, a resume), which knows the last run."""
    once = schedule.run_once_at
    if once is None or once > now or (last_run_at is not None and last_run_at >= once):
        return schedule
    return replace(schedule, run_once_at=now + timedelta(microseconds=1))


def decide(now: datetime, schedule: EndpointSchedule) -> Decision:
    steps: list[str] = _out_of_bounds(schedule)
    if schedule.policy_problem:
        steps.append(
            f"the stored run policy cannot be used ({schedule.policy_problem[:300]}): "
            "the defaults apply; correct the run policy"
        )
    baseline = _baseline(now, schedule)
    steps.insert(0, f"baseline: {_when(baseline.at, now)} ({baseline.source})")
    if schedule.phase_slot is not None and _on_phase(now, schedule) is not None:
        steps.append(f"started late: kept on the phase of its slot, {_stamp(schedule.phase_slot)}")
    if schedule.jitter_offset_ms and schedule.baseline_cron:
        steps.append(
            f"jitter: each cron slot + {duration_words(schedule.jitter_offset_ms)} (run policy)"
        )
    if schedule.baseline_interval_ms and not schedule.baseline_cron and schedule.failure_count:
        plain = schedule.baseline_interval_ms * 2 ** min(
            schedule.failure_count, MAX_BACKOFF_EXPONENT
        )
        if backed_off_ms(schedule) < plain:
            steps.append(
                f"backoff capped at {duration_words(backed_off_ms(schedule))} (run policy)"
            )

    fresh = schedule.hints_fresh(now)
    candidates = [baseline]
    chosen: Candidate | None
    if schedule.run_once_at is not None:
        chosen = _one_off(now, schedule, fresh, candidates, steps)
    else:
        interval_hint = oneshot_hint = None
        if fresh:
            if schedule.ai_hint_interval_ms is not None:
                hinted = _bounded(schedule.ai_hint_interval_ms)
                interval_hint = Candidate(AI_INTERVAL, now + _ms(hinted))
                candidates.append(interval_hint)
            if schedule.ai_hint_next_run_at is not None:
                oneshot_hint = Candidate(AI_ONESHOT, schedule.ai_hint_next_run_at)
                candidates.append(oneshot_hint)
        elif schedule.ai_hint_expires_at is not None:
            steps.append("hints expired: ignored")
        chosen = _choose(baseline, interval_hint, oneshot_hint, steps)
    if schedule.retry_at is not None:
        retry = Candidate(RETRY, max(schedule.retry_at, now))
        candidates.append(retry)
        if chosen is None or retry.at < chosen.at:
            chosen = retry
            steps.append(
                f"attempt {schedule.retry_attempt} of this slot failed before: retry "
                f"{_when(retry.at, now)} (run policy)"
            )
        else:
            steps.append("a retry would come after the next run: no retry, the slot failed")

    def decision(at: datetime | None, source: str) -> Decision:
        return Decision(
            now=now,
            plan=Plan(at, source),
            baseline=baseline,
            hints_fresh=fresh,
            candidates=tuple(candidates),
            chosen=chosen,
            steps=tuple(steps),
        )

    if chosen is None:
        return decision(None, ENDED)
    at, source = chosen.at, chosen.source
    if at < now:
        steps.append(f"the {'one-off' if source == ONCE else 'one-shot'} time has passed: run now")
        at = now
    at, source = _clamp(now, at, source, schedule, steps)
    if chosen.source in (RETRY, ONCE):
        # Clamps may delay a retry or a one-off, which stay what they are; nothing brings
        # a one-off before its time (a maximum interval would run it twice).
        source = chosen.source
        if source == ONCE and at < chosen.at:
            steps.append("the maximum interval does not bring a one-off forward")
            at = chosen.at
    if schedule.active_from is not None and at < schedule.active_from:
        at, source = _first_active(at, source, schedule, steps)
    moved = _into_free_time(at, source, schedule, steps)
    if moved is None:
        return decision(None, ENDED)
    at, source = moved
    if schedule.paused_until is not None and schedule.paused_until > now:
        earliest = _earliest(schedule, chosen)
        if earliest is not None and schedule.paused_until < earliest:
            steps.append(
                f"paused until {_stamp(schedule.paused_until)}, but no run comes before "
                f"{_stamp(earliest)}: planned for then"
            )
        else:
            steps.append(f"paused until {_stamp(schedule.paused_until)}: pause wins")
            at, source = schedule.paused_until, PAUSED
    if schedule.active_until is not None and at > schedule.active_until:
        steps.append(f"the active period ended at {_stamp(schedule.active_until)}; no more runs")
        return decision(None, ENDED)
    return decision(at, source)


def _one_off(
    now: datetime,
    schedule: EndpointSchedule,
    fresh: bool,
    candidates: list[Candidate],
    steps: list[str],
) -> Candidate | None:
    """A one-off's candidate: its time until it comes (strictly after ``now``: a run
    planned at ``now`` or later is that run), then none."""
    assert schedule.run_once_at is not None
    once = schedule.run_once_at
    steps.append(
        f"a one-off at {_stamp(once)} (run_once_at): the baseline schedule"
        + (" and the hints are" if fresh else " is")
        + " not used"
    )
    if once <= now:
        steps.append(f"the one-off at {_stamp(once)} has had its run: no more runs")
        return None
    candidate = Candidate(ONCE, once)
    candidates.append(candidate)
    return candidate


def _earliest(schedule: EndpointSchedule, chosen: Candidate) -> datetime | None:
    """The time no run may come before whatever a pause says: the active period's start,
    a one-off's time."""
    limits = [schedule.active_from] if schedule.active_from is not None else []
    if chosen.source == ONCE:
        limits.append(chosen.at)
    return max(limits) if limits else None


def _first_active(
    at: datetime, source: str, schedule: EndpointSchedule, steps: list[str]
) -> tuple[datetime, str]:
    """A run before the active period moves to the schedule's first slot at or after its
    start: a cron slot exactly then counts (its jitter added), an interval starts then;
    a one-off or a retry moves to the start itself."""
    start = schedule.active_from
    assert start is not None
    first = start
    if schedule.baseline_cron and source not in (RETRY, ONCE):
        first = _baseline(start - timedelta(microseconds=1), schedule).at
    steps.append(
        f"before the active period, which starts at {_stamp(start)}: moved to "
        f"{'its first slot' if first > start else 'its start'}, {_stamp(first)}"
    )
    return first, (source if source in (RETRY, ONCE) else WINDOW)


def _into_windows(
    at: datetime, source: str, schedule: EndpointSchedule, steps: list[str]
) -> tuple[datetime, str] | None:
    """A run inside a blackout window, or outside the allowed windows, moves to the first
    time inside an allowed window and outside every blackout: one lookup in the policy's
    free week (``endpoints.windows``). Only later, so every minimum still holds; a pause
    still wins after this. None (with a step) when the windows leave no time:
    validation refuses such policies, so only a policy stored some other way gets here."""
    if not schedule.blackout and not schedule.allowed:
        return at, source
    zone = ZoneInfo(schedule.timezone or "UTC")
    free = free_week(schedule.allowed, schedule.blackout)
    found = next_free(at, zone, free)
    if found is None:
        steps.append(
            "no time inside the allowed windows and outside the blackout windows was found: "
            "no run; correct the run policy"
        )
        return None
    if found == at:
        return at, source
    blackout = free.blackout_covering(minute_of_week(at, zone))
    if blackout is not None:
        steps.append(
            f"inside the blackout window {blackout.words()} ({schedule.timezone}): "
            f"moved to the next time free to run, {_stamp(found)}"
        )
    else:
        steps.append(
            f"outside the allowed windows ({', '.join(w.words() for w in schedule.allowed)}, "
            f"{schedule.timezone}): moved to the next opening, {_stamp(found)}"
        )
    # A retry or a one-off moved by a window is still what it was.
    return found, (source if source in (RETRY, ONCE) else WINDOW)


# Rounds of windows and calendar, each moving a run later, before a plan gives up.
MAX_FREE_ROUNDS = 32


def _into_free_time(
    at: datetime, source: str, schedule: EndpointSchedule, steps: list[str]
) -> tuple[datetime, str] | None:
    """The windows, then the calendar: a run on a closed day moves to the first open day
    (a cron to its first slot at or after that day's start, any other run to the start),
    where the windows apply again, until both agree. Each round moves at least a day, so
    a bounded number of rounds; None (with a step) when they never agree."""
    moved = _into_windows(at, source, schedule, steps)
    calendar = schedule.calendar
    if calendar is None or moved is None:
        return moved
    zone = ZoneInfo(schedule.timezone or "UTC")
    for _ in range(MAX_FREE_ROUNDS):
        at, source = moved
        opening = next_open(at, zone, calendar)
        if opening is None:
            break
        if opening == at:
            return moved
        if schedule.baseline_cron and source not in (RETRY, ONCE):
            opening = _baseline(opening - timedelta(microseconds=1), schedule).at
        day = at.astimezone(zone).date()
        steps.append(
            f"{day.isoformat()} is {closed_reason(calendar, day)} ({schedule.timezone}): "
            f"moved to {_stamp(opening)}"
        )
        moved = _into_windows(
            opening, source if source in (RETRY, ONCE) else CALENDAR, schedule, steps
        )
        if moved is None:
            return None
    steps.append(
        f"no open day was found ({calendar.words()}, {schedule.timezone}): no run; "
        "correct the run policy"
    )
    return None


def _baseline(now: datetime, schedule: EndpointSchedule) -> Candidate:
    if schedule.baseline_cron:
        if schedule.jitter_offset_ms:
            # The slot this run belongs to is found before its offset, so a jittered run
            # neither skips nor repeats a slot: start-to-start, slot + offset each time.
            offset = _ms(schedule.jitter_offset_ms)
            at = next_cron_after(schedule.baseline_cron, schedule.timezone, now - offset)
            return Candidate(BASELINE_CRON, at + offset)
        return Candidate(
            BASELINE_CRON, next_cron_after(schedule.baseline_cron, schedule.timezone, now)
        )
    if not schedule.baseline_interval_ms:
        raise ValueError("The schedule has neither a cron expression nor an interval.")
    on_phase = _on_phase(now, schedule)
    if on_phase is not None:
        return Candidate(BASELINE_INTERVAL, on_phase)
    return Candidate(BASELINE_INTERVAL, now + _ms(backed_off_ms(schedule)))


# A late interval run's next run is its next slot of the same phase at least this
# fraction of the interval after its start.
PHASE_MIN_GAP = 0.5


def _on_phase(now: datetime, schedule: EndpointSchedule) -> datetime | None:
    """A late interval run's next baseline time on its slot's phase: the first of ``slot +
    k * interval`` at least half an interval after ``now`` (its start); None when it
    plans from its start (on time, cron, or a minimum interval as long as the interval).

    Planned from the late start, a cohort delayed together (a busy second, a cold start,
    an outage) stays bunched for good: the backlog drains faster than the fleet's rate,
    so every cycle its slots fall due in fewer seconds than they were spread over, and
    those seconds are late again. On the phase, like a cron, each endpoint goes back to
    its own second however late it was; never closer to the start than half the
    interval nor than the minimum intervals allow."""
    slot = schedule.phase_slot
    if slot is None or slot >= now or schedule.baseline_cron or not schedule.baseline_interval_ms:
        return None
    interval = _ms(backed_off_ms(schedule))
    floor = max(schedule.min_interval_ms or 0, schedule.tenant_min_interval_ms or 0)
    gap = max(interval * PHASE_MIN_GAP, _ms(_bounded(floor)))
    if gap >= interval:  # a minimum interval as long as the baseline: start to start
        return None
    cycles = -((slot - (now + gap)) // interval)
    return slot + max(cycles, 1) * interval


def backed_off_ms(schedule: EndpointSchedule) -> int:
    """The baseline interval after failures: doubled per failure up to x32, and never
    beyond the policy's cap (nor below the interval itself)."""
    interval = _bounded(schedule.baseline_interval_ms or 0)
    factor = 2 ** min(max(schedule.failure_count, 0), MAX_BACKOFF_EXPONENT)
    cap = schedule.backoff_cap_ms
    if cap is not None and factor > 1:
        return min(interval * factor, max(interval, cap))
    return interval * factor


def _choose(
    baseline: Candidate,
    interval_hint: Candidate | None,
    oneshot_hint: Candidate | None,
    steps: list[str],
) -> Candidate:
    if interval_hint and oneshot_hint:
        chosen = interval_hint if interval_hint.at <= oneshot_hint.at else oneshot_hint
        steps.append(f"both hints fresh: the earlier wins ({chosen.source}), baseline ignored")
    elif interval_hint:
        chosen = interval_hint
        steps.append("interval hint fresh: it overrides the baseline")
    elif oneshot_hint:
        chosen = oneshot_hint if oneshot_hint.at < baseline.at else baseline
        steps.append(f"one-shot hint fresh: the earlier of it and the baseline ({chosen.source})")
    else:
        chosen = baseline
    return chosen


def _clamp(
    now: datetime, at: datetime, source: str, schedule: EndpointSchedule, steps: list[str]
) -> tuple[datetime, str]:
    if schedule.min_interval_ms and at < now + _ms(_bounded(schedule.min_interval_ms)):
        at, source = now + _ms(_bounded(schedule.min_interval_ms)), CLAMPED_MIN
        steps.append(f"raised to the minimum interval ({duration_words(schedule.min_interval_ms)})")
    if schedule.max_interval_ms and at > now + _ms(_bounded(schedule.max_interval_ms)):
        at, source = now + _ms(_bounded(schedule.max_interval_ms)), CLAMPED_MAX
        steps.append(
            f"lowered to the maximum interval ({duration_words(schedule.max_interval_ms)})"
        )
    floor = schedule.tenant_min_interval_ms
    if floor and at < now + _ms(_bounded(floor)):
        at, source = now + _ms(_bounded(floor)), CLAMPED_MIN
        steps.append(f"raised to the tenant's minimum interval ({duration_words(floor)})")
    return at, source


def _ms(value: int) -> timedelta:
    # Bounded, so that no stored value can overflow a datetime (see MAX_PLANNABLE_MS).
    limit = MAX_PLANNABLE_MS * 2**MAX_BACKOFF_EXPONENT
    return timedelta(milliseconds=max(-limit, min(value, limit)))


def _bounded(value: int) -> int:
    return max(-MAX_PLANNABLE_MS, min(value, MAX_PLANNABLE_MS))


def _out_of_bounds(schedule: EndpointSchedule) -> list[str]:
    """Steps reporting stored values beyond MAX_PLANNABLE_MS (planned as the bound)."""
    steps = []
    for name in (*BOUNDED_FIELDS, "ai_hint_interval_ms", "tenant_min_interval_ms"):
        value = getattr(schedule, name)
        if value is not None and abs(value) > MAX_PLANNABLE_MS:
            steps.append(
                f"{name} holds {value} ms, beyond the longest allowed "
                f"({duration_words(MAX_PLANNABLE_MS)}): planned as "
                f"{duration_words(MAX_PLANNABLE_MS)}; correct the endpoint"
            )
    return steps


def _when(at: datetime, now: datetime) -> str:
    return f"{_stamp(at)}, {delta_words(at - now)}"


def _stamp(at: datetime) -> str:
    """UTC to the second (sub-second digits only when there are any): readable in text."""
    utc = at.astimezone(UTC)
    text = utc.strftime("%Y-%m-%d %H:%M:%S")
    if utc.microsecond:
        text += f".{utc.microsecond // 1000:03d}"
    return f"{text} UTC"


def _relative(at: datetime, now: datetime) -> str:
    return "now" if at <= now else delta_words(at - now)


SOURCE_WORDS = {
    BASELINE_CRON: "the cron schedule",
    BASELINE_INTERVAL: "the baseline interval",
    AI_INTERVAL: "an interval hint",
    AI_ONESHOT: "a one-shot hint",
    CLAMPED_MIN: "the minimum interval",
    CLAMPED_MAX: "the maximum interval",
    PAUSED: "a pause",
    RETRY: "a retry within the slot",
    WINDOW: "a time window (blackout, allowed hours or active period)",
    CALENDAR: "the calendar (an excluded date or a public holiday)",
    ONCE: "the one-off time (run_once_at)",
    ENDED: "nothing: no more runs (the active period ended, or the one-off has run)",
    MANUAL: "a manual run request",
    FOLLOW_UP: "a follow-up of another endpoint's run (run policy follow_ups)",
}


def explain_plan(
    now: datetime, schedule: EndpointSchedule, *, last_run_at: datetime | None = None
) -> str:
    """One paragraph a person can read: when the next run is and why, start to start
    from the last run's start (``last_run_at``) as the scheduler has it
    (``decide_after_edit``), not as if a run started now."""
    decision = decide_after_edit(now, last_run_at, schedule)
    plan = decision.plan
    base = describe_schedule(
        baseline_cron=schedule.baseline_cron,
        timezone=schedule.timezone,
        baseline_interval_ms=schedule.baseline_interval_ms,
    )
    if plan.next_run_at is None:
        head = f"No next run: {decision.steps[-1]}."
    else:
        head = (
            f"Next run {_relative(plan.next_run_at, now)} at "
            f"{_stamp(plan.next_run_at)}, set by {SOURCE_WORDS[plan.source]}."
        )
    detail = f" Baseline: {base}"
    if schedule.baseline_interval_ms and schedule.failure_count and not schedule.baseline_cron:
        factor = 2 ** min(schedule.failure_count, MAX_BACKOFF_EXPONENT)
        backed = backed_off_ms(schedule)
        if backed < schedule.baseline_interval_ms * factor:
            detail += (
                f", backed off to {duration_words(backed)} (the cap) after "
                f"{count_words(schedule.failure_count, 'failure')}"
            )
        else:
            detail += (
                f", backed off x{factor} after {count_words(schedule.failure_count, 'failure')}"
            )
    # Without a next run the head already gave the last step.
    reasons = "; ".join(decision.steps[1 : None if plan.next_run_at else -1])
    return f"{head}{detail}." + (f" Then: {reasons}." if reasons else "")


def preview_runs(
    now: datetime,
    schedule: EndpointSchedule,
    count: int,
    *,
    last_run_at: datetime | None = None,
) -> list[Upcoming]:
    """The next ``count`` run times as planned now: the first where the engine has it,
    start-to-start from the last run's start (``last_run_at``; a backoff in force
    included; a pending retry, ``retry_at``, when it comes first), or now if that has
    passed, as a save plans it (``plan_after_edit``); then each run assumed to start on
    time and succeed (no backoff, no retry); hints and a pause as they
    are. Cron slots follow the endpoint's zone across DST (``next_cron_after``); a
    one-shot hint is used once. Fewer when the runs end (the active period, a one-off):
    ``decide`` at the last one says why."""
    plans: list[Upcoming] = []
    at, current = now, schedule
    for index in range(max(count, 0)):
        if index == 0:
            planned = plan_after_edit(now, last_run_at, current)
            current = replace(current, failure_count=0, retry_at=None)
        else:
            planned = plan_next_run(at, current)
        if planned.next_run_at is None:
            break
        plan = Upcoming(planned.next_run_at, planned.source)
        plans.append(plan)
        if plan.source == AI_ONESHOT:
            current = replace(current, ai_hint_next_run_at=None)
        # The next one is planned from this run's start, as the engine does.
        at = plan.next_run_at if plan.next_run_at > at else at + timedelta(milliseconds=1)
    return plans
