"""Which endpoints the planner analyses, when, under which lease, and what failures cost."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.db import connection

from endpoints.engine import claiming, running
from endpoints.engine.executor import NetworkPolicy
from endpoints.models import Endpoint, Heartbeat, Job, JobStatus, Run, RunStatus, Tenant
from planner import analysis
from planner.analysis import AnalysisBusy, analyze_endpoint, plan_cycle, select_for_analysis
from planner.backends import rules
from planner.models import AnalysisSession, SessionStatus


def _run(endpoint: Endpoint, at: datetime, body: Any = None, **fields: Any) -> Run:
    values: dict[str, Any] = {
        "endpoint": endpoint,
        "scheduled_for": at,
        "started_at": at,
        "finished_at": at + timedelta(milliseconds=50),
        "duration_ms": 50,
        "status": RunStatus.SUCCESS,
        "status_code": 200,
        "response_body": body if body is not None else {"status": "healthy"},
    }
    values.update(fields)
    return Run.objects.create(**values)


def _selected(now: datetime, limit: int = 100) -> set[str]:
    return {endpoint.name for endpoint in select_for_analysis(now=now, limit=limit)}


def test_an_endpoint_is_first_analysed_once_it_has_a_run(
    make_endpoint: Callable[..., Endpoint], now: datetime
) -> None:
    ran = make_endpoint(name="ran")
    make_endpoint(name="idle")
    _run(ran, now - timedelta(minutes=1))
    _run(make_endpoint(name="in-flight"), now, finished_at=None, status=RunStatus.RUNNING)

    assert _selected(now) == {"ran"}


def test_new_runs_wait_for_next_analysis_at_but_a_risen_failure_count_does_not(
    make_endpoint: Callable[..., Endpoint], now: datetime
) -> None:
    endpoint = make_endpoint(name="e")
    _run(endpoint, now - timedelta(minutes=2))
    session = analyze_endpoint(endpoint, now=now - timedelta(minutes=2))
    _run(endpoint, now - timedelta(minutes=1))

    assert session.next_analysis_at is not None and session.next_analysis_at > now
    assert _selected(now) == set()
    assert _selected(session.next_analysis_at) == {"e"}

    Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=1)
    assert _selected(now) == {"e"}


def test_without_new_runs_nothing_is_analysed_again(
    make_endpoint: Callable[..., Endpoint], now: datetime
) -> None:
    endpoint = make_endpoint(name="e")
    _run(endpoint, now - timedelta(minutes=2))
    analyze_endpoint(endpoint, now=now)

    assert _selected(now + timedelta(days=1)) == set()


def test_paused_endpoints_are_analysed_but_archived_ones_are_not(
    make_endpoint: Callable[..., Endpoint], now: datetime, tenant: Tenant
) -> None:
    paused = make_endpoint(name="paused", paused_until=now + timedelta(hours=1))
    archived = make_endpoint(name="archived", archived_at=now)
    gone_job = Job.objects.create(tenant=tenant, name="gone", status=JobStatus.ARCHIVED)
    in_gone_job = make_endpoint(job=gone_job, name="in-gone-job")
    for endpoint in (paused, archived, in_gone_job):
        _run(endpoint, now - timedelta(minutes=1))

    assert _selected(now) == {"paused"}


def test_selection_takes_turns_across_tenants_within_the_batch(
    make_endpoint: Callable[..., Endpoint], now: datetime
) -> None:
    for tenant_name, count in (("big", 10), ("mid", 2), ("small", 1)):
        tenant = Tenant.objects.create(name=tenant_name)
        job = Job.objects.create(tenant=tenant, name="j")
        for index in range(count):
            _run(make_endpoint(job=job, name=f"{tenant_name}-{index}"), now - timedelta(minutes=1))

    chosen = select_for_analysis(now=now, limit=6)

    per_tenant: dict[str, int] = {}
    for endpoint in chosen:
        per_tenant[endpoint.job.tenant.name] = per_tenant.get(endpoint.job.tenant.name, 0) + 1
    assert per_tenant == {"big": 3, "mid": 2, "small": 1}
    assert [e.job.tenant.name for e in chosen[:3]].count("big") == 1


def test_a_cycle_is_bounded_by_the_batch_size_and_beats_the_heartbeat(
    make_endpoint: Callable[..., Endpoint], now: datetime, settings: Any
) -> None:
    settings.CRONICORN_PLANNER_BATCH_SIZE = 3
    for index in range(5):
        _run(make_endpoint(name=f"e{index}"), now - timedelta(minutes=1))

    first = plan_cycle(now=now)
    second = plan_cycle(now=now + timedelta(seconds=1))

    assert len(first) == 3 and len(second) == 2
    assert {s.endpoint_id for s in first}.isdisjoint({s.endpoint_id for s in second})
    assert Heartbeat.objects.get(name="planner").at == now + timedelta(seconds=1)


def test_a_cycle_does_not_start_while_another_holds_the_cycle_lease(
    make_endpoint: Callable[..., Endpoint], now: datetime
) -> None:
    _run(make_endpoint(name="e"), now - timedelta(minutes=1))
    Heartbeat.objects.create(
        name="planner-cycle", at=now + timedelta(minutes=3), info={"owner": "other"}
    )

    assert plan_cycle(now=now) == []
    assert not AnalysisSession.objects.exists()
    assert len(plan_cycle(now=now + timedelta(minutes=3))) == 1


def test_an_endpoint_under_analysis_is_not_analysed_again(
    make_endpoint: Callable[..., Endpoint], now: datetime
) -> None:
    endpoint = make_endpoint(name="e")
    _run(endpoint, now - timedelta(minutes=1))
    lease = analysis.take_analysis_lease(endpoint.pk, now=now, backend="rules")

    assert lease is not None
    assert _selected(now) == set()
    with pytest.raises(AnalysisBusy, match="is being analysed until"):
        analyze_endpoint(endpoint, now=now)
    assert _selected(lease) == {"e"}


@pytest.mark.django_db(transaction=True)
def test_two_connections_racing_for_the_analysis_lease_have_one_winner(
    make_endpoint: Callable[..., Endpoint], now: datetime
) -> None:
    endpoint = make_endpoint(name="e")
    barrier = threading.Barrier(8)
    wins: list[datetime | None] = []

    def race() -> None:
        try:
            barrier.wait(timeout=10)
            wins.append(analysis.take_analysis_lease(endpoint.pk, now=now, backend="rules"))
        finally:
            connection.close()

    threads = [threading.Thread(target=race) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)

    assert len(wins) == 8
    assert sum(win is not None for win in wins) == 1


def test_a_planner_bug_is_recorded_and_backs_off_without_touching_the_schedule(
    make_endpoint: Callable[..., Endpoint], now: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = make_endpoint(name="e", next_run_at=now + timedelta(minutes=1))
    _run(endpoint, now - timedelta(minutes=1))

    def broken(data: Any) -> Any:
        raise RuntimeError("rule table corrupt")

    monkeypatch.setattr(rules, "decide", broken)

    [first] = plan_cycle(now=now)
    Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=3)  # failures keep rising
    retry_at = now + timedelta(minutes=5)
    skipped = plan_cycle(now=retry_at - timedelta(seconds=1))
    [second] = plan_cycle(now=retry_at)

    assert first.status == SessionStatus.FAILED
    assert "Internal planner error (RuntimeError): rule table corrupt" in first.error
    assert first.next_analysis_at == retry_at
    assert skipped == []
    assert second.next_analysis_at == retry_at + timedelta(minutes=10)
    endpoint.refresh_from_db()
    assert endpoint.next_run_at == now + timedelta(minutes=1)
    assert endpoint.ai_hint_interval_ms is None
    assert endpoint.analysis_locked_until is None


def test_the_scheduler_keeps_running_while_every_analysis_fails(
    make_endpoint: Callable[..., Endpoint],
    now: datetime,
    monkeypatch: pytest.MonkeyPatch,
    httpserver: Any,
) -> None:
    httpserver.expect_request("/ok").respond_with_json({"status": "critical"})
    endpoint = make_endpoint(name="e", url=httpserver.url_for("/ok"), next_run_at=now)
    monkeypatch.setattr(rules, "decide", lambda data: 1 / 0)
    policy = NetworkPolicy(allow_private=True)
    ran = []
    with time_machine.travel(now, tick=False) as clock:
        for minute in range(4):
            at = now + timedelta(minutes=minute)
            clock.move_to(at)
            for claim in claiming.claim_due_endpoints(now=at, limit=10, horizon_ms=0):
                ran.append(running.execute_claim(claim, policy=policy))
            plan_cycle(now=at)

    assert [run.started_at for run in ran if run] == [now + timedelta(minutes=m) for m in range(4)]
    assert AnalysisSession.objects.filter(status=SessionStatus.FAILED).count() >= 1
    endpoint.refresh_from_db()
    assert endpoint.ai_hint_interval_ms is None
