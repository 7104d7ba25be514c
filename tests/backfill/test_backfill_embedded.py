"""Backfill through ``runscheduler``'s loops (the embedded scheduler, ticked here), against
a real HTTP target on 127.0.0.1, calls counted at the target: the 38 slots of the range
without a successful run are called once each with their slot's time, a second backfill
calls none, and the live schedule is left as it was."""

from __future__ import annotations

import time

import pytest

from endpoints.backfill import backfill_progress, cancel_backfill, start_backfill
from endpoints.models import Endpoint, Run, RunTrigger, Slot
from tests.backfill.slots import (
    CRON,
    RAN,
    SLOTS,
    ended,
    ran_successfully,
    slot_times,
    slots_called,
    stamp,
    the_range,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]


def run_until(scheduler, condition, *, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        scheduler.backfill_once()
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def test_a_backfill_calls_each_slot_without_a_successful_run_once_with_its_time(
    scheduler, make_endpoint, target
):
    endpoint = make_endpoint(url=target.url("/report"), baseline_cron=CRON)
    start, end = the_range()
    done = ran_successfully(endpoint, start)
    live = Slot.objects.get(pk=endpoint.pk).next_run_at

    first = start_backfill(endpoint=endpoint, start=start, end=end, rate=50)
    assert first.total == SLOTS - RAN
    assert run_until(scheduler, lambda: ended(first), timeout=30), backfill_progress(first)

    called = slots_called(target.hits("/report"))
    expected = {stamp(at) for at in slot_times(start)} - {stamp(at) for at in done}
    assert sum(called.values()) == SLOTS - RAN == 38
    assert set(called) == expected and set(called.values()) == {1}
    assert {h.headers["X-Cronicorn-Trigger"] for h in target.hits("/report")} == {"backfill"}
    progress = backfill_progress(first)
    assert (progress["succeeded"], progress["failed"], progress["pending"]) == (38, 0, 0)
    # The live schedule is the scheduler's: its next run and failure count are untouched.
    assert Slot.objects.get(pk=endpoint.pk).next_run_at == live
    assert Endpoint.objects.get(pk=endpoint.pk).failure_count == 0

    again = start_backfill(endpoint=endpoint, start=start, end=end, rate=50)
    assert again.total == 0
    run_until(scheduler, lambda: ended(again), timeout=5)
    assert len(target.hits("/report")) == 38
    assert Run.objects.filter(endpoint=endpoint, trigger=RunTrigger.BACKFILL).count() == 38


def test_a_cancelled_backfill_starts_no_more_runs_and_keeps_what_it_ran(
    scheduler, make_endpoint, target
):
    endpoint = make_endpoint(url=target.url("/slow-report"), baseline_cron=CRON)
    start, end = the_range()
    backfill = start_backfill(endpoint=endpoint, start=start, end=end, rate=2)
    assert run_until(scheduler, lambda: len(target.hits("/slow-report")) >= 2, timeout=20)

    cancel_backfill(backfill)
    called = len(target.hits("/slow-report"))
    for _ in range(10):
        scheduler.backfill_once()
        time.sleep(0.2)
    # At most the runs already handed to the event loop (their starts paced ahead).
    assert len(target.hits("/slow-report")) <= called + 3
    progress = backfill_progress(backfill)
    assert progress["status"] == "cancelled" and progress["pending"] > 30
