"""Phases kept under load (issue 23): a scheduled interval run that started late plans
its next run on its slot's phase (the first ``slot + k * interval`` at least half an
interval after its start), so a cohort delayed together (a busy second, a cold start, an
outage) does not stay bunched; on time, and for everything but the baseline interval,
start to start as before.

The clock is simulated (time-machine), the HTTP calls are real.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from endpoints.engine.claiming import claim_due_endpoints
from endpoints.engine.running import execute_claim, record_outcomes, start_claims
from endpoints.models import Run, RunTrigger, Slot, Source
from endpoints.operations import apply_hint, run_now

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("loopback_allowed")]

S = timedelta(seconds=1)
MS = timedelta(milliseconds=1)
START = datetime(2026, 11, 22, 12, 0, 0, 370_000, tzinfo=UTC)


def run_late(clock, late: timedelta) -> list[Run]:
    """Claim what is due at START and start it all ``late`` after its slots, together."""
    claims = claim_due_endpoints(now=START, limit=100, horizon_ms=0)
    clock.move_to(max(c.scheduled_for for c in claims) + late)
    return [execute_claim(claim) for claim in claims]


def test_a_run_a_little_late_plans_from_its_slot(make_endpoint, target, time_machine):
    time_machine.move_to(START, tick=False)
    endpoint = make_endpoint(url=target.url("/"), baseline_interval_ms=10_000, next_run_at=START)

    [run] = run_late(time_machine, 300 * MS)

    endpoint.refresh_from_db()
    assert run.started_at == START + 300 * MS
    assert endpoint.last_run_at == run.started_at  # the record stays the real start
    assert (endpoint.next_run_at, endpoint.next_run_source) == (
        START + 10 * S,
        Source.BASELINE_INTERVAL,
    )


def test_a_run_later_than_half_its_interval_skips_to_its_next_phase(
    make_endpoint, target, time_machine
):
    time_machine.move_to(START, tick=False)
    a_bit = make_endpoint(url=target.url("/"), baseline_interval_ms=10_000, next_run_at=START)
    [run] = run_late(time_machine, 2 * S)
    a_bit.refresh_from_db()
    assert run.started_at == START + 2 * S
    assert a_bit.next_run_at == START + 10 * S  # 8 s after the start: still its phase

    time_machine.move_to(START, tick=False)
    very = make_endpoint(url=target.url("/"), baseline_interval_ms=10_000, next_run_at=START)
    [run] = run_late(time_machine, 7 * S)
    very.refresh_from_db()
    # START + 10 s would be 3 s after the start, under half the interval: the slot after.
    assert very.next_run_at == START + 20 * S
    assert very.next_run_source == Source.BASELINE_INTERVAL


def test_an_outage_drains_back_to_every_endpoints_own_phase(make_endpoint, target, time_machine):
    """After ten minutes down, 24 endpoints spread over their 24 s interval all start in
    the same second: their next runs are spread as before, one a second."""
    time_machine.move_to(START, tick=False)
    phases = [k * S for k in range(24)]
    endpoints = [
        make_endpoint(url=target.url("/"), baseline_interval_ms=24_000, next_run_at=START - p)
        for p in phases
    ]
    back = START + 10 * 60 * S
    time_machine.move_to(back, tick=False)
    claims = claim_due_endpoints(now=back, limit=100, horizon_ms=0)
    started = [s for s in start_claims(claims) if s is not None]
    assert len(started) == len(endpoints)
    record_outcomes([s.outcome(s.call_and_wait()) for s in started])

    nexts = sorted(e.__class__.objects.get(pk=e.pk).next_run_at for e in endpoints)
    assert all(n >= back + 12 * S for n in nexts)
    assert [(n - nexts[0]) for n in nexts] == phases  # one a second, as before the outage
    for endpoint, phase in zip(endpoints, phases, strict=True):
        slot = endpoint.__class__.objects.get(pk=endpoint.pk).next_run_at
        assert (slot - (START - phase)) % (24 * S) == timedelta(0)


def test_a_cohort_started_late_together_goes_back_to_its_own_phases(
    make_endpoint, target, time_machine
):
    time_machine.move_to(START, tick=False)
    phases = [k * 37 * MS for k in range(12)]  # spread over 0.4 s
    endpoints = [
        make_endpoint(url=target.url("/"), baseline_interval_ms=24_000, next_run_at=START - p)
        for p in phases
    ]
    # A busy second: every one of them starts at the same instant, 0.5 s after START.
    claims = claim_due_endpoints(now=START, limit=100, horizon_ms=0)
    time_machine.move_to(START + 500 * MS)
    started = [s for s in start_claims(claims) if s is not None]
    assert len(started) == len(endpoints)
    record_outcomes([s.outcome(s.call_and_wait()) for s in started])

    nexts = {e.pk: e.next_run_at for e in (e.__class__.objects.get(pk=e.pk) for e in endpoints)}
    for endpoint, phase in zip(endpoints, phases, strict=True):
        assert nexts[endpoint.pk] == START - phase + 24 * S
    assert len(set(nexts.values())) == len(endpoints)  # not one bunch


def test_the_minimum_interval_is_never_undercut(make_endpoint, target, time_machine):
    time_machine.move_to(START, tick=False)
    endpoint = make_endpoint(
        url=target.url("/"),
        baseline_interval_ms=10_000,
        min_interval_ms=10_000,
        next_run_at=START,
    )

    [run] = run_late(time_machine, 300 * MS)

    endpoint.refresh_from_db()
    assert endpoint.next_run_at == run.started_at + 10 * S


def test_hints_and_manual_runs_plan_from_their_start(make_endpoint, target, time_machine):
    time_machine.move_to(START - 10 * S, tick=False)
    hinted = make_endpoint(url=target.url("/"), baseline_interval_ms=60_000)
    apply_hint(
        hinted, now=START - 10 * S, interval_ms=10_000, ttl=timedelta(hours=1), reason="busy"
    )
    Slot.objects.filter(pk=hinted.pk).update(next_run_at=START)
    time_machine.move_to(START, tick=False)

    [run] = run_late(time_machine, 300 * MS)

    hinted.refresh_from_db()
    assert hinted.next_run_source == Source.AI_INTERVAL
    assert hinted.next_run_at == run.started_at + 10 * S

    manual = make_endpoint(url=target.url("/"), baseline_interval_ms=10_000)
    time_machine.move_to(START + 20 * S, tick=False)
    run_now(manual, now=START + 20 * S)
    claims = claim_due_endpoints(now=START + 20 * S, limit=10, horizon_ms=0)
    [claim] = [c for c in claims if c.endpoint_id == manual.pk]
    time_machine.move_to(claim.scheduled_for + 300 * MS)
    run = execute_claim(claim)
    manual.refresh_from_db()
    assert run.trigger == RunTrigger.MANUAL
    assert manual.next_run_at == run.started_at + 10 * S


def run_after_outage(clock, back: datetime) -> Run:
    """The scheduler comes back at ``back``: claims the overdue slot and runs it."""
    clock.move_to(back, tick=False)
    [claim] = claim_due_endpoints(now=back, limit=10, horizon_ms=0)
    return execute_claim(claim)


def test_a_late_runs_phase_slot_still_keeps_out_of_a_blackout(make_endpoint, target, time_machine):
    """Back 4 min late, a 10 min endpoint's next slot of its phase (12:10) falls in its
    12:10-12:12 blackout, though its start plus the interval (12:14) does not: the run
    never goes into the blackout, it moves to the blackout's end."""
    time_machine.move_to(START, tick=False)
    endpoint = make_endpoint(
        url=target.url("/"),
        baseline_interval_ms=600_000,
        run_policy={"blackout": [{"start": "12:10", "end": "12:12"}]},
        next_run_at=START,
    )

    run = run_after_outage(time_machine, START + 4 * 60 * S)

    endpoint.refresh_from_db()
    assert run.started_at == START + 4 * 60 * S
    assert (endpoint.next_run_at, endpoint.next_run_source) == (
        datetime(2026, 11, 22, 12, 12, tzinfo=UTC),
        Source.WINDOW,
    )


def test_a_late_runs_phase_slot_never_stretches_past_the_maximum_interval(
    make_endpoint, target, time_machine
):
    """A 60 s endpoint whose runs may be at most 80 s apart, back 35 s late: its phase's
    next slot (its slot + 120 s, as its slot + 60 s is under half an interval away) would
    be 85 s after its start; the maximum wins."""
    time_machine.move_to(START, tick=False)
    endpoint = make_endpoint(
        url=target.url("/"),
        baseline_interval_ms=60_000,
        max_interval_ms=80_000,
        next_run_at=START,
    )

    run = run_after_outage(time_machine, START + 35 * S)

    endpoint.refresh_from_db()
    assert (endpoint.next_run_at, endpoint.next_run_source) == (
        run.started_at + 80 * S,
        Source.CLAMPED_MAX,
    )


def test_a_late_runs_phase_slot_is_no_run_after_the_active_period(
    make_endpoint, target, time_machine
):
    """The active period ends at 12:18: planned from its late start (12:07) the next run
    (12:17) is inside it, but its phase's next slot (12:20) is not: no next run."""
    time_machine.move_to(START, tick=False)
    endpoint = make_endpoint(
        url=target.url("/"),
        baseline_interval_ms=600_000,
        run_policy={"active_until": "2026-11-22T12:18:00Z"},
        next_run_at=START,
    )

    run_after_outage(time_machine, START + 7 * 60 * S)

    endpoint.refresh_from_db()
    assert (endpoint.next_run_at, endpoint.next_run_source) == (None, Source.ENDED)
