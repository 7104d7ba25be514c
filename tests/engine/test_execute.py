"""Executing a claim: the Run record, and the reschedule of DESIGN.md "Life of a run" step 4."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from endpoints.engine import running
from endpoints.engine.claiming import Claim, claim_due_endpoints
from endpoints.engine.running import execute_claim, record_outcomes, start_claims
from endpoints.models import Endpoint, Run, RunStatus, RunTrigger, Slot, Source
from endpoints.operations import apply_hint
from tests.engine_processes import wait_until
from tests.planning import planned_after

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("loopback_allowed")]

S = timedelta(seconds=1)


def due_claim(endpoint: Endpoint) -> Claim:
    """Make the endpoint due right now and claim it."""
    now = timezone.now()
    Slot.objects.filter(pk=endpoint.pk).update(
        next_run_at=now, next_run_source=Source.BASELINE_INTERVAL
    )
    claims = claim_due_endpoints(now=now, limit=100, horizon_ms=0)
    return next(c for c in claims if c.endpoint_id == endpoint.pk)


def test_a_successful_run_is_recorded_and_the_next_run_planned_from_its_start(
    make_endpoint, target
):
    target.reply("/ok", body={"queue_depth": 3})
    endpoint = make_endpoint(url=target.url("/ok"), baseline_interval_ms=60_000)
    claim = due_claim(endpoint)
    endpoint.refresh_from_db()
    lease = endpoint.locked_until

    run = execute_claim(claim)

    assert run is not None
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCESS
    assert (run.trigger, run.source, run.attempt) == (RunTrigger.SCHEDULED, "baseline-interval", 1)
    assert run.scheduled_for == claim.scheduled_for <= run.started_at < run.finished_at
    assert (run.claim_token, run.lease_expires_at) == (claim.claim_token, lease)
    assert (run.request_method, run.request_url) == ("GET", target.url("/ok"))
    assert (run.status_code, run.response_body) == (200, {"queue_depth": 3})
    assert run.duration_ms is not None and run.error == ""
    endpoint.refresh_from_db()
    assert endpoint.last_run_at == run.started_at
    assert endpoint.next_run_at == planned_after(run, 60 * S)
    assert endpoint.next_run_source == Source.BASELINE_INTERVAL
    assert (endpoint.claim_token, endpoint.locked_until, endpoint.failure_count) == (None, None, 0)


def test_a_failure_counts_before_planning_so_the_backoff_starts_with_it(make_endpoint, target):
    target.reply("/down", status=503, body={"error": "maintenance"})
    endpoint = make_endpoint(url=target.url("/down"), baseline_interval_ms=10_000)

    run = execute_claim(due_claim(endpoint))

    run.refresh_from_db()
    assert (run.status, run.status_code) == (RunStatus.FAILURE, 503)
    assert "503" in run.error
    endpoint.refresh_from_db()
    assert endpoint.failure_count == 1
    assert endpoint.next_run_at == planned_after(run, 20 * S)


def test_a_success_after_failures_ends_the_backoff_at_once(make_endpoint, target):
    endpoint = make_endpoint(url=target.url("/ok"), baseline_interval_ms=10_000, failure_count=4)
    run = execute_claim(due_claim(endpoint))
    endpoint.refresh_from_db()
    assert endpoint.failure_count == 0
    assert endpoint.next_run_at == planned_after(run, 10 * S)


def test_a_request_past_its_timeout_is_recorded_as_a_timeout_and_counts_as_a_failure(
    make_endpoint, target
):
    target.reply("/slow", delay=2.0)
    endpoint = make_endpoint(url=target.url("/slow"), timeout_ms=1_000)
    run = execute_claim(due_claim(endpoint))
    run.refresh_from_db()
    assert run.status == RunStatus.TIMEOUT
    assert "timed out" in run.error
    assert 900 <= run.duration_ms < 1_900
    endpoint.refresh_from_db()
    assert endpoint.failure_count == 1


def test_an_unreachable_endpoint_is_a_failure_with_a_clear_error(make_endpoint):
    endpoint = make_endpoint(url="http://127.0.0.1:9/nothing-listens-here")
    run = execute_claim(due_claim(endpoint))
    run.refresh_from_db()
    assert run.status == RunStatus.FAILURE
    assert run.error
    endpoint.refresh_from_db()
    assert endpoint.claim_token is None


def test_expired_hints_are_cleared_by_the_run(make_endpoint, target):
    past = timezone.now() - S
    endpoint = make_endpoint(
        url=target.url("/"),
        ai_hint_interval_ms=5_000,
        ai_hint_expires_at=past,
        ai_hint_reason="old advice",
    )
    run = execute_claim(due_claim(endpoint))
    endpoint.refresh_from_db()
    assert endpoint.ai_hint_interval_ms is None
    assert endpoint.ai_hint_expires_at is None
    assert endpoint.ai_hint_reason == ""
    assert endpoint.next_run_at == planned_after(run, 60 * S)


def test_a_consumed_one_shot_is_cleared_and_a_fresh_interval_hint_kept(make_endpoint, target):
    now = timezone.now()
    endpoint = make_endpoint(
        url=target.url("/"),
        ai_hint_interval_ms=7_000,
        ai_hint_next_run_at=now,
        ai_hint_expires_at=now + timedelta(hours=1),
        ai_hint_reason="tighten",
    )
    run = execute_claim(due_claim(endpoint))
    endpoint.refresh_from_db()
    assert endpoint.ai_hint_next_run_at is None
    assert endpoint.ai_hint_interval_ms == 7_000
    assert endpoint.ai_hint_reason == "tighten"
    assert endpoint.next_run_at == run.started_at + 7 * S
    assert endpoint.next_run_source == Source.AI_INTERVAL


def test_a_one_shot_still_ahead_survives_the_run_and_sets_the_next_run(make_endpoint, target):
    later = timezone.now() + 20 * S
    endpoint = make_endpoint(
        url=target.url("/"),
        ai_hint_next_run_at=later,
        ai_hint_expires_at=later + timedelta(hours=1),
    )
    execute_claim(due_claim(endpoint))
    endpoint.refresh_from_db()
    assert endpoint.ai_hint_next_run_at == later
    assert (endpoint.next_run_at, endpoint.next_run_source) == (later, Source.AI_ONESHOT)


def test_a_run_slower_than_its_interval_is_planned_from_its_end(make_endpoint, target):
    target.reply("/slow", delay=1.3)
    endpoint = make_endpoint(url=target.url("/slow"), baseline_interval_ms=1_000)
    run = execute_claim(due_claim(endpoint))
    run.refresh_from_db()
    endpoint.refresh_from_db()
    assert run.started_at + S < run.finished_at
    assert endpoint.next_run_at == run.finished_at + S


def test_a_pause_reaching_past_the_run_sets_the_next_run_to_its_end(make_endpoint, target):
    endpoint = make_endpoint(url=target.url("/"))
    claim = due_claim(endpoint)
    until = timezone.now() + timedelta(minutes=5)
    # The pause lands between the claim and the run: the run does not happen.
    Endpoint.objects.filter(pk=endpoint.pk).update(paused_until=until)
    Slot.objects.filter(pk=endpoint.pk).update(next_run_at=until)
    assert execute_claim(claim) is None
    assert target.hits() == []
    endpoint.refresh_from_db()
    assert (endpoint.claim_token, endpoint.next_run_at) == (None, until)


def test_a_slot_that_disagrees_with_its_endpoint_is_put_right_when_its_claim_is_dropped(
    make_endpoint, target
):
    """The claim reads only slots. Should one ever say "due" while its endpoint is paused
    or archived (written around the governor), the run does not happen and the slot is
    corrected, so the next tick does not take it again (trap 3's tight loop)."""
    paused, archived = make_endpoint(url=target.url("/p")), make_endpoint(url=target.url("/a"))
    until = timezone.now() + timedelta(minutes=5)
    Endpoint.objects.filter(pk=paused.pk).update(paused_until=until)
    Endpoint.objects.filter(pk=archived.pk).update(archived_at=timezone.now())
    assert execute_claim(due_claim(paused)) is None
    assert execute_claim(due_claim(archived)) is None
    assert target.hits() == []
    slots = {slot.pk: slot for slot in Slot.objects.all()}
    assert (slots[paused.pk].next_run_at, slots[paused.pk].next_run_source) == (until, "paused")
    assert (slots[archived.pk].next_run_at, slots[archived.pk].claim_token) == (None, None)
    assert claim_due_endpoints(now=timezone.now(), limit=10, horizon_ms=0) == []


def test_a_stale_or_duplicate_claim_does_nothing(make_endpoint, target):
    endpoint = make_endpoint(url=target.url("/"))
    claim = due_claim(endpoint)
    assert execute_claim(claim) is not None
    assert execute_claim(claim) is None  # the same message delivered twice
    assert len(target.hits()) == 1
    assert Run.objects.filter(endpoint=endpoint).count() == 1


def test_a_reclaimed_slot_after_a_lost_run_is_a_retry_of_it(make_endpoint, target):
    endpoint = make_endpoint(url=target.url("/"), timeout_ms=1_000)
    first = due_claim(endpoint)
    endpoint.refresh_from_db()
    # The worker created its run and died: the row stays running, the lease runs out.
    dead = Run.objects.create(
        endpoint=endpoint,
        scheduled_for=first.scheduled_for,
        started_at=first.scheduled_for,
        claim_token=first.claim_token,
        lease_expires_at=endpoint.locked_until,
    )
    [second] = claim_due_endpoints(now=endpoint.locked_until, limit=10, horizon_ms=0)
    assert second.scheduled_for == first.scheduled_for

    retry = execute_claim(second)

    retry.refresh_from_db()
    dead.refresh_from_db()
    assert (retry.trigger, retry.attempt, retry.retry_of_id) == (RunTrigger.RETRY, 2, dead.pk)
    assert retry.status == RunStatus.SUCCESS
    assert dead.status == RunStatus.LOST
    assert "lease expired" in dead.error
    assert execute_claim(first) is None  # the dead worker's message, redelivered


def test_claims_started_together_each_get_their_own_run_or_nothing(
    make_endpoint, target, monkeypatch
):
    """One start for six claims: two fresh slots (inserted in one statement), a slot
    whose earlier run was lost (a retry of it), a stale claim, a paused endpoint, and a
    duplicate of the first (a redelivered message)."""
    fresh_a, fresh_b, reclaimed, stale, paused = (
        make_endpoint(url=target.url(f"/{name}"), timeout_ms=1_000)
        for name in ("a", "b", "reclaimed", "stale", "paused")
    )
    now = timezone.now()
    Slot.objects.update(next_run_at=now, next_run_source=Source.BASELINE_INTERVAL)
    claims = {c.endpoint_id: c for c in claim_due_endpoints(now=now, limit=10, horizon_ms=0)}
    dead = Run.objects.create(  # a worker died in this slot under an earlier claim
        endpoint=reclaimed,
        scheduled_for=claims[reclaimed.pk].scheduled_for,
        started_at=now - S,
        claim_token=uuid.uuid4(),
        lease_expires_at=now,
    )
    Slot.objects.filter(pk=stale.pk).update(claim_token=uuid.uuid4())
    Endpoint.objects.filter(pk=paused.pk).update(paused_until=now + timedelta(hours=1))

    one_by_one: list[int] = []
    start_one = running._start_run
    monkeypatch.setattr(
        running,
        "_start_run",
        lambda endpoint, *rest: one_by_one.append(endpoint.pk) or start_one(endpoint, *rest),
    )

    order = (fresh_a, fresh_b, reclaimed, stale, paused, fresh_a)  # the last: a duplicate
    started = start_claims([claims[e.pk] for e in order])

    assert [s is not None for s in started] == [True, True, True, False, False, False]
    assert Run.objects.filter(endpoint=fresh_a).count() == 1
    runs = {s.run.endpoint_id: Run.objects.get(pk=s.run.pk) for s in started if s is not None}
    assert [runs[e.pk].trigger for e in (fresh_a, fresh_b)] == [RunTrigger.SCHEDULED] * 2
    assert all(run.status == RunStatus.RUNNING for run in runs.values())
    retry = runs[reclaimed.pk]
    assert (retry.trigger, retry.attempt, retry.retry_of_id) == (RunTrigger.RETRY, 2, dead.pk)
    dead.refresh_from_db()
    assert dead.status == RunStatus.LOST
    assert not Run.objects.filter(endpoint__in=[stale, paused]).exists()
    paused.refresh_from_db()
    assert paused.claim_token is None  # the paused endpoint's lease is released at once
    assert target.hits() == []  # starting records runs; nothing is called yet
    assert one_by_one == [reclaimed.pk]  # the fresh slots were inserted together


def test_a_body_the_database_refuses_is_kept_with_the_nul_replaced(make_endpoint, target):
    # jsonb cannot hold NUL: the body is kept with U+FFFD in its place (more such values
    # in tests/engine/test_unstorable_answers.py), rather than dropped.
    target.reply("/nul", raw=b"bad\x00byte")
    endpoint = make_endpoint(url=target.url("/nul"))
    run = execute_claim(due_claim(endpoint))
    run.refresh_from_db()
    assert (run.status, run.status_code, run.error) == (RunStatus.SUCCESS, 200, "")
    assert run.response_body == "bad\ufffdbyte"
    endpoint.refresh_from_db()
    assert endpoint.claim_token is None
    assert endpoint.next_run_at == planned_after(run, 60 * S)


def test_a_corrupt_schedule_is_recorded_on_the_run_and_retried_later_not_in_a_loop(
    make_endpoint, target
):
    endpoint = make_endpoint(url=target.url("/"), baseline_cron="*/5 * * * *")
    claim = due_claim(endpoint)
    Endpoint.objects.filter(pk=endpoint.pk).update(baseline_cron="not a cron")

    run = execute_claim(claim)

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCESS
    assert "Scheduler error" in run.error
    endpoint.refresh_from_db()
    assert endpoint.claim_token is None
    assert endpoint.next_run_at >= run.started_at + 59 * S
    assert endpoint.failure_count == 1


def _execute_in_thread(claim: Claim) -> tuple[threading.Thread, list[Run | None]]:
    result: list[Run | None] = []

    def work() -> None:
        try:
            result.append(execute_claim(claim))
        finally:
            connections.close_all()

    thread = threading.Thread(target=work)
    thread.start()
    return thread, result


def test_a_lost_lease_keeps_the_run_but_leaves_the_endpoint_to_its_new_owner(
    transactional_db, make_endpoint, target
):
    hold = threading.Event()
    target.reply("/held", hold=hold)
    endpoint = make_endpoint(url=target.url("/held"))
    claim = due_claim(endpoint)
    thread, result = _execute_in_thread(claim)
    assert target.wait_for(lambda: target.hits(), timeout=10)
    other = claim.claim_token.hex[::-1]  # another claimer took over the slot
    Slot.objects.filter(pk=endpoint.pk).update(claim_token=other)
    hold.set()
    thread.join(timeout=20)

    [run] = result
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCESS
    endpoint.refresh_from_db()
    assert endpoint.claim_token.hex == other
    assert endpoint.next_run_at == claim.scheduled_for
    assert endpoint.last_run_at is None


def test_a_hint_applied_during_the_run_is_kept_and_planned_with(
    transactional_db, make_endpoint, target
):
    hold = threading.Event()
    target.reply("/held", hold=hold)
    endpoint = make_endpoint(url=target.url("/held"), baseline_interval_ms=600_000)
    claim = due_claim(endpoint)
    thread, result = _execute_in_thread(claim)
    assert target.wait_for(lambda: target.hits(), timeout=10)
    endpoint.refresh_from_db()
    apply_hint(
        endpoint, now=timezone.now(), interval_ms=5_000, ttl=timedelta(hours=1), reason="busy"
    )
    hold.set()
    thread.join(timeout=20)

    [run] = result
    endpoint.refresh_from_db()
    assert endpoint.ai_hint_interval_ms == 5_000
    assert endpoint.next_run_source == Source.AI_INTERVAL
    assert endpoint.next_run_at == run.started_at + 5 * S
    assert endpoint.claim_token is None


def _waiting_on_a_lock() -> bool:
    with connection.cursor() as cursor:  # pg_locks is live, even inside a transaction
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
        return cursor.fetchone()[0] > 0


def test_a_pause_committed_while_its_run_is_written_wins_without_a_deadlock(
    transactional_db, make_endpoint, target, caplog
):
    """The writer and a person's edit both write the endpoint row and its slot; both lock
    the endpoint's first. In the other order, the writer (holding the slot) would wait
    for the edit's endpoint row while the edit waited for the slot: PostgreSQL would kill
    the writer's statement and a successful run would be recorded as a scheduler error."""
    if connection.vendor != "postgresql":
        pytest.skip("the lock order needs two PostgreSQL connections")
    endpoint = make_endpoint(url=target.url("/"))
    [started] = start_claims([due_claim(endpoint)])
    outcome = started.outcome(started.call_and_wait())
    until = timezone.now() + timedelta(hours=1)

    def write() -> None:
        try:
            record_outcomes([outcome])
        finally:
            connections.close_all()

    writer = threading.Thread(target=write)
    with transaction.atomic():  # what pause_endpoint does: the endpoint, then its slot
        Endpoint.objects.filter(pk=endpoint.pk).update(paused_until=until)
        writer.start()
        # The writer waits on the endpoint row, holding nothing.
        assert wait_until(_waiting_on_a_lock, timeout=20, every=0.01)
        Slot.objects.filter(pk=endpoint.pk).update(next_run_at=until, next_run_source="paused")
    writer.join(timeout=20)

    assert not writer.is_alive()
    assert "scheduler error" not in caplog.text
    run = Run.objects.get(pk=outcome.run.pk)
    endpoint.refresh_from_db()
    assert run.status == RunStatus.SUCCESS
    # The writer saw the pause (its planning-fields test failed), planned again with it,
    # and released the lease.
    assert (endpoint.next_run_at, endpoint.next_run_source) == (until, "paused")
    assert endpoint.claim_token is None


@pytest.mark.parametrize("window_ms", [0, 1, 50])
def test_a_catchup_window_shorter_than_a_tick_skips_late_slots_but_never_one_on_time(
    make_endpoint, target, window_ms
):
    # The execute task waits for its slot, then starts a few ms after it: that is the
    # scheduler's own jitter, not lateness; every slot was skipped, the target never called.
    endpoint = make_endpoint(url=target.url("/on-time"), baseline_interval_ms=60_000)
    endpoint.job.run_policy = {"catchup_window_ms": window_ms}
    endpoint.job.save(update_fields=["run_policy"])

    execute_claim(due_claim(endpoint))

    on_time = Run.objects.get(endpoint=endpoint)
    assert on_time.status == RunStatus.SUCCESS, on_time.error
    assert len(target.hits("/on-time")) == 1
    Slot.objects.filter(pk=endpoint.pk).update(next_run_at=timezone.now() - 2 * S)
    [late] = claim_due_endpoints(now=timezone.now(), limit=10, horizon_ms=0)
    execute_claim(late)
    skipped = Run.objects.filter(endpoint=endpoint).latest("pk")
    assert skipped.status == RunStatus.SKIPPED
    assert skipped.error.startswith("Skipped: found 2 seconds late"), skipped.error
    assert len(target.hits("/on-time")) == 1


@pytest.mark.parametrize(
    ("retry_after", "delay"),
    # "Â²" goes out as latin-1, the bytes of "²" in UTF-8: a digit to str.isdigit, not to int.
    [("120", 120 * S), ("\u00c2\u00b2", 10 * S), ("soon", 10 * S)],
)
def test_a_retry_honours_a_retry_after_in_seconds_and_ignores_any_other(
    make_endpoint, target, retry_after, delay
):
    target.reply("/busy", status=503, headers={"Retry-After": retry_after})
    endpoint = make_endpoint(url=target.url("/busy"), baseline_interval_ms=3_600_000)
    endpoint.job.run_policy = {"retry_attempts": 3, "retry_delay_ms": 10_000}
    endpoint.job.save(update_fields=["run_policy"])

    execute_claim(due_claim(endpoint))

    run = Run.objects.get(endpoint=endpoint)
    assert run.error == "HTTP 503 Service Unavailable"
    endpoint.refresh_from_db()
    assert endpoint.next_run_source == Source.RETRY
    assert endpoint.next_run_at == run.finished_at + delay


def test_a_body_json_path_with_a_non_ascii_digit_fails_the_check_not_the_scheduler(
    make_endpoint, target
):
    # "²" is a digit to str.isdigit, not to int: every run ended in a ValueError.
    target.reply("/items", body={"items": ["ok"]})
    endpoint = make_endpoint(url=target.url("/items"), baseline_interval_ms=60_000)
    endpoint.job.run_policy = {"body_json_path": "items.\u00b2", "body_json_equals": "ok"}
    endpoint.job.save(update_fields=["run_policy"])

    execute_claim(due_claim(endpoint))

    run = Run.objects.get(endpoint=endpoint)
    assert (run.status, run.error) == (RunStatus.FAILURE, "the body has no items.\u00b2")
    endpoint.refresh_from_db()
    assert endpoint.next_run_source == Source.BASELINE_INTERVAL
