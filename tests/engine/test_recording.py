"""Runs that finish together are written together: ``running.record_outcomes`` and the
dispatcher's writer (DESIGN.md "Life of a run", steps 3 and 4)."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import Future
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from endpoints.engine import dispatch
from endpoints.engine.claiming import Claim, claim_due_endpoints
from endpoints.engine.dispatch import ClaimDispatcher
from endpoints.engine.outcomes import Outcome
from endpoints.engine.running import Started, call_claim, record_outcomes
from endpoints.models import Run, RunStatus, Slot, Source
from endpoints.operations import apply_hint
from tests.planning import planned_after

S = timedelta(seconds=1)


@pytest.mark.django_db
@pytest.mark.usefixtures("loopback_allowed")
def test_one_write_keeps_each_runs_own_outcome_and_each_conflict_apart(make_endpoint, target):
    """Four runs recorded in one call: a plain one, one whose endpoint got a hint mid-run,
    one whose lease another claimer took, and one the sweep declared lost meanwhile."""
    plain, hinted, taken, lost = (
        make_endpoint(url=target.url(f"/{name}"), baseline_interval_ms=600_000, timeout_ms=1_000)
        for name in ("plain", "hinted", "taken", "lost")
    )
    now = timezone.now()
    Slot.objects.update(next_run_at=now, next_run_source=Source.BASELINE_INTERVAL)
    claims = {c.endpoint_id: c for c in claim_due_endpoints(now=now, limit=10, horizon_ms=0)}
    outcomes = [call_claim(claims[e.pk]) for e in (plain, hinted, taken, lost)]
    assert all(isinstance(outcome, Outcome) for outcome in outcomes)

    # While the four outcomes wait for the writer:
    hinted.refresh_from_db()
    apply_hint(hinted, now=timezone.now(), interval_ms=5_000, ttl=timedelta(hours=1), reason="x")
    other = uuid.uuid4()
    Slot.objects.filter(pk=taken.pk).update(claim_token=other)
    Run.objects.filter(endpoint=lost).update(status=RunStatus.LOST)  # as the sweep does

    record_outcomes(outcomes)  # type: ignore[arg-type]

    runs = {run.endpoint_id: run for run in Run.objects.all()}
    assert [runs[e.pk].status for e in (plain, hinted, taken)] == [RunStatus.SUCCESS] * 3
    assert runs[lost.pk].status == RunStatus.LOST  # the sweep's verdict is kept
    for endpoint in (plain, hinted, taken, lost):
        endpoint.refresh_from_db()
    assert plain.next_run_at == planned_after(runs[plain.pk], 600 * S)
    assert plain.claim_token is None
    assert hinted.next_run_source == Source.AI_INTERVAL  # planned again with the new hint
    assert hinted.next_run_at == runs[hinted.pk].started_at + 5 * S
    assert hinted.claim_token is None
    assert (taken.claim_token, taken.last_run_at) == (other, None)  # left to its new owner
    assert lost.claim_token is None  # still ours: rescheduled as usual


def _claim(k: int) -> Claim:
    return Claim(k, uuid.uuid4(), timezone.now() - S, "", "scheduled")


def _outcome(claim: Claim) -> Outcome:
    now = timezone.now()
    run = Run(pk=claim.endpoint_id, endpoint_id=claim.endpoint_id)
    return Outcome(None, claim, run, now, now, None)  # type: ignore[arg-type]


class Recorder:
    """Stands in for ``record_outcomes``: remembers each batch it was given."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.lock = threading.Lock()

    def __call__(self, outcomes: list[Outcome]) -> None:
        with self.lock:
            self.batches.append([outcome.run.pk for outcome in outcomes])

    def written(self) -> set[int]:
        with self.lock:
            return {pk for batch in self.batches for pk in batch}


def _outcomes(claims: list[Claim]) -> list[Outcome]:
    """Stands in for starting and calling: each claim's outcome, at once."""
    return [_outcome(claim) for claim in claims]


def test_outcomes_finishing_together_share_one_write_and_resolve_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dispatch, "WRITE_LINGER", 0.5)  # room for a slow CI machine
    recorder = Recorder()
    early: list[int] = []  # futures that resolved before their run was written

    dispatcher = ClaimDispatcher(max_in_flight=4, start=_outcomes, record=recorder)
    try:
        futures = [dispatcher.submit(_claim(k)) for k in range(1, 5)]
        for future in futures:
            future.add_done_callback(
                lambda f: None if f.result().pk in recorder.written() else early.append(1)
            )
        runs = [future.result(timeout=10) for future in futures]
    finally:
        dispatcher.shutdown(timeout=5)
    assert sorted(run.pk for run in runs) == [1, 2, 3, 4]
    assert [sorted(batch) for batch in recorder.batches] == [[1, 2, 3, 4]]
    assert early == []


def test_claims_due_together_are_started_together_within_the_in_flight_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dispatch, "WRITE_LINGER", 0.0)
    starts: list[int] = []
    in_flight: list[int] = []
    gate = threading.Event()

    def start(claims: list[Claim]) -> list[Outcome]:
        gate.wait(timeout=10)  # the first batch holds its starter until all are queued
        starts.append(len(claims))
        in_flight.append(dispatcher.in_flight)
        return _outcomes(claims)

    dispatcher = ClaimDispatcher(max_in_flight=30, start=start, record=Recorder())
    try:
        futures = [dispatcher.submit(_claim(k)) for k in range(1, 101)]
        gate.set()
        assert all(future.result(timeout=10) for future in futures)
    finally:
        dispatcher.shutdown(timeout=5)
    assert sum(starts) == 100
    assert max(starts) > 1  # due together, started together
    assert max(starts) <= 30 and max(in_flight) <= 30  # never more in flight than allowed


def test_a_write_carries_at_most_a_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    # Everything arrives within it, on a busy machine too (0.5 s was not always enough).
    monkeypatch.setattr(dispatch, "WRITE_LINGER", 2.0)
    recorder = Recorder()
    dispatcher = ClaimDispatcher(max_in_flight=200, start=_outcomes, record=recorder)
    try:
        futures = [dispatcher.submit(_claim(k)) for k in range(1, 121)]
        assert all(future.result(timeout=10) for future in futures)
    finally:
        dispatcher.shutdown(timeout=5)
    sizes = [len(batch) for batch in recorder.batches]
    assert sum(sizes) == 120
    assert max(sizes) == dispatch.WRITE_BATCH  # a full batch is written without waiting
    assert len(sizes) == 3  # 50, 50, then the last 20 when their linger ran out


def test_shutdown_writes_what_is_waiting_without_lingering(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch, "WRITE_LINGER", 60.0)
    recorder = Recorder()
    called = threading.Semaphore(0)

    def start(claims: list[Claim]) -> list[Outcome]:
        for _claim in claims:
            called.release()
        return _outcomes(claims)

    dispatcher = ClaimDispatcher(max_in_flight=4, start=start, record=recorder)
    futures = [dispatcher.submit(_claim(k)) for k in range(1, 4)]
    for _ in futures:
        assert called.acquire(timeout=10)
    assert dispatcher.shutdown(timeout=10)
    assert recorder.written() == {1, 2, 3}
    assert all(future.result(timeout=0).pk for future in futures)


def test_a_failing_write_still_resolves_every_future(monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer survives a record that raises: the runs' leases expire and the sweep
    reports them, but no caller (a Celery execute task) waits forever."""

    def broken(outcomes: list[Any]) -> None:
        raise RuntimeError("database gone")

    dispatcher = ClaimDispatcher(max_in_flight=4, start=_outcomes, record=broken)
    try:
        futures = [dispatcher.submit(_claim(k)) for k in range(1, 4)]
        assert sorted(future.result(timeout=10).pk for future in futures) == [1, 2, 3]
        later = dispatcher.submit(_claim(4))  # and it keeps writing afterwards
        assert later.result(timeout=10).pk == 4
    finally:
        dispatcher.shutdown(timeout=5)


def test_a_request_that_cannot_start_or_finish_resolves_its_claim_and_the_rest_go_on() -> None:
    """The run is left running for the sweep (its lease expires); nothing hangs, and the
    starter and writer keep serving the other claims."""

    class Unstartable(Started):
        def call(self, *, policy: Any = None) -> Future[Any]:
            raise RuntimeError("no event loop")

    class Unfinished(Started):
        def call(self, *, policy: Any = None) -> Future[Any]:
            request: Future[Any] = Future()
            request.set_exception(RuntimeError("loop closed mid-request"))
            return request

    def start(claims: list[Claim]) -> list[Started | Outcome]:
        kinds = {1: Unstartable, 2: Unfinished}
        return [
            kinds[c.endpoint_id](None, c, Run(pk=c.endpoint_id), timezone.now())  # type: ignore[arg-type]
            if c.endpoint_id in kinds
            else _outcome(c)
            for c in claims
        ]

    recorder = Recorder()
    dispatcher = ClaimDispatcher(max_in_flight=4, start=start, record=recorder)
    try:
        futures = [dispatcher.submit(_claim(k)) for k in (1, 2, 3)]
        assert [future.result(timeout=10).pk for future in futures] == [1, 2, 3]
        assert dispatcher.submit(_claim(4)).result(timeout=10).pk == 4
    finally:
        dispatcher.shutdown(timeout=5)
    assert recorder.written() == {3, 4}  # only the runs that have an outcome are written
