"""Retention by ranges of start time (issue 23): bounded statements, the same rules as the
per-endpoint loop it replaced on PostgreSQL (each endpoint's latest runs and every run in
flight kept, retries unlinked from pruned originals)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from endpoints.engine import maintenance
from endpoints.engine.maintenance import prune_runs
from endpoints.models import Endpoint, Run, RunStatus, RunTrigger

pytestmark = pytest.mark.django_db

S = timedelta(seconds=1)
DAY = timedelta(days=1)


def make_run(endpoint: Endpoint, started, **fields) -> Run:
    values = {"scheduled_for": started, "started_at": started, "status": RunStatus.SUCCESS}
    values.update(fields)
    return Run.objects.create(endpoint=endpoint, **values)


@pytest.fixture
def small_batches(monkeypatch, settings):
    settings.CRONICORN_RUN_RETENTION_DAYS = 30
    settings.CRONICORN_RUN_RETENTION_KEEP = 2
    monkeypatch.setattr(maintenance, "PRUNE_BATCH_SIZE", 2)


@pytest.mark.usefixtures("small_batches")
def test_many_runs_started_in_the_same_instant_are_all_pruned(make_endpoint, now):
    endpoint = make_endpoint()
    same = now - 40 * DAY
    old = [
        make_run(endpoint, same, scheduled_for=same + k * S, trigger=RunTrigger.MANUAL)
        for k in range(7)
    ]
    recent = [make_run(endpoint, now - k * S) for k in range(2)]

    assert prune_runs(now=now) == len(old)
    assert set(Run.objects.all()) == set(recent)


@pytest.mark.usefixtures("small_batches")
def test_an_endpoint_with_only_old_runs_keeps_its_latest_and_others_lose_theirs(make_endpoint, now):
    quiet, busy = make_endpoint(), make_endpoint()
    quiet_runs = [make_run(quiet, now - 50 * DAY - k * S) for k in range(4)]
    # Interleaved in time with the quiet endpoint's, in the same windows.
    busy_old = [make_run(busy, now - 50 * DAY - k * S - S / 2) for k in range(4)]
    busy_recent = [make_run(busy, now - k * S) for k in range(3)]
    in_flight = make_run(busy, now - 60 * DAY, status=RunStatus.RUNNING)

    assert prune_runs(now=now) == 2 + 4
    assert set(Run.objects.filter(endpoint=quiet)) == set(quiet_runs[:2])
    assert set(Run.objects.filter(endpoint=busy)) == {*busy_recent, in_flight}
    assert not Run.objects.filter(pk__in=[r.pk for r in busy_old]).exists()


@pytest.mark.usefixtures("small_batches")
def test_a_pruned_original_and_its_pruned_retry_go_together_a_kept_retry_is_unlinked(
    make_endpoint, now
):
    endpoint = make_endpoint()
    lost = make_run(endpoint, now - 40 * DAY, status=RunStatus.LOST)
    retry = make_run(
        endpoint,
        now - 40 * DAY + S,
        trigger=RunTrigger.RETRY,
        attempt=2,
        retry_of=lost,
        scheduled_for=lost.scheduled_for,
    )
    late_lost = make_run(endpoint, now - 31 * DAY, status=RunStatus.LOST)
    kept_retry = make_run(
        endpoint,
        now - 2 * DAY,
        trigger=RunTrigger.RETRY,
        attempt=2,
        retry_of=late_lost,
        scheduled_for=late_lost.scheduled_for,
    )
    make_run(endpoint, now - DAY)

    assert prune_runs(now=now) == 3
    assert not Run.objects.filter(pk__in=[lost.pk, retry.pk, late_lost.pk]).exists()
    kept_retry.refresh_from_db()
    assert kept_retry.retry_of is None
