"""The planner's entry points: Celery tasks on the planner queue and ``manage.py plan``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker
from django.core.management import CommandError, call_command

from cronicorn_site.celery import app
from endpoints.models import Endpoint, Run, RunStatus
from planner.models import AnalysisSession
from planner.tasks import analyze_endpoint_task, plan_cycle_task


def _run(endpoint: Endpoint, at: datetime, body: Any) -> Run:
    return Run.objects.create(
        endpoint=endpoint,
        scheduled_for=at,
        started_at=at,
        finished_at=at,
        duration_ms=10,
        status=RunStatus.SUCCESS,
        status_code=200,
        response_body=body,
    )


def _wait_for(condition: Callable[[], bool], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the planner worker")
        time.sleep(0.05)


@pytest.fixture
def planner_worker() -> Iterator[None]:
    with app.connection_for_write() as connection:
        connection.default_channel.queue_purge("planner")
    with start_worker(
        app, queues=["planner"], pool="solo", perform_ping_check=False, shutdown_timeout=10
    ):
        yield


@pytest.mark.django_db(transaction=True)
def test_the_tasks_run_on_the_planner_queue(
    planner_worker: None, make_endpoint: Callable[..., Endpoint]
) -> None:
    recent = datetime.now().astimezone() - timedelta(minutes=1)
    first = make_endpoint(name="first")
    second = make_endpoint(name="second")
    _run(first, recent, {"status": "critical"})
    _run(second, recent, {"status": "healthy"})

    analyze_endpoint_task.delay(first.pk, "rules")
    _wait_for(lambda: AnalysisSession.objects.filter(endpoint=first).exists())
    plan_cycle_task.delay()
    _wait_for(lambda: AnalysisSession.objects.filter(endpoint=second).exists())

    first.refresh_from_db()
    assert first.ai_hint_interval_ms == 15_000  # critical: a quarter of one minute
    assert AnalysisSession.objects.filter(endpoint=first).count() == 1


def test_plan_prints_the_session(make_endpoint: Callable[..., Endpoint], now: datetime) -> None:
    endpoint = make_endpoint(name="api")
    _run(endpoint, now, {"status": "degraded"})
    out = StringIO()

    call_command("plan", "ops/api", "--backend", "rules", stdout=out)

    text = out.getvalue()
    assert "ops/api: succeeded" in text
    assert "backend:        rules" in text
    assert "status is 'degraded'" in text
    assert "propose_interval(" in text and "-> ok" in text
    assert "submit_analysis(" in text


def test_plan_json_gives_the_session_for_scripts(
    make_endpoint: Callable[..., Endpoint], now: datetime
) -> None:
    endpoint = make_endpoint(name="api")
    _run(endpoint, now, {"status": "degraded"})
    out = StringIO()

    call_command("plan", "ops/api", "--backend", "rules", "--json", stdout=out)

    shown = json.loads(out.getvalue())
    session = AnalysisSession.objects.get(endpoint=endpoint)
    assert (shown["id"], shown["endpoint"], shown["endpoint_id"]) == (
        session.pk,
        "ops/api",
        endpoint.pk,
    )
    assert (shown["backend"], shown["status"]) == ("rules", "succeeded")
    assert "status is 'degraded'" in shown["reasoning"]
    assert [call["tool"] for call in shown["tool_calls"]][-1] == "submit_analysis"
    assert shown["actions_taken"] == session.actions_taken


def test_plan_names_an_unknown_endpoint(db: None) -> None:
    with pytest.raises(CommandError, match="No endpoint 'ops/nope'"):
        call_command("plan", "ops/nope")


def test_plan_exits_with_an_error_when_the_analysis_fails(
    make_endpoint: Callable[..., Endpoint], now: datetime, settings: Any
) -> None:
    settings.CRONICORN_LLM_BASE_URL = "http://127.0.0.1:9/v1"  # nothing listens on port 9
    settings.CRONICORN_LLM_MAX_RETRIES = 0
    endpoint = make_endpoint(name="api")
    _run(endpoint, now, {"status": "healthy"})
    out = StringIO()

    with pytest.raises(CommandError, match="Could not reach the LLM API"):
        call_command("plan", str(endpoint.pk), "--backend", "llm", stdout=out)

    assert "ops/api: failed" in out.getvalue()
    assert AnalysisSession.objects.get(endpoint=endpoint).status == "failed"
