"""Host rate limits end to end (issue 34): a Celery fleet of beat, a tick worker and two
execute workers (each its own dispatcher, one budget between them, in Redis), over
PostgreSQL, against a real HTTP target on 127.0.0.1 that counts what arrives."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from endpoints.engine.host_limits import KEY_PREFIX
from endpoints.models import Endpoint, Job, JobStatus, Run, RunStatus, Slot
from endpoints.past import RATE_LIMITED, explain_past
from tests import fleets
from tests.engine_processes import wait_until
from tests.fleets import Fleet
from tests.http_targets import TargetServer

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DAY_MS = 86_400_000


@pytest.fixture(scope="module")
def celery_fleet(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    logs = tmp_path_factory.mktemp("rate-limit-fleet")
    with fleets.celery_fleet(logs, execute_workers=2, execute_threads=4) as fleet:
        yield fleet


@pytest.fixture
def fleet(celery_fleet: Fleet, transactional_db: None) -> Iterator[Fleet]:
    """The fleet ticking into this test's database, each host's budget fresh."""
    budgets = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    for key in budgets.scan_iter(f"{KEY_PREFIX}*"):
        budgets.delete(key)
    yield from fleets.ticking_into_this_test(celery_fleet)


def due_together(job: Job, target: TargetServer, count: int) -> datetime:
    """``count`` daily endpoints of the job on the target, all due at one whole second a
    few seconds from now; the job is activated once their slots are set."""
    job.status = JobStatus.PAUSED
    job.save(update_fields=["status"])
    Endpoint.objects.bulk_create(
        Endpoint(job=job, name=f"e{k}", url=target.url(f"/e{k}"), baseline_interval_ms=DAY_MS)
        for k in range(count)
    )
    instant = timezone.now().replace(microsecond=0) + timedelta(seconds=4)
    Slot.objects.filter(job=job).update(next_run_at=instant, next_run_source="baseline-interval")
    job.status = JobStatus.ACTIVE
    job.save(update_fields=["status"])
    return instant


def histogram(title: str, seconds: Counter[int], start: int) -> None:
    print(f"\n{title}")
    for second in range(min(seconds), max(seconds) + 1):
        print(f"  +{second - start:2d} s {seconds[second]:4d} {'#' * seconds[second]}")


def test_300_endpoints_due_in_one_second_reach_a_20_per_second_host_at_most_20_a_second_once_each(
    fleet, tenant, job, target
):
    tenant.host_rate_limits = {"127.0.0.1": 20}
    tenant.max_endpoints = 400
    tenant.full_clean()
    tenant.save()
    instant = due_together(job, target, 300)

    runs = Run.objects.filter(endpoint__job=job)
    done = runs.exclude(status=RunStatus.RUNNING)
    assert wait_until(lambda: done.count() >= 300, timeout=90), fleet.tail()

    hits = target.hits()
    per_second = Counter(int(hit.at) for hit in hits)
    histogram(
        "300 endpoints due together, limit 20/s; requests per second:",
        per_second,
        int(instant.timestamp()),
    )
    assert max(per_second.values()) <= 20, per_second
    # Every slot ran exactly once: one request per endpoint, one run per slot, none lost.
    assert Counter(hit.path for hit in hits) == {f"/e{k}": 1 for k in range(300)}
    assert runs.count() == 300
    assert {run.status for run in runs} == {RunStatus.SUCCESS}
    assert {run.scheduled_for for run in runs} == {instant}  # each kept its slot
    assert all(run.started_at >= instant for run in runs)
    assert all(hit.at >= instant.timestamp() for hit in hits)
    # Held back, not dropped: the burst went out over 15 seconds, each late run saying why.
    assert max(per_second) - min(per_second) >= 14
    delayed = [run for run in runs if run.delay_reason]
    assert len(delayed) >= 270
    latest = max(delayed, key=lambda run: run.started_at)
    # It waited longer than a lease: renewed while held, never declared lost, run once.
    assert latest.started_at - instant >= timedelta(seconds=14)
    assert settings.CRONICORN_LEASE_SECONDS < 14
    assert "by the rate limit of 127.0.0.1 (20 requests/s for this tenant)" in latest.delay_reason
    endpoint = Endpoint.objects.select_related("job").get(pk=latest.endpoint_id)
    told = explain_past(endpoint, instant, now=timezone.now())
    assert told.reason == RATE_LIMITED and told.run_id == latest.pk
    assert "Held back" in told.words and "its slot was kept" in told.words


def test_a_429_with_retry_after_pauses_the_host_for_every_other_endpoint(
    fleet, tenant, job, target
):
    tenant.host_rate_limits = {"127.0.0.1": 10}
    tenant.full_clean()
    tenant.save()
    count = 40
    paths = [f"/e{k}" for k in range(count)]

    def everyone_ok() -> None:
        for path in paths:
            target.reply(path)

    # Whichever request arrives first is told to come back in 3 s; the rest are answered.
    for path in paths:
        target.reply(path, status=429, headers={"Retry-After": "3"}, action=everyone_ok)
    due_together(job, target, count)

    done = Run.objects.filter(endpoint__job=job).exclude(status=RunStatus.RUNNING)
    assert wait_until(lambda: done.count() >= count, timeout=60), fleet.tail()

    hits = sorted(target.hits(), key=lambda hit: hit.at)
    refused = Run.objects.filter(endpoint__job=job, status_code=429).order_by("started_at")
    assert refused.exists()
    told_at = hits[0].at
    per_second = Counter(int(hit.at) for hit in hits)
    histogram(
        f"{count} endpoints, limit 10/s, the first answered 429 Retry-After: 3:",
        per_second,
        int(told_at),
    )
    # Only the requests already on their way (reserved within half a second) went on;
    # then nothing until the Retry-After had passed, for any endpoint of the host.
    during = [hit for hit in hits if told_at + 0.8 <= hit.at < told_at + 3.0]
    assert during == [], [round(hit.at - told_at, 3) for hit in hits]
    after = [hit for hit in hits if hit.at >= told_at + 3.0]
    assert len(after) >= count - 10
    assert Counter(hit.path for hit in hits) == {path: 1 for path in paths}
    assert max(per_second.values()) <= 10
    paused = [
        run
        for run in Run.objects.filter(endpoint__job=job)
        if "paused by a 429" in run.delay_reason
    ]
    assert len(paused) >= count - 10
