"""DESIGN "Life of a run", step 6: a claim delivered again is a no-op; only a new claim,
taken after the lease expired, retries a slot. Leases are short and renewed by whoever
holds the claim, and a claim that cannot start is given back at once.

The fault suite (tests/faults/) shows the same promises with real brokers and processes;
these are the fast cases, against the database alone."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections
from django.utils import timezone

from endpoints.engine import dispatch, outcomes, running, sql
from endpoints.engine.claiming import SPREAD_OVER, Claim, claim_due_endpoints, tick
from endpoints.engine.dispatch import ClaimDispatcher
from endpoints.engine.leases import renew_leases
from endpoints.engine.running import execute_claim, start_claims
from endpoints.models import Endpoint, Run, RunStatus, RunTrigger, Slot, Source
from endpoints.operations import run_now
from tests.engine_processes import wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("loopback_allowed")]

S = timedelta(seconds=1)


def due_claims(*endpoints: Endpoint) -> list[Claim]:
    now = timezone.now()
    Slot.objects.filter(pk__in=[e.pk for e in endpoints]).update(
        next_run_at=now, next_run_source=Source.BASELINE_INTERVAL
    )
    claims = claim_due_endpoints(now=now, limit=100, horizon_ms=0)
    assert len(claims) == len(endpoints)
    return claims


def test_a_claim_delivered_again_while_its_run_is_in_flight_starts_nothing(make_endpoint):
    endpoint = make_endpoint()
    [claim] = due_claims(endpoint)
    [first] = start_claims([claim])
    assert first is not None

    assert start_claims([claim]) == [None]  # the broker delivered the message again

    run = Run.objects.get(endpoint=endpoint)
    assert (run.pk, run.status, run.attempt) == (first.run.pk, RunStatus.RUNNING, 1)
    assert Slot.objects.get(pk=endpoint.pk).claim_token == claim.claim_token  # still held


def test_claims_of_a_chunk_delivered_again_start_nothing(make_endpoint):
    """The chunk path inserts the runs of several slots in one statement."""
    endpoints = [make_endpoint() for _ in range(3)]
    claims = due_claims(*endpoints)
    assert all(start_claims(claims))
    assert start_claims(claims) == [None, None, None]
    assert Run.objects.count() == 3
    assert set(Run.objects.values_list("status", flat=True)) == {RunStatus.RUNNING}


def test_a_run_now_claim_delivered_twice_runs_once(make_endpoint, target):
    endpoint = make_endpoint(url=target.url("/now"))
    run_now(endpoint, now=timezone.now())
    [claim] = claim_due_endpoints(now=timezone.now(), limit=10, horizon_ms=0)
    assert claim.trigger == RunTrigger.MANUAL
    [started] = start_claims([claim])
    assert started is not None
    assert start_claims([claim]) == [None]
    assert Run.objects.filter(endpoint=endpoint).count() == 1


def test_two_deliveries_racing_on_two_connections_start_one_run(transactional_db, make_endpoint):
    """A duplicate publish: two workers start the same claim at the same instant."""
    endpoints = [make_endpoint() for _ in range(10)]
    claims = due_claims(*endpoints)
    barrier = threading.Barrier(2)
    results: list[list[Any]] = []

    def deliver() -> None:
        try:
            barrier.wait(timeout=5)
            results.append(start_claims(claims))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert len(results) == 2
    started = [s for result in results for s in result if s is not None]
    assert sorted(s.claim.endpoint_id for s in started) == sorted(e.pk for e in endpoints)
    assert Run.objects.count() == 10
    assert not Run.objects.filter(status=RunStatus.LOST).exists()


def test_a_retry_needs_a_new_claim_and_says_why_the_first_run_was_lost(make_endpoint, target):
    endpoint = make_endpoint(url=target.url("/"))
    [first] = due_claims(endpoint)
    [started] = start_claims([first])  # then its worker dies: nobody renews the lease
    assert started is not None
    lease_end = Slot.objects.get(pk=endpoint.pk).locked_until

    assert execute_claim(first) is None  # redelivered before the lease ran out: nothing
    [second] = claim_due_endpoints(now=lease_end, limit=10, horizon_ms=0)
    assert second.claim_token != first.claim_token
    retry = execute_claim(second)

    lost = Run.objects.get(pk=started.run.pk)
    assert lost.status == RunStatus.LOST
    assert "lease expired" in lost.error and "without being renewed" in lost.error
    assert str(second.claim_token) in lost.error
    assert retry is not None
    assert (retry.trigger, retry.attempt, retry.retry_of_id) == (RunTrigger.RETRY, 2, lost.pk)
    assert len(target.hits()) == 1  # only the retry called out; the first never got to
    assert execute_claim(first) is None and execute_claim(second) is None


def test_a_stalled_worker_whose_lease_expired_cannot_finish_its_run_after_the_release(
    make_endpoint, target
):
    """The worker called the endpoint, then stalled past its lease before writing. The
    release marks its run lost, so its late outcome changes nothing and the next claim
    retries a lost run; before, the late finish won and a completed slot ran again."""
    endpoint = make_endpoint(url=target.url("/"))
    [first] = due_claims(endpoint)
    called = running.call_claim(first)  # the request is done; the worker stops here
    assert isinstance(called, outcomes.Outcome)
    lease_end = Slot.objects.get(pk=endpoint.pk).locked_until

    [second] = claim_due_endpoints(now=lease_end, limit=10, horizon_ms=0)
    running.record_outcomes([called])  # the worker wakes up and writes what it has

    lost = Run.objects.get(pk=called.run.pk)
    assert lost.status == RunStatus.LOST and "lease expired" in lost.error
    assert Slot.objects.get(pk=endpoint.pk).claim_token == second.claim_token
    retry = execute_claim(second)
    assert retry is not None
    assert (retry.trigger, retry.attempt, retry.retry_of_id) == (RunTrigger.RETRY, 2, lost.pk)


@pytest.mark.parametrize("edited_mid_run", [False, True], ids=["alone", "re-planned"])
def test_a_tick_before_a_late_runs_reschedule_does_not_run_the_slot_again(
    transactional_db, make_endpoint, target, monkeypatch, edited_mid_run
):
    """The worker called the endpoint and writes its outcome just as its lease runs out; a
    tick on another connection comes before the slot's reschedule (the worker stalled
    there): for a run written alone, between its finish and its reschedule; for a run
    whose endpoint was edited mid-run, before the reschedule planned again after the edit.
    The finish and every reschedule are one transaction, so the tick sees a run still
    being written, releases nothing, and the slot runs once. Written apart, the tick found
    a finished run, released the slot and ran it again."""
    if connection.vendor != "postgresql":
        pytest.skip("a tick on another connection meanwhile: SQLite has one writer at a time")
    endpoint = make_endpoint(url=target.url("/"))
    others = [make_endpoint(url=target.url("/other"))] if edited_mid_run else []
    claims = due_claims(endpoint, *others)
    called = [running.call_claim(claim) for claim in claims]
    assert all(isinstance(outcome, outcomes.Outcome) for outcome in called)
    lease_end = Slot.objects.get(pk=endpoint.pk).locked_until
    if edited_mid_run:
        Endpoint.objects.filter(pk=endpoint.pk).update(baseline_interval_ms=120_000)
    calls: list[int] = []
    between: list[list[Claim]] = []
    reschedule_all = sql.reschedule_all

    def tick_before_the_last_reschedule(*args: Any, **kwargs: Any) -> Any:
        calls.append(len(args[0]))
        if len(calls) == (2 if edited_mid_run else 1):

            def tick_elsewhere() -> None:
                try:
                    between.append(claim_due_endpoints(now=lease_end, limit=10, horizon_ms=0))
                finally:
                    connections.close_all()

            thread = threading.Thread(target=tick_elsewhere)
            thread.start()
            thread.join(timeout=30)
        return reschedule_all(*args, **kwargs)

    monkeypatch.setattr(sql, "reschedule_all", tick_before_the_last_reschedule)
    running.record_outcomes(called)  # type: ignore[arg-type]

    assert calls == ([2, 1] if edited_mid_run else [1])  # the batch, then the re-plan
    assert between == [[]]
    assert Run.objects.get(endpoint=endpoint).status == RunStatus.SUCCESS
    slot = Slot.objects.get(pk=endpoint.pk)
    assert slot.claim_token is None and slot.next_run_at > claims[0].scheduled_for
    if edited_mid_run:
        assert slot.next_run_at - claims[0].scheduled_for >= timedelta(seconds=100)
    assert len(target.hits()) == 1 + len(others)


def test_a_slot_whose_run_is_being_written_is_not_released_until_that_write_ends(
    transactional_db, make_endpoint
):
    endpoint = make_endpoint()
    [first] = due_claims(endpoint)
    [started] = start_claims([first])
    assert started is not None
    lease_end = Slot.objects.get(pk=endpoint.pk).locked_until
    writer = connections.create_connection("default")
    try:
        writer.set_autocommit(False)
        with writer.cursor() as cursor:  # the run's worker, writing its outcome right now
            cursor.execute(
                "UPDATE endpoints_run SET status = %s WHERE id = %s",
                [RunStatus.SUCCESS, started.run.pk],
            )
        assert claim_due_endpoints(now=lease_end, limit=10, horizon_ms=0) == []
        assert Slot.objects.get(pk=endpoint.pk).claim_token == first.claim_token
        writer.rollback()  # that write never lands: the next tick releases and retries
    finally:
        writer.close()
    [second] = claim_due_endpoints(now=lease_end, limit=10, horizon_ms=0)
    assert second.claim_token != first.claim_token
    assert Run.objects.get(pk=started.run.pk).status == RunStatus.LOST


def test_a_retry_after_a_lost_lease_is_one_attempt_of_the_slot_and_the_policy_goes_on_after_it(
    job, make_endpoint, target
):
    """Retries within a slot (run policy) count the retry of a lost run as an attempt: the
    next attempt gets the next number, so no number is used twice in a slot and the
    policy's attempts stay its limit."""
    job.run_policy = {"retry_attempts": 3, "retry_delay_ms": 1_000, "retry_backoff": "fixed"}
    job.save(update_fields=["run_policy"])
    target.reply("/flaky", status=503)
    endpoint = make_endpoint(url=target.url("/flaky"))
    [first] = due_claims(endpoint)
    [started] = start_claims([first])  # then its worker dies
    assert started is not None
    lease_end = Slot.objects.get(pk=endpoint.pk).locked_until
    [second] = claim_due_endpoints(now=lease_end, limit=10, horizon_ms=0)
    retry = execute_claim(second)  # attempt 2, after the lost attempt 1: a 503
    assert retry is not None and (retry.attempt, retry.trigger) == (2, RunTrigger.RETRY)
    slot = Slot.objects.get(pk=endpoint.pk)
    assert slot.next_run_source == Source.RETRY

    [third] = claim_due_endpoints(now=slot.next_run_at, limit=10, horizon_ms=0)
    last = execute_claim(third)

    assert last is not None
    assert (last.attempt, last.retry_of_id) == (3, started.run.pk)
    runs = Run.objects.filter(endpoint=endpoint).order_by("attempt")
    assert [(r.attempt, r.status) for r in runs] == [
        (1, RunStatus.LOST),
        (2, RunStatus.FAILURE),
        (3, RunStatus.FAILURE),
    ]
    endpoint.refresh_from_db()
    # Three attempts: the slot is over, failed once; no fourth attempt is planned.
    assert (endpoint.retry_attempt, endpoint.failure_count) == (0, 1)
    assert endpoint.next_run_source != Source.RETRY
    assert len(target.hits("/flaky")) == 2  # the lost attempt never got to call out


def test_renewing_extends_only_leases_still_held(make_endpoint, settings):
    held, expired, other = (make_endpoint() for _ in range(3))
    claims = {c.endpoint_id: c for c in due_claims(held, expired, other)}
    [started] = start_claims([claims[held.pk]])
    assert started is not None
    now = timezone.now()
    Slot.objects.filter(pk=expired.pk).update(locked_until=now - S)
    before_other = Slot.objects.get(pk=other.pk).locked_until

    renewed = renew_leases([claims[held.pk], claims[expired.pk]], [started.run.pk], now=now + 2 * S)

    until = now + 2 * S + S * settings.CRONICORN_LEASE_SECONDS
    slots = {slot.pk: slot for slot in Slot.objects.all()}
    assert renewed == {held.pk}
    assert slots[held.pk].locked_until == until
    assert slots[expired.pk].locked_until == now - S  # never revived: it may be another's
    assert slots[other.pk].locked_until == before_other  # not ours to renew
    assert Run.objects.get(pk=started.run.pk).lease_expires_at == until


def test_a_dispatcher_keeps_renewing_the_lease_of_a_long_run(
    transactional_db, make_endpoint, target, settings
):
    settings.CRONICORN_LEASE_SECONDS = 2
    release = threading.Event()
    target.reply("/long", hold=release)
    endpoint = make_endpoint(url=target.url("/long"), timeout_ms=20_000)
    [claim] = due_claims(endpoint)
    dispatcher = ClaimDispatcher(max_in_flight=5)
    try:
        future = dispatcher.submit(claim)
        assert target.wait_for(lambda: target.hits(), timeout=5)
        first_lease = Slot.objects.get(pk=endpoint.pk).locked_until
        # Three lease lengths later the run is still in flight and still ours.
        assert wait_until(
            lambda: Slot.objects.get(pk=endpoint.pk).locked_until > first_lease + 4 * S,
            timeout=10,
        )
        assert claim_due_endpoints(now=timezone.now(), limit=10, horizon_ms=0) == []
        release.set()
        assert future.result(timeout=10) is not None
    finally:
        release.set()
        dispatcher.shutdown(timeout=10)
    run = Run.objects.get(endpoint=endpoint)
    assert run.status == RunStatus.SUCCESS
    assert Slot.objects.get(pk=endpoint.pk).claim_token is None  # released by the reschedule


def test_a_claim_whose_run_cannot_be_recorded_is_released_at_once(make_endpoint, monkeypatch):
    endpoint = make_endpoint()
    [claim] = due_claims(endpoint)

    def refuse(*_args: Any) -> Run:
        raise running.OperationalError("the database went away")

    monkeypatch.setattr(running, "_start_run", refuse)
    assert start_claims([claim]) == [None]
    slot = Slot.objects.get(pk=endpoint.pk)
    assert (slot.claim_token, slot.locked_until) == (None, None)
    [again] = claim_due_endpoints(now=timezone.now(), limit=10, horizon_ms=0)  # next tick
    assert again.endpoint_id == endpoint.pk


def test_one_tick_claims_past_the_batch_size_until_nothing_is_due(make_endpoint, settings):
    settings.CRONICORN_BATCH_SIZE = 10
    endpoints = [make_endpoint() for _ in range(35)]
    due_at = timezone.now()
    Slot.objects.update(next_run_at=due_at, next_run_source=Source.BASELINE_INTERVAL)
    batches: list[int] = []

    claims = tick(now=due_at, dispatch=lambda taken: batches.append(len(taken)))

    assert batches == [10, 10, 10, 5]
    assert sorted(c.endpoint_id for c in claims) == sorted(e.pk for e in endpoints)


def test_slots_claimed_late_start_spread_and_slots_claimed_on_time_start_on_their_slot(
    make_endpoint,
):
    """Endpoints freed together (after downtime, or an expired lease) do not keep one
    phase for good: their claims start at stable offsets within a second."""
    now = timezone.now()
    late = [make_endpoint() for _ in range(100)]
    on_time = make_endpoint()
    Slot.objects.update(next_run_at=now - 30 * S, next_run_source=Source.BASELINE_INTERVAL)
    Slot.objects.filter(pk=on_time.pk).update(next_run_at=now + S / 2)

    claims = {c.endpoint_id: c for c in claim_due_endpoints(now=now, limit=200, horizon_ms=1000)}

    assert claims[on_time.pk].start_at is None
    assert claims[on_time.pk].starts_at == claims[on_time.pk].scheduled_for
    offsets = [(claims[e.pk].starts_at - now).total_seconds() for e in late]
    assert all(0 <= offset < SPREAD_OVER.total_seconds() for offset in offsets)
    # Spread over the window, not bunched: every tenth of it holds some of the 100.
    assert {int(offset * 10) for offset in offsets} == set(range(10))
    assert all(claims[e.pk].scheduled_for == now - 30 * S for e in late)  # the slot stays
    payload = claims[late[0].pk].to_payload()
    assert Claim.from_payload(payload) == claims[late[0].pk]  # survives the broker


def test_a_run_that_ends_after_its_endpoint_was_deleted_says_so(make_endpoint, target, caplog):
    endpoint = make_endpoint(url=target.url("/"))
    [claim] = due_claims(endpoint)
    called = running.call_claim(claim)
    assert isinstance(called, outcomes.Outcome)
    Endpoint.objects.filter(pk=endpoint.pk).delete()  # while its request was in flight

    with caplog.at_level("INFO", logger="cronicorn.scheduler"):
        running.record_outcomes([called])

    assert "after its endpoint was deleted; nothing recorded" in caplog.text
    assert "deleted during its run; nothing to plan" in caplog.text
    assert "declared lost" not in caplog.text and "lease lost" not in caplog.text


def test_a_claim_whose_start_meets_a_database_restart_starts_once_it_is_back():
    """A PostgreSQL restart: the dispatcher still holds the claim, so it tries the start
    again shortly instead of leaving the slot to its lease."""
    attempts: list[float] = []

    def start(claims: list[Claim]) -> list[Any]:
        attempts.append(time.monotonic())
        if len(attempts) < 3:
            raise running.OperationalError("the database system is starting up")
        return [None] * len(claims)

    dispatcher = ClaimDispatcher(max_in_flight=5, start=start)
    try:
        claim = Claim(1, uuid.uuid4(), timezone.now(), "baseline-interval", "scheduled")
        future = dispatcher.submit(claim)
        assert future.result(timeout=10) is None
    finally:
        dispatcher.shutdown(timeout=5)
    assert len(attempts) == 3
    assert attempts[2] - attempts[0] >= 2 * dispatch.START_RETRY * 0.9


def test_a_claim_is_not_started_again_once_its_lease_would_have_ended(settings):
    settings.CRONICORN_LEASE_SECONDS = 2
    attempts: list[float] = []

    def start(claims: list[Claim]) -> list[Any]:
        attempts.append(time.monotonic())
        raise running.OperationalError("connection refused")

    dispatcher = ClaimDispatcher(max_in_flight=5, start=start)
    try:
        claim = Claim(1, uuid.uuid4(), timezone.now(), "baseline-interval", "scheduled")
        assert dispatcher.submit(claim).result(timeout=10) is None  # given up, not hung
    finally:
        dispatcher.shutdown(timeout=5)
    assert 2 <= attempts[-1] - attempts[0] < 4


def test_a_slot_whose_runs_keep_being_lost_is_given_up_after_its_most_attempts(
    make_endpoint, target
):
    """Each lost run retries its slot with the next attempt number. A target that kills
    its workers would be called every lease forever, its slot never ending, and past
    32 767 attempts (a smallint) the retry could not be recorded at all: the slot was
    claimed and released every tick and never ran again. The attempt after the most a
    slot has fails in words without a call, and the next slot is planned."""
    endpoint = make_endpoint(url=target.url("/"))
    [first] = due_claims(endpoint)
    [started] = start_claims([first])  # then its worker dies, as every one before it did
    assert started is not None
    Run.objects.filter(pk=started.run.pk).update(attempt=running.MAX_SLOT_ATTEMPTS)
    slot = Slot.objects.get(pk=endpoint.pk)

    [again] = claim_due_endpoints(now=slot.locked_until, limit=10, horizon_ms=0)
    given_up = execute_claim(again)

    assert given_up is not None
    given_up.refresh_from_db()
    assert (given_up.attempt, given_up.status) == (
        running.MAX_SLOT_ATTEMPTS + 1,
        RunStatus.FAILURE,
    )
    assert given_up.error.startswith("Given up: this slot had 20 attempts")
    assert target.hits() == []  # not called again
    endpoint.refresh_from_db()
    assert endpoint.failure_count == 1
    assert endpoint.next_run_at > slot.next_run_at  # the next slot, not this one again
    assert endpoint.next_run_source != Source.RETRY
