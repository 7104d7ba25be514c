"""One test per trap the original system hit (DESIGN.md "Traps", 1-12), named after it.

Where a trap needs minutes of schedule, the clock is simulated (time-machine): ticks at a
fixed cadence, each claim executed at its own slot, the HTTP call real.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.db import connections
from django.utils import timezone

from endpoints.embedded import EmbeddedScheduler
from endpoints.engine.claiming import Claim, claim_due_endpoints
from endpoints.engine.running import execute_claim
from endpoints.models import Endpoint, Run, RunStatus, Slot, Source
from endpoints.operations import apply_hint, run_now
from tests.engine_processes import wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("loopback_allowed")]

S = timedelta(seconds=1)
START = datetime(2026, 11, 22, 12, 0, 0, 370_000, tzinfo=UTC)  # ticks off the whole second


def simulate(clock, *, start: datetime, seconds: float, tick: float, horizon_ms: int) -> None:
    """Tick every ``tick`` s from ``start``; each claim runs at its slot (or at once if
    overdue), with the clock frozen, so a run takes no simulated time."""
    pending: list[tuple[datetime, Claim]] = []
    at = start
    while at < start + timedelta(seconds=seconds):
        for run_at, claim in sorted(p for p in pending if p[0] <= at):
            clock.move_to(run_at)
            execute_claim(claim)
        pending = [p for p in pending if p[0] > at]
        clock.move_to(at)
        for claim in claim_due_endpoints(now=at, limit=100, horizon_ms=horizon_ms):
            pending.append((max(claim.scheduled_for, at), claim))
        at += timedelta(seconds=tick)


def starts(endpoint: Endpoint) -> list[datetime]:
    return list(
        Run.objects.filter(endpoint=endpoint)
        .order_by("started_at")
        .values_list("started_at", flat=True)
    )


def gaps(times: list[datetime]) -> list[float]:
    return [(b - a).total_seconds() for a, b in itertools.pairwise(times)]


def test_trap_01_a_claim_horizon_larger_than_the_tick_does_not_make_short_intervals_run_every_tick(
    make_endpoint, target, time_machine
):
    time_machine.move_to(START, tick=False)
    endpoint = make_endpoint(url=target.url("/"), baseline_interval_ms=10_000, next_run_at=START)

    simulate(time_machine, start=START, seconds=60, tick=5, horizon_ms=60_000)

    runs = starts(endpoint)
    assert len(runs) == 6  # 12:00:00, :10, ... :50 — not one per 5 s tick
    assert gaps(runs) == [10.0] * 5


def test_trap_02_the_next_run_counts_from_this_runs_start_not_a_stale_last_run_at(
    make_endpoint, target, time_machine
):
    time_machine.move_to(START, tick=False)
    endpoint = make_endpoint(
        url=target.url("/"),
        baseline_interval_ms=60_000,
        last_run_at=START - 55 * S,  # the seed's example: stale by 55 s
        next_run_at=START,
    )
    [claim] = claim_due_endpoints(now=START, limit=10, horizon_ms=0)
    execute_claim(claim)
    endpoint.refresh_from_db()
    assert endpoint.last_run_at == START
    assert endpoint.next_run_at == START + 60 * S  # not 12:00:05


def test_trap_03_a_slow_execution_does_not_leave_next_run_at_in_the_past(
    make_endpoint, target, time_machine
):
    time_machine.move_to(START, tick=False)
    # The seed's example: a 15 s interval whose run takes 20 s.
    target.reply("/slow", action=lambda: time_machine.shift(20))
    endpoint = make_endpoint(
        url=target.url("/slow"), baseline_interval_ms=15_000, next_run_at=START
    )
    [claim] = claim_due_endpoints(now=START, limit=10, horizon_ms=0)

    run = execute_claim(claim)

    run.refresh_from_db()
    endpoint.refresh_from_db()
    assert run.finished_at == START + 20 * S
    assert endpoint.next_run_at == run.finished_at + 15 * S
    assert claim_due_endpoints(now=run.finished_at + S, limit=10, horizon_ms=1000) == []


def test_trap_04_the_lease_ends_with_the_run_so_run_now_and_a_tighter_hint_act_at_once(
    make_endpoint, target, time_machine
):
    time_machine.move_to(START, tick=False)
    endpoint = make_endpoint(url=target.url("/"), baseline_interval_ms=3_600_000, next_run_at=START)
    [claim] = claim_due_endpoints(now=START, limit=10, horizon_ms=0)
    execute_claim(claim)
    endpoint.refresh_from_db()
    assert (endpoint.claim_token, endpoint.locked_until) == (None, None)
    assert endpoint.next_run_at == START + timedelta(hours=1)

    later = START + 5 * S
    time_machine.move_to(later)
    apply_hint(endpoint, now=later, interval_ms=30_000, ttl=timedelta(hours=1), reason="busy")
    # Start to start from the run at START, as every plan outside a run.
    assert endpoint.next_run_at == START + 30 * S
    run_now(endpoint, now=later)
    [manual] = claim_due_endpoints(now=later, limit=10, horizon_ms=0)
    assert (manual.endpoint_id, manual.trigger, manual.scheduled_for) == (
        endpoint.pk,
        "manual",
        later,
    )


def test_trap_05_an_early_claim_never_fires_a_cron_slot_twice_and_intervals_are_not_rounded_to_the_tick(  # noqa: E501
    make_endpoint, target, time_machine
):
    slot = datetime(2026, 11, 22, 12, 1, tzinfo=UTC)
    cron = make_endpoint(url=target.url("/cron"), baseline_cron="* * * * *", next_run_at=slot)
    # Claimed 0.8 s early; the clock really runs, so the run must wait for its slot.
    time_machine.move_to(slot - 0.8 * S, tick=True)
    [claim] = claim_due_endpoints(now=timezone.now(), limit=10, horizon_ms=1000)
    run = execute_claim(claim)
    assert run.started_at >= slot
    cron.refresh_from_db()
    assert cron.next_run_at == slot + 60 * S  # the next minute, not the same one again

    # A 60 s interval under 5 s ticks (the largest horizon the settings allow) stays 60 s.
    time_machine.move_to(START, tick=False)
    every_minute = make_endpoint(url=target.url("/"), baseline_interval_ms=60_000)
    Slot.objects.filter(pk=every_minute.pk).update(next_run_at=START + 2.2 * S)
    simulate(time_machine, start=START, seconds=300, tick=5, horizon_ms=5_000)
    runs = starts(every_minute)
    assert len(runs) == 5
    assert gaps(runs) == [60.0] * 4


def test_trap_06_backoff_uses_the_failure_count_after_the_run(make_endpoint, target, time_machine):
    time_machine.move_to(START, tick=False)
    down = target.reply("/flaky", status=500)
    endpoint = make_endpoint(
        url=target.url("/flaky"), baseline_interval_ms=10_000, next_run_at=START
    )

    planned = []
    for outcome in (500, 500, 500, 200):
        down.status = outcome
        endpoint.refresh_from_db()
        time_machine.move_to(endpoint.next_run_at)
        [claim] = claim_due_endpoints(now=endpoint.next_run_at, limit=10, horizon_ms=0)
        run = execute_claim(claim)
        endpoint.refresh_from_db()
        planned.append(
            ((endpoint.next_run_at - run.started_at).total_seconds(), endpoint.failure_count)
        )

    # The first failure backs off at once (x2), the first success ends it at once.
    assert planned == [(20.0, 1), (40.0, 2), (80.0, 3), (10.0, 0)]


def test_trap_07_two_schedulers_claiming_at_once_never_run_the_same_endpoint(
    transactional_db, make_endpoint, target
):
    now = timezone.now()
    endpoints = [make_endpoint(url=target.url(f"/e{k}"), next_run_at=now) for k in range(40)]
    start = threading.Barrier(2)

    def scheduler() -> None:
        try:
            start.wait(timeout=10)
            for _ in range(5):
                for claim in claim_due_endpoints(now=now, limit=7, horizon_ms=0):
                    execute_claim(claim)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=scheduler) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    for endpoint in endpoints:
        assert Run.objects.filter(endpoint=endpoint).count() == 1
        assert len(target.hits(f"/e{endpoint.name.rsplit('-', 1)[1]}")) <= 1
    assert len(target.hits()) == 40


def test_trap_08_runs_of_one_tick_execute_concurrently_and_each_lease_covers_its_own_run(
    transactional_db, make_endpoint, target
):
    target.reply("/slow", delay=0.6)
    now = timezone.now()
    endpoints = [
        make_endpoint(url=target.url("/slow"), timeout_ms=2_000, next_run_at=now) for _ in range(20)
    ]
    scheduler = EmbeddedScheduler(max_in_flight=20)
    try:
        assert scheduler.tick_once(now=now)
        # While the batch runs, no endpoint can be claimed a second time.
        assert target.wait_for(lambda: len(target.hits()) == 20, timeout=5)
        assert claim_due_endpoints(now=timezone.now(), limit=100, horizon_ms=0) == []
        assert wait_until(
            lambda: Run.objects.filter(status=RunStatus.SUCCESS).count() == 20, timeout=10
        )
    finally:
        scheduler.shutdown(timeout=10)

    arrivals = [hit.at for hit in target.hits()]
    assert max(arrivals) - min(arrivals) < 0.5  # together, not one after another
    for endpoint in endpoints:
        run = Run.objects.get(endpoint=endpoint)
        # Each run holds its own lease, renewed while it lasts (never one lease per batch).
        assert run.lease_expires_at >= run.scheduled_for + S * settings.CRONICORN_LEASE_SECONDS


def test_trap_09_one_bad_endpoint_does_not_abort_the_rest_of_the_batch(
    transactional_db, make_endpoint, target
):
    target.reply("/nul", raw=b"bad\x00byte")
    now = timezone.now()
    good = [make_endpoint(url=target.url(f"/good{k}"), next_run_at=now) for k in range(3)]
    corrupt = make_endpoint(url=target.url("/corrupt"), baseline_cron="* * * * *", next_run_at=now)
    Endpoint.objects.filter(pk=corrupt.pk).update(baseline_cron="garbage")
    nul = make_endpoint(url=target.url("/nul"), next_run_at=now)
    unreachable = make_endpoint(url="http://127.0.0.1:9/", next_run_at=now)
    scheduler = EmbeddedScheduler(max_in_flight=4)
    try:
        scheduler.tick_once(now=now)
        # An extra, bogus claim in the same batch (a deleted endpoint) is simply stale.
        scheduler.dispatcher.submit(Claim(999_999, uuid.uuid4(), now, "", "scheduled"))
        assert wait_until(
            lambda: (
                not Run.objects.filter(status=RunStatus.RUNNING).exists()
                and Run.objects.count() == 6
            ),
            timeout=15,
        )
    finally:
        scheduler.shutdown(timeout=10)

    for endpoint in good:
        assert Run.objects.get(endpoint=endpoint).status == RunStatus.SUCCESS
    assert "Scheduler error" in Run.objects.get(endpoint=corrupt).error
    assert Run.objects.get(endpoint=unreachable).status == RunStatus.FAILURE
    assert Run.objects.get(endpoint=nul).status_code == 200
    assert not Slot.objects.filter(claim_token__isnull=False).exists()  # every lease freed


def test_trap_10_the_timeout_covers_the_body_and_the_body_read_is_capped(make_endpoint, target):
    target.reply("/drip", raw=b"x" * 100, drip=0.2)
    target.reply("/huge", raw=b"y" * 5_000_000)
    dripping = make_endpoint(url=target.url("/drip"), timeout_ms=1_000, next_run_at=timezone.now())
    huge = make_endpoint(
        url=target.url("/huge"), max_response_size_kb=1, next_run_at=timezone.now()
    )
    claims = claim_due_endpoints(now=timezone.now(), limit=10, horizon_ms=0)
    for claim in claims:
        execute_claim(claim)

    slow = Run.objects.get(endpoint=dripping)
    assert slow.status == RunStatus.TIMEOUT
    assert slow.duration_ms < 1_600  # cut at the deadline, not after 20 s of dripping
    big = Run.objects.get(endpoint=huge)
    assert big.response_truncated is True
    assert big.response_size_bytes <= 1024
    assert len(big.response_body) <= 1024


def test_trap_11_a_redirect_to_a_blocked_address_is_refused(make_endpoint, target, settings):
    settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = False
    settings.CRONICORN_SSRF_ALLOWLIST = ["127.0.0.1"]  # the public face, for this test
    target.reply(
        "/hop", status=302, headers={"Location": "http://169.254.169.254/latest/meta-data/"}
    )
    endpoint = make_endpoint(url=target.url("/hop"), next_run_at=timezone.now())
    [claim] = claim_due_endpoints(now=timezone.now(), limit=10, horizon_ms=0)

    run = execute_claim(claim)

    run.refresh_from_db()
    assert run.status == RunStatus.FAILURE
    assert "169.254.169.254" in run.error
    assert len(target.hits("/hop")) == 1
    endpoint.refresh_from_db()
    assert endpoint.failure_count == 1


def test_trap_12_a_consumed_one_shot_is_cleared_so_it_does_not_run_every_tick(
    make_endpoint, target, time_machine
):
    time_machine.move_to(START, tick=False)
    endpoint = make_endpoint(url=target.url("/"), baseline_interval_ms=600_000)
    oneshot = START + 3 * S
    apply_hint(endpoint, now=START, next_run_at=oneshot, ttl=timedelta(hours=1), reason="at :03")
    endpoint.refresh_from_db()
    assert (endpoint.next_run_at, endpoint.next_run_source) == (oneshot, Source.AI_ONESHOT)

    simulate(time_machine, start=START, seconds=60, tick=1, horizon_ms=1_000)

    assert starts(endpoint) == [oneshot]  # once, then back to the 10 min baseline
    endpoint.refresh_from_db()
    assert endpoint.ai_hint_next_run_at is None
    assert (endpoint.next_run_at, endpoint.next_run_source) == (
        oneshot + timedelta(minutes=10),
        Source.BASELINE_INTERVAL,
    )
