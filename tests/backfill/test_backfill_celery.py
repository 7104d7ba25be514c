"""Backfill end to end on the Celery fleet (beat, tick and execute workers, Redis,
PostgreSQL) against a real HTTP target on 127.0.0.1, calls counted at the target: a four
hour range of a five-minute cron, 10 of its 48 slots already run successfully: exactly
38 calls, each with its slot's time; the same range again: none; two backfills of the
range at once: 38 calls in all, no slot twice."""

from __future__ import annotations

import pytest

from endpoints.backfill import backfill_progress, start_backfill
from endpoints.models import Run, RunTrigger
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
from tests.engine_processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def expected_slots(start, done) -> set[str]:
    return {stamp(at) for at in slot_times(start)} - {stamp(at) for at in done}


def test_a_backfill_on_celery_calls_the_38_slots_without_a_success_once_then_none(
    fleet, make_endpoint, target
):
    endpoint = make_endpoint(url=target.url("/nightly"), baseline_cron=CRON)
    start, end = the_range()
    done = ran_successfully(endpoint, start)

    first = start_backfill(endpoint=endpoint, start=start, end=end, rate=20)
    assert wait_until(lambda: ended(first), timeout=60), fleet.tail()

    called = slots_called(target.hits("/nightly"))
    assert sum(called.values()) == SLOTS - RAN == 38
    assert set(called) == expected_slots(start, done)
    assert set(called.values()) == {1}
    assert backfill_progress(first)["succeeded"] == 38

    again = start_backfill(endpoint=endpoint, start=start, end=end, rate=20)
    assert again.total == 0
    assert wait_until(lambda: ended(again), timeout=10)
    assert len(target.hits("/nightly")) == 38


def test_two_backfills_of_the_same_range_at_once_call_each_slot_once(fleet, make_endpoint, target):
    endpoint = make_endpoint(url=target.url("/twice"), baseline_cron=CRON)
    start, end = the_range()
    done = ran_successfully(endpoint, start)

    both = [start_backfill(endpoint=endpoint, start=start, end=end, rate=20) for _ in range(2)]
    assert [b.total for b in both] == [38, 38]
    assert wait_until(lambda: ended(*both), timeout=60), fleet.tail()

    called = slots_called(target.hits("/twice"))
    assert sum(called.values()) == 38
    assert set(called) == expected_slots(start, done) and set(called.values()) == {1}
    assert Run.objects.filter(endpoint=endpoint, trigger=RunTrigger.BACKFILL).count() == 38
    progress = [backfill_progress(b) for b in both]
    assert sum(p["succeeded"] for p in progress) == 38
    assert sum(p["skipped"] for p in progress) == 38
