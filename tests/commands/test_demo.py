"""``manage.py demo`` and the built-in /demo/<name>/ targets it points at."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
import time_machine
from django.contrib.auth import authenticate
from django.core.management import call_command
from django.test import Client

from endpoints.models import Endpoint, Job, Tenant
from endpoints.views import QUEUE_CYCLE_SECONDS, QUEUE_PEAK, demo_response

CYCLE_START = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)  # a multiple of every demo cycle


def run_demo(*args: str) -> str:
    out = StringIO()
    call_command("demo", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.mark.django_db
def test_demo_creates_an_admin_who_can_sign_in_with_the_given_password() -> None:
    output = run_demo("--password", "correct horse")

    user = authenticate(username="admin", password="correct horse")
    assert user is not None and user.is_superuser and user.is_staff
    assert "password: correct horse" in output


@pytest.mark.django_db
def test_demo_prints_a_generated_password_that_works() -> None:
    output = run_demo()

    password = output.split("password: ")[1].split()[0]
    assert len(password) >= 12
    assert authenticate(username="admin", password=password) is not None


@pytest.mark.django_db
def test_demo_builds_a_tenant_with_the_admin_and_a_job_of_varied_endpoints() -> None:
    run_demo("--password", "pw", "--base-url", "http://demo.test:9000/")

    tenant = Tenant.objects.get(name="Demo")
    assert list(tenant.members.values_list("username", flat=True)) == ["admin"]
    endpoints = {e.name: e for e in Endpoint.objects.filter(job__tenant=tenant)}
    assert len(endpoints) == 5
    assert all(e.url.startswith("http://demo.test:9000/demo/") for e in endpoints.values())
    intervals = {e.baseline_interval_ms for e in endpoints.values()}
    assert {30_000, 60_000} <= intervals
    cron = endpoints["thresholds"]
    assert (cron.baseline_cron, cron.timezone) == ("*/2 * * * *", "Europe/Berlin")
    assert endpoints["ingest"].method == "POST" and endpoints["ingest"].body


@pytest.mark.django_db
def test_demo_makes_every_endpoint_due_at_once() -> None:
    """A newcomer sees runs as soon as the scheduler is up, not after the first interval
    (after that run, the governor plans each like any endpoint)."""
    with time_machine.travel(CYCLE_START, tick=False):
        run_demo("--password", "pw")

    endpoints = Endpoint.objects.all()
    assert {(e.next_run_at, e.next_run_source) for e in endpoints} == {(CYCLE_START, "manual")}


@pytest.mark.django_db
def test_running_demo_again_refreshes_instead_of_duplicating() -> None:
    run_demo("--password", "first")
    Endpoint.objects.filter(name="health").update(url="http://elsewhere.test/x", archived_at=None)
    Job.objects.filter(name="demo").update(status="paused")

    run_demo("--password", "second")

    assert Tenant.objects.count() == 1 and Job.objects.count() == 1
    assert Endpoint.objects.count() == 5
    assert Endpoint.objects.get(name="health").url.endswith("/demo/health/")
    assert Job.objects.get(name="demo").status == "active"
    assert authenticate(username="admin", password="second") is not None
    assert authenticate(username="admin", password="first") is None


def test_the_queue_fills_then_drains_over_its_cycle() -> None:
    depths = [
        demo_response("queue", CYCLE_START + timedelta(seconds=s)).body["queue_depth"]
        for s in range(0, QUEUE_CYCLE_SECONDS, 30)
    ]

    peak = depths.index(max(depths))
    assert depths[0] == 0 and max(depths) == QUEUE_PEAK
    assert depths[: peak + 1] == sorted(depths[: peak + 1])
    assert depths[peak:] == sorted(depths[peak:], reverse=True)


def test_health_moves_through_healthy_degraded_and_critical() -> None:
    bodies = [
        demo_response("health", CYCLE_START + timedelta(seconds=s)).body
        for s in range(0, QUEUE_CYCLE_SECONDS, 10)
    ]

    assert {b["status"] for b in bodies} == {"healthy", "degraded", "critical"}
    worst = max(bodies, key=lambda b: b["error_rate_pct"])  # type: ignore[arg-type,return-value]
    assert worst["status"] == "critical"


def test_the_gauge_crosses_its_warning_and_critical_thresholds() -> None:
    values = [
        demo_response("thresholds", CYCLE_START + timedelta(seconds=s)).body["current_value"]
        for s in range(0, 420, 15)
    ]
    first = demo_response("thresholds", CYCLE_START).body

    assert min(values) < first["warning_threshold"] < first["critical_threshold"] < max(values)  # type: ignore[operator]


def test_the_rate_limited_target_sends_429_with_retry_after_now_and_then() -> None:
    answers = [
        demo_response("rate-limited", CYCLE_START + timedelta(seconds=s)) for s in range(0, 300, 10)
    ]

    limited = [a for a in answers if a.status == 429]
    assert 0 < len(limited) < len(answers)
    assert all(int(a.headers["Retry-After"]) > 0 for a in limited)


def test_demo_answers_are_a_function_of_time_only() -> None:
    at = CYCLE_START + timedelta(seconds=123)

    assert demo_response("health", at) == demo_response("health", at)
    assert demo_response("health", at) != demo_response("health", at + timedelta(seconds=90))


def test_the_demo_view_serves_json_over_http_including_posts_without_csrf() -> None:
    client = Client(enforce_csrf_checks=True)
    with time_machine.travel(CYCLE_START + timedelta(seconds=10), tick=False):
        got = client.get("/demo/queue/")
        posted = client.post("/demo/ingest/", {"batch": "x"}, content_type="application/json")
        limited = client.get("/demo/rate-limited/")

    assert got.status_code == 200 and got.json()["queue_depth"] > 0
    assert posted.status_code == 200 and posted.json()["accepted"] is True
    assert limited.status_code == 429 and limited["Retry-After"] == "50"


def test_an_unknown_demo_target_is_a_404_naming_the_known_ones() -> None:
    response = Client().get("/demo/nope/")

    assert response.status_code == 404
    assert "queue" in response.json()["error"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("allow_private", "allowlist", "warned"),
    [(False, [], True), (False, ["127.0.0.1/32"], False), (True, [], False)],
    ids=["refused", "allowlisted", "private-allowed"],
)
def test_demo_warns_only_when_the_outbound_guard_would_refuse_its_targets(
    settings: Any, allow_private: bool, allowlist: list[str], warned: bool
) -> None:
    settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = allow_private
    settings.CRONICORN_SSRF_ALLOWLIST = allowlist
    err = StringIO()
    call_command("demo", "--base-url", "http://127.0.0.1:8000", stdout=StringIO(), stderr=err)
    assert ("will refuse the demo's endpoints" in err.getvalue()) is warned
    if warned:
        assert "127.0.0.1 is a loopback address" in err.getvalue()
