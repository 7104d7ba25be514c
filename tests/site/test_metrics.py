"""What /metrics tells Prometheus: recorded runs, ticks, zombies, sessions, and live gauges."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from endpoints.engine import metrics
from endpoints.models import Endpoint, Heartbeat, Job, JobStatus, Run, RunStatus, Slot, Tenant
from endpoints.operations import archive_endpoint, pause_endpoint
from planner.models import AnalysisSession

TOKEN = "metrics-token-for-tests"


@pytest.fixture
def scrape(
    db: None, settings
) -> Callable[[], dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """Scrape /metrics; samples keyed by (name, sorted labels)."""
    settings.CRONICORN_METRICS_TOKEN = TOKEN
    client = Client()

    def scrape_once() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status_code == 200
        samples = {}
        for family in text_string_to_metric_families(response.content.decode()):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return samples

    return scrape_once


def _run(endpoint: Endpoint, **fields) -> Run:
    started = timezone.now()
    values = {
        "endpoint": endpoint,
        "scheduled_for": started - timedelta(milliseconds=300),
        "started_at": started,
        "source": "baseline-interval",
        "status": RunStatus.SUCCESS,
        "duration_ms": 1500,
    }
    values.update(fields)
    return Run.objects.create(**values)


def test_a_recorded_run_is_counted_by_status_source_and_trigger(scrape, make_endpoint) -> None:
    run = _run(make_endpoint(), status=RunStatus.RUNNING, trigger="manual")
    labels = (("source", "baseline-interval"), ("status", "failure"), ("trigger", "manual"))
    before = scrape().get(("cronicorn_runs_total", labels), 0.0)
    metrics.record_run(run, status=RunStatus.FAILURE, duration_ms=20)
    assert scrape()[("cronicorn_runs_total", labels)] == before + 1


def test_a_recorded_run_observes_its_duration_and_start_lateness(scrape, make_endpoint) -> None:
    run = _run(make_endpoint(), status=RunStatus.RUNNING, duration_ms=None)
    duration_le_1 = (
        "cronicorn_run_duration_seconds_bucket",
        (("le", "1.0"), ("status", "timeout")),
    )
    duration_le_2_5 = (
        "cronicorn_run_duration_seconds_bucket",
        (("le", "2.5"), ("status", "timeout")),
    )
    late_le_0_25 = (
        "cronicorn_run_start_lateness_seconds_bucket",
        (("le", "0.25"), ("trigger", "scheduled")),
    )
    late_le_0_5 = (
        "cronicorn_run_start_lateness_seconds_bucket",
        (("le", "0.5"), ("trigger", "scheduled")),
    )
    before = scrape()
    metrics.record_run(run, status=RunStatus.TIMEOUT, duration_ms=1500)
    after = scrape()
    # 1.5 s falls in the 2.5 s bucket and not the 1 s one; 300 ms late in 0.5 s, not 0.25 s.
    assert after[duration_le_2_5] == before.get(duration_le_2_5, 0) + 1
    assert after[duration_le_1] == before.get(duration_le_1, 0)
    assert after[late_le_0_5] == before.get(late_le_0_5, 0) + 1
    assert after[late_le_0_25] == before.get(late_le_0_25, 0)


def test_ticks_claims_zombies_and_planner_sessions_are_counted(scrape) -> None:
    ticks = ("cronicorn_tick_claims_count", ())
    claimed = ("cronicorn_tick_claims_sum", ())
    zombies = ("cronicorn_zombie_runs_total", ())
    sessions = ("cronicorn_planner_sessions_total", (("backend", "llm"), ("status", "failed")))
    tokens = ("cronicorn_planner_tokens_total", (("backend", "llm"),))
    before = scrape()
    metrics.record_claims(0)
    metrics.record_claims(7)
    metrics.record_zombies(0)
    metrics.record_zombies(2)
    metrics.record_planner_session(backend="llm", status="failed", tokens=321)
    after = scrape()
    assert after[ticks] == before.get(ticks, 0) + 2
    assert after[claimed] == before.get(claimed, 0) + 7
    assert after[zombies] == before.get(zombies, 0) + 2
    assert after[sessions] == before.get(sessions, 0) + 1
    assert after[tokens] == before.get(tokens, 0) + 321


def test_in_flight_runs_and_pending_zombies_are_read_from_the_database(
    scrape, make_endpoint
) -> None:
    endpoint = make_endpoint()
    now = timezone.now()
    _run(endpoint, status=RunStatus.RUNNING, lease_expires_at=now + timedelta(minutes=5))
    _run(
        endpoint,
        status=RunStatus.RUNNING,
        scheduled_for=now - timedelta(hours=1),
        lease_expires_at=now - timedelta(minutes=1),
    )
    _run(endpoint, status=RunStatus.SUCCESS, scheduled_for=now - timedelta(hours=2))
    samples = scrape()
    assert samples[("cronicorn_runs_in_flight", ())] == 2
    assert samples[("cronicorn_zombie_runs_pending", ())] == 1


def test_due_backlog_counts_only_endpoints_a_tick_could_claim_now(
    scrape, make_endpoint, tenant: Tenant
) -> None:
    now = timezone.now()
    past = now - timedelta(seconds=5)
    make_endpoint(next_run_at=past)
    make_endpoint(next_run_at=past)
    make_endpoint(next_run_at=now + timedelta(minutes=1))
    pause_endpoint(make_endpoint(next_run_at=past), now=now, until=now + timedelta(hours=1))
    archive_endpoint(make_endpoint(next_run_at=past), now=now)
    leased = make_endpoint(next_run_at=past)
    Slot.objects.filter(pk=leased.pk).update(
        claim_token="00000000-0000-0000-0000-000000000001", locked_until=now + timedelta(minutes=1)
    )
    paused_job = Job.objects.create(tenant=tenant, name="paused", status=JobStatus.PAUSED)
    make_endpoint(job=paused_job, next_run_at=past)
    assert scrape()[("cronicorn_due_backlog", ())] == 2


def test_last_tick_age_is_reported_once_a_tick_has_run(scrape) -> None:
    assert ("cronicorn_last_tick_age_seconds", ()) not in scrape()
    Heartbeat.beat("tick", now=timezone.now() - timedelta(seconds=12))
    age = scrape()[("cronicorn_last_tick_age_seconds", ())]
    assert 12 <= age < 60


def test_planner_tokens_are_summed_per_tenant_for_this_month_only(
    scrape, make_endpoint, tenant: Tenant
) -> None:
    endpoint = make_endpoint()
    now = timezone.now()
    month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    for started, tokens in [(now, 100), (month_start, 50), (month_start - timedelta(seconds=1), 7)]:
        AnalysisSession.objects.create(
            endpoint=endpoint, backend="llm", started_at=started, total_tokens=tokens
        )
    other = Tenant.objects.create(name="Globex")
    other_job = Job.objects.create(tenant=other, name="ops")
    AnalysisSession.objects.create(
        endpoint=make_endpoint(job=other_job), backend="llm", started_at=now, total_tokens=9
    )
    samples = scrape()
    assert samples[("cronicorn_planner_tokens_this_month", (("tenant", "Acme"),))] == 150
    assert samples[("cronicorn_planner_tokens_this_month", (("tenant", "Globex"),))] == 9
