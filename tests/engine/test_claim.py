"""The tick claim: what is due, what is not, leases, limits, concurrency, and its index."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.db import connection, connections, transaction

from endpoints.engine.claiming import _PG_CLAIM_UNLIMITED, claim_due_endpoints
from endpoints.models import Endpoint, Job, JobStatus, Slot, Source
from endpoints.operations import archive_endpoint, pause_endpoint

pytestmark = pytest.mark.django_db

S = timedelta(seconds=1)


def claimed_ids(now: datetime, *, limit: int = 100, horizon_ms: int = 0) -> list[int]:
    claims = claim_due_endpoints(now=now, limit=limit, horizon_ms=horizon_ms)
    return [claim.endpoint_id for claim in claims]


def test_an_endpoint_due_now_is_claimed_and_one_due_later_is_not(make_endpoint, now):
    due = make_endpoint(next_run_at=now)
    make_endpoint(next_run_at=now + 5 * S)
    assert claimed_ids(now) == [due.pk]


def test_an_endpoint_due_within_the_horizon_is_claimed_with_its_own_time(make_endpoint, now):
    soon = make_endpoint(next_run_at=now + timedelta(milliseconds=800))
    make_endpoint(next_run_at=now + timedelta(milliseconds=1200))
    [claim] = claim_due_endpoints(now=now, limit=10, horizon_ms=1000)
    assert claim.endpoint_id == soon.pk
    assert claim.scheduled_for == soon.next_run_at


def test_an_endpoint_without_a_next_run_is_never_claimed(make_endpoint, now):
    make_endpoint(next_run_at=None)
    assert claimed_ids(now) == []


def test_a_paused_endpoint_is_not_claimed_until_its_pause_ends(make_endpoint, now):
    # The claim reads only slots: the pause moved the next run to its end.
    paused = make_endpoint(next_run_at=now - S)
    pause_endpoint(paused, now=now - 2 * S, until=now + 10 * S)
    assert claimed_ids(now) == []
    assert claimed_ids(now + 10 * S) == [paused.pk]


def test_an_archived_endpoint_is_never_claimed(make_endpoint, now):
    archived = make_endpoint(next_run_at=now - S)
    archive_endpoint(archived, now=now - 2 * S)
    assert claimed_ids(now + timedelta(days=365)) == []


@pytest.mark.parametrize("status", [JobStatus.PAUSED, JobStatus.ARCHIVED])
def test_endpoints_of_a_job_that_is_not_active_are_not_claimed(make_endpoint, job, now, status):
    make_endpoint(next_run_at=now - S)
    Job.objects.filter(pk=job.pk).update(status=status)
    assert claimed_ids(now) == []


def test_a_leased_endpoint_is_not_claimed_again(make_endpoint, now):
    make_endpoint(next_run_at=now - S)
    assert len(claimed_ids(now)) == 1
    assert claimed_ids(now + S) == []


def test_an_expired_lease_is_released_and_claimed_again_with_a_new_token(make_endpoint, now):
    endpoint = make_endpoint(next_run_at=now, timeout_ms=2_000)
    [first] = claim_due_endpoints(now=now, limit=10, horizon_ms=0)
    endpoint.refresh_from_db()
    lease_end = endpoint.locked_until
    assert claimed_ids(lease_end - timedelta(milliseconds=1)) == []
    [second] = claim_due_endpoints(now=lease_end, limit=10, horizon_ms=0)
    assert second.endpoint_id == endpoint.pk
    assert second.claim_token != first.claim_token
    assert second.scheduled_for == first.scheduled_for


def test_a_lease_is_short_whatever_the_timeout_and_counts_from_the_slot(make_endpoint, now):
    overdue = make_endpoint(next_run_at=now - 30 * S, timeout_ms=600_000)
    early = make_endpoint(next_run_at=now + timedelta(milliseconds=700), timeout_ms=7_000)
    claims = claim_due_endpoints(now=now, limit=10, horizon_ms=1000)
    assert len(claims) == 2
    lease = timedelta(seconds=settings.CRONICORN_LEASE_SECONDS)
    overdue.refresh_from_db()
    early.refresh_from_db()
    # An overdue endpoint's lease counts from now; an early claim's from its slot. Neither
    # waits for a ten-minute timeout: the holder renews the lease while the run lasts.
    assert overdue.locked_until == now + lease
    assert early.locked_until == early.next_run_at + lease
    assert {overdue.claim_token, early.claim_token} == {c.claim_token for c in claims}


def test_claims_come_earliest_first_and_stop_at_the_limit(make_endpoint, now):
    endpoints = [make_endpoint(next_run_at=now - k * S) for k in range(5)]
    assert claimed_ids(now, limit=3) == [e.pk for e in reversed(endpoints)][:3]
    assert claimed_ids(now, limit=3) == [endpoints[1].pk, endpoints[0].pk]


def test_a_claim_records_the_source_and_a_manual_request_becomes_a_manual_trigger(
    make_endpoint, now
):
    make_endpoint(next_run_at=now, next_run_source=Source.AI_INTERVAL)
    make_endpoint(next_run_at=now - S, next_run_source=Source.MANUAL)
    manual, hinted = claim_due_endpoints(now=now, limit=10, horizon_ms=0)
    assert (manual.source, manual.trigger) == ("manual", "manual")
    assert (hinted.source, hinted.trigger) == ("ai-interval", "scheduled")
    assert isinstance(manual.claim_token, uuid.UUID)


def test_a_job_with_max_concurrent_never_has_more_endpoints_leased_than_allowed(
    make_endpoint, job, tenant, now
):
    Job.objects.filter(pk=job.pk).update(max_concurrent=2)
    limited = [make_endpoint(next_run_at=now - k * S) for k in range(4)]
    other_job = Job.objects.create(tenant=tenant, name="free")
    free = [make_endpoint(job=other_job, next_run_at=now - S) for _ in range(3)]

    first = claimed_ids(now)
    assert set(first) == {limited[3].pk, limited[2].pk} | {e.pk for e in free}
    assert claimed_ids(now) == []  # both slots in use: the others wait, not skipped

    # One run finishes (lease released, next run planned): exactly one more may start.
    Slot.objects.filter(pk=limited[3].pk).update(
        claim_token=None, locked_until=None, next_run_at=now + 60 * S
    )
    assert claimed_ids(now) == [limited[1].pk]


def bulk_endpoints(job: Job, count: int, next_run_at: Callable[[int], datetime]) -> list[Endpoint]:
    return Endpoint.objects.bulk_create(
        Endpoint(
            job=job,
            name=f"bulk-{k}",
            url="http://127.0.0.1:9/",
            baseline_interval_ms=60_000,
            next_run_at=next_run_at(k),
        )
        for k in range(count)
    )


def test_concurrent_claimers_on_separate_connections_get_disjoint_sets(transactional_db, job, now):
    if connection.vendor != "postgresql":
        pytest.skip("SKIP LOCKED concurrency is a PostgreSQL property")
    endpoints = bulk_endpoints(job, 300, lambda k: now - timedelta(milliseconds=k))
    workers = 4
    start = threading.Barrier(workers)
    taken: list[list[int]] = [[] for _ in range(workers)]

    def claimer(slot: int) -> None:
        try:
            start.wait(timeout=10)
            for _ in range(50):
                batch = claimed_ids(now, limit=25)
                if not batch and sum(map(len, taken)) >= len(endpoints):
                    break
                taken[slot].extend(batch)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claimer, args=(k,)) for k in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    everything = [pk for batch in taken for pk in batch]
    assert len(everything) == len(set(everything)) == len(endpoints)
    assert sum(1 for batch in taken if batch) >= 2  # they really did overlap


def test_a_second_claimer_cannot_fill_a_slot_the_first_has_not_committed_yet(
    transactional_db, job, now
):
    if connection.vendor != "postgresql":
        pytest.skip("the race needs two PostgreSQL connections")
    Job.objects.filter(pk=job.pk).update(max_concurrent=1)
    bulk_endpoints(job, 5, lambda k: now - timedelta(milliseconds=k))
    first_claimed, second_done = threading.Event(), threading.Event()
    first: list[int] = []

    def slow_first_claimer() -> None:
        try:
            with transaction.atomic():  # holds its claim uncommitted while the other claims
                first.extend(claimed_ids(now))
                first_claimed.set()
                second_done.wait(timeout=20)
        finally:
            connections.close_all()

    thread = threading.Thread(target=slow_first_claimer)
    thread.start()
    assert first_claimed.wait(timeout=20)
    started = time.monotonic()
    second = claimed_ids(now)
    waited = time.monotonic() - started
    second_done.set()
    thread.join(timeout=20)

    assert len(first) == 1
    # It could not see the first's lease yet: the job's lock made it skip the job at once,
    # instead of waiting on the first's rows or filling the slot a second time.
    assert second == []
    assert waited < 5
    assert Slot.objects.filter(claim_token__isnull=False).count() == 1


def _plan_for_claim(now: datetime, *, analyze: bool) -> str:
    params = {"now": now, "due_by": now, "lease": 10, "limit": 100}
    prefix = "EXPLAIN (ANALYZE, COSTS OFF) " if analyze else "EXPLAIN (COSTS OFF) "
    with connection.cursor() as cursor:
        cursor.execute(prefix + _PG_CLAIM_UNLIMITED, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_the_claim_reads_the_partial_index_and_only_the_rows_it_takes(
    make_endpoint: Callable[..., Endpoint], job: Job, now: datetime
):
    if connection.vendor != "postgresql":
        pytest.skip("the plan check is for PostgreSQL")
    bulk_endpoints(job, 5_000, lambda k: now + timedelta(hours=1) + k * S)
    for k in range(20):
        make_endpoint(next_run_at=now - k * S)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE endpoints_slot")
    plan = _plan_for_claim(now, analyze=True)
    assert "endpoints_slot_claimable" in plan, plan
    assert "Seq Scan on endpoints_slot" not in plan, plan
    assert "on endpoints_endpoint" not in plan, plan  # no endpoint row is read
    # The scan stops after the due rows: it never walks the 5 000 idle ones.
    scan = next(line for line in plan.splitlines() if "endpoints_slot_claimable" in line)
    assert "rows=20 " in scan or "rows=21 " in scan, plan
