"""Between two runs, against what the engine then records: the preview (REST API, and so
MCP; ``explain --next``; the admin form's) lists the runs the engine makes, and an edit
while a retry is pending keeps or ends it as a run's end would. The engine's real
functions on PostgreSQL, a real HTTP target on 127.0.0.1, the clock simulated
(time-machine)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from endpoints.engine.claiming import claim_due_endpoints
from endpoints.engine.running import execute_claim, record_outcomes, start_claims
from endpoints.models import Endpoint, HintHistory, Run, Tenant
from tests.world import endpoint_form, make_key

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("loopback_allowed")]

START = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def run_on_time_as_run(clock, endpoint: Endpoint) -> Run:
    """Run the endpoint's next slot on time, through the claim."""
    endpoint.refresh_from_db()
    at = endpoint.next_run_at
    clock.move_to(at, tick=False)
    [claim] = claim_due_endpoints(now=at, limit=10, horizon_ms=0)
    run = execute_claim(claim)
    endpoint.refresh_from_db()
    run.refresh_from_db()
    return run


def run_on_time(clock, endpoint: Endpoint) -> datetime | None:
    """Run the endpoint's next slot on time; the next run the engine records."""
    run_on_time_as_run(clock, endpoint)
    return endpoint.next_run_at


def api_preview(endpoint: Endpoint, tenant: Tenant, count: int) -> list[datetime]:
    answer = Client().get(
        f"/api/v1/endpoints/{endpoint.pk}/preview",
        {"count": count},
        headers={"Authorization": f"Bearer {make_key(tenant)}"},
    )
    assert answer.status_code == 200, answer.content
    return [datetime.fromisoformat(run["utc"]) for run in answer.json()["runs"]]


def explain_preview(endpoint: Endpoint, count: int) -> list[datetime]:
    out = io.StringIO()
    call_command("explain", str(endpoint.pk), "--next", str(count), "--json", stdout=out)
    return [datetime.fromisoformat(run["utc"]) for run in json.loads(out.getvalue())["next"]]


def test_an_interval_endpoints_preview_between_runs_lists_the_runs_the_engine_makes(
    make_endpoint, target, tenant, time_machine
):
    """An hourly endpoint ran at 12:00; at 12:10 the preview shows 13:00, 14:00, 15:00,
    the times the engine then runs it at (not 13:10, 14:10, 15:10: an hour from now)."""
    time_machine.move_to(START, tick=False)
    endpoint = make_endpoint(url=target.url("/"), baseline_interval_ms=3_600_000, next_run_at=START)
    run_on_time(time_machine, endpoint)
    time_machine.move_to(START + 10 * timedelta(minutes=1), tick=False)

    previewed = api_preview(endpoint, tenant, 3)
    explained = explain_preview(endpoint, 3)
    recorded = [endpoint.next_run_at, run_on_time(time_machine, endpoint)]
    recorded.append(run_on_time(time_machine, endpoint))

    assert recorded == [START + HOUR, START + 2 * HOUR, START + 3 * HOUR]
    assert previewed == recorded
    assert explained == recorded


def test_the_form_preview_of_an_edit_starts_where_the_save_plans_it(
    make_endpoint, target, tenant, admin_client, time_machine
):
    """Ran at 12:00 hourly; at 12:10 the interval typed as 45 min previews 12:45 first,
    where saving it plans the next run (start to start from the last run), not 12:55."""
    time_machine.move_to(START, tick=False)
    endpoint = make_endpoint(url=target.url("/"), baseline_interval_ms=3_600_000, next_run_at=START)
    run_on_time(time_machine, endpoint)
    time_machine.move_to(START + 10 * timedelta(minutes=1), tick=False)

    values = endpoint_form(
        endpoint.job, name=endpoint.name, url=endpoint.url, baseline_interval_ms="45m"
    )
    answer = admin_client.post(
        reverse("admin:endpoints_endpoint_preview", args=[endpoint.pk]), values
    )
    assert answer.status_code == 200, answer.content
    first = answer.json()["runs"][0]["utc"]
    saved = Client().patch(
        f"/api/v1/endpoints/{endpoint.pk}",
        {"baseline_interval_ms": 45 * 60_000},
        content_type="application/json",
        headers={"Authorization": f"Bearer {make_key(tenant)}"},
    )
    assert saved.status_code == 200, saved.content

    endpoint.refresh_from_db()
    assert endpoint.next_run_at == START + 45 * timedelta(minutes=1)
    assert first == "2026-11-22 12:45:00"


def test_a_policy_edit_while_a_retry_is_pending_keeps_the_retry(
    make_endpoint, target, tenant, time_machine
):
    """A daily endpoint's 12:00 slot failed (503) and its retry is due a minute later; the
    run policy edited meanwhile through the API does not put the retry off by a day, and
    the retry is still attempt 2 of that slot."""
    time_machine.move_to(START, tick=False)
    target.reply("/flaky", status=503, action=lambda: target.reply("/flaky", status=200))
    policy = {"retry_attempts": 3, "retry_delay_ms": 60_000}
    endpoint = make_endpoint(
        url=target.url("/flaky"),
        baseline_interval_ms=86_400_000,
        run_policy=policy,
        next_run_at=START,
    )
    first = run_on_time_as_run(time_machine, endpoint)
    retry_at = endpoint.next_run_at
    assert (first.status, endpoint.next_run_source) == ("failure", "retry")
    assert retry_at == START + timedelta(minutes=1)

    time_machine.move_to(START + timedelta(seconds=30), tick=False)
    edited = Client().patch(
        f"/api/v1/endpoints/{endpoint.pk}",
        {"run_policy": {**policy, "max_duration_ms": 20_000}},
        content_type="application/json",
        headers={"Authorization": f"Bearer {make_key(tenant)}"},
    )
    assert edited.status_code == 200, edited.content
    endpoint.refresh_from_db()
    assert (endpoint.next_run_at, endpoint.next_run_source) == (retry_at, "retry")

    second = run_on_time_as_run(time_machine, endpoint)
    assert (second.status, second.attempt, second.retry_of_id) == ("success", 2, first.pk)
    assert len(target.hits("/flaky")) == 2


def test_a_policy_edit_that_ends_the_retries_counts_the_slot_and_starts_a_new_one(
    make_endpoint, target, tenant, time_machine
):
    """The same failed slot, its retry pending; the policy edited to one attempt per slot
    cancels the retry: the slot counts as failed once, and the next day's run is attempt 1
    of its own slot, not attempt 2 of the failed one."""
    time_machine.move_to(START, tick=False)
    target.reply("/flaky", status=503, action=lambda: target.reply("/flaky", status=200))
    endpoint = make_endpoint(
        url=target.url("/flaky"),
        baseline_interval_ms=86_400_000,
        run_policy={"retry_attempts": 3, "retry_delay_ms": 60_000},
        next_run_at=START,
    )
    run_on_time_as_run(time_machine, endpoint)
    assert (endpoint.next_run_source, endpoint.failure_count) == ("retry", 0)

    time_machine.move_to(START + timedelta(seconds=30), tick=False)
    edited = Client().patch(
        f"/api/v1/endpoints/{endpoint.pk}",
        {"run_policy": {"retry_attempts": 1}},
        content_type="application/json",
        headers={"Authorization": f"Bearer {make_key(tenant)}"},
    )
    assert edited.status_code == 200, edited.content
    endpoint.refresh_from_db()
    assert (endpoint.next_run_at, endpoint.next_run_source) == (
        START + 24 * HOUR,
        "baseline-interval",
    )
    assert (endpoint.failure_count, endpoint.retry_attempt, endpoint.retry_of_run) == (1, 0, None)

    nextday = run_on_time_as_run(time_machine, endpoint)
    assert (nextday.status, nextday.attempt, nextday.retry_of_id) == ("success", 1, None)


@pytest.mark.parametrize("edited_on", ["endpoint", "job"])
def test_a_policy_edit_while_a_run_is_in_flight_holds_after_the_run(
    make_endpoint, target, tenant, job, time_machine, edited_on
):
    """A 10 min endpoint is mid-run when a person ends its active period a minute from now
    (through the API, on the endpoint or on its job's run policy, its endpoints'
    defaults): the run's own reschedule does not plan a run after it."""
    time_machine.move_to(START, tick=False)
    endpoint = make_endpoint(url=target.url("/"), baseline_interval_ms=600_000, next_run_at=START)
    [claim] = claim_due_endpoints(now=START, limit=10, horizon_ms=0)
    [started] = start_claims([claim])
    assert started is not None
    result = started.call_and_wait()

    path = f"endpoints/{endpoint.pk}" if edited_on == "endpoint" else f"jobs/{job.pk}"
    edited = Client().patch(
        f"/api/v1/{path}",
        {"run_policy": {"active_until": "2026-11-22T12:01:00Z"}},
        content_type="application/json",
        headers={"Authorization": f"Bearer {make_key(tenant)}"},
    )
    assert edited.status_code == 200, edited.content
    record_outcomes([started.outcome(result)])

    endpoint.refresh_from_db()
    assert (endpoint.next_run_at, endpoint.next_run_source) == (None, "ended")


def test_the_explanation_between_runs_names_the_run_the_engine_makes(
    make_endpoint, target, tenant, admin_client, time_machine
):
    """An hourly endpoint ran at 12:00; at 12:10 the API's (and so MCP's) explanation,
    ``explain`` and the admin page say the next run is at 13:00, in 50 minutes, where the
    engine has it and then runs it, not at 13:10, an hour from now."""
    time_machine.move_to(START, tick=False)
    endpoint = make_endpoint(url=target.url("/"), baseline_interval_ms=3_600_000, next_run_at=START)
    run_on_time(time_machine, endpoint)
    time_machine.move_to(START + 10 * timedelta(minutes=1), tick=False)

    answer = Client().get(
        f"/api/v1/endpoints/{endpoint.pk}", headers={"Authorization": f"Bearer {make_key(tenant)}"}
    )
    assert answer.status_code == 200, answer.content
    out = io.StringIO()
    call_command("explain", str(endpoint.pk), "--json", stdout=out)
    explained = json.loads(out.getvalue())
    page = admin_client.get(reverse("admin:endpoints_endpoint_change", args=[endpoint.pk]))

    assert endpoint.next_run_at == START + HOUR
    said = "Next run in 50 minutes at 2026-11-22 13:00:00 UTC, set by the baseline interval."
    assert answer.json()["explanation"].startswith(said)
    assert said in page.content.decode()
    assert datetime.fromisoformat(explained["next_run_at"]) == endpoint.next_run_at
    assert run_on_time(time_machine, endpoint) == START + 2 * HOUR


def test_with_a_retry_pending_the_preview_and_explanation_name_the_retry_the_engine_runs(
    make_endpoint, target, tenant, time_machine
):
    """A daily endpoint's 12:00 slot failed (503); its retry is due at 12:01. At 12:00:30
    the preview (API, ``explain --next``) and the explanation list the retry first, then
    the runs the engine records after it, not the next day's run as if nothing failed."""
    time_machine.move_to(START, tick=False)
    target.reply("/flaky", status=503, action=lambda: target.reply("/flaky", status=200))
    endpoint = make_endpoint(
        url=target.url("/flaky"),
        baseline_interval_ms=86_400_000,
        run_policy={"retry_attempts": 3, "retry_delay_ms": 60_000},
        next_run_at=START,
    )
    run_on_time_as_run(time_machine, endpoint)
    assert (endpoint.next_run_at, endpoint.next_run_source) == (
        START + timedelta(minutes=1),
        "retry",
    )
    time_machine.move_to(START + timedelta(seconds=30), tick=False)

    previewed = api_preview(endpoint, tenant, 2)
    explained = explain_preview(endpoint, 2)
    answer = Client().get(
        f"/api/v1/endpoints/{endpoint.pk}", headers={"Authorization": f"Bearer {make_key(tenant)}"}
    )
    assert answer.status_code == 200, answer.content
    retry = run_on_time_as_run(time_machine, endpoint)
    recorded = [retry.scheduled_for, endpoint.next_run_at]

    assert (retry.status, retry.attempt) == ("success", 2)
    assert previewed == recorded
    assert explained == recorded
    assert answer.json()["explanation"].startswith(
        "Next run in 30 seconds at 2026-11-22 12:01:00 UTC, set by a retry within the slot."
    )


def test_a_policy_edit_that_ends_the_retries_opens_the_breaker_the_count_reaches(
    make_endpoint, target, tenant, time_machine
):
    """A daily endpoint whose breaker opens after one failed slot: its 12:00 slot failed
    (503) with a retry pending. The policy edited at 12:00:30 to one attempt per slot
    ends the slot's retries, which counts it failed: the breaker opens then (a pause with
    its reason, a probe after the cool-down), as at a run's end, not after another
    failing call tomorrow."""
    time_machine.move_to(START, tick=False)
    target.reply("/down", status=503)
    breaker = {"breaker_failed_slots": 1, "breaker_cooldown_ms": 600_000}
    endpoint = make_endpoint(
        url=target.url("/down"),
        baseline_interval_ms=86_400_000,
        run_policy={"retry_attempts": 3, "retry_delay_ms": 60_000, **breaker},
        next_run_at=START,
    )
    run_on_time_as_run(time_machine, endpoint)
    assert (endpoint.next_run_source, endpoint.paused_until) == ("retry", None)

    edited_at = START + timedelta(seconds=30)
    time_machine.move_to(edited_at, tick=False)
    edited = Client().patch(
        f"/api/v1/endpoints/{endpoint.pk}",
        {"run_policy": {"retry_attempts": 1, **breaker}},
        content_type="application/json",
        headers={"Authorization": f"Bearer {make_key(tenant)}"},
    )
    assert edited.status_code == 200, edited.content
    endpoint.refresh_from_db()

    probe_at = edited_at + timedelta(minutes=10)
    assert endpoint.failure_count == 1
    assert (endpoint.paused_until, endpoint.next_run_at, endpoint.next_run_source) == (
        probe_at,
        probe_at,
        "paused",
    )
    assert endpoint.pause_reason.startswith("Breaker: 1 failed slot in a row (last: ")
    assert HintHistory.objects.get(endpoint=endpoint, kind="pause").paused_until == probe_at


def test_hints_and_their_clearing_are_planned_from_the_last_run_as_the_explanation_says(
    make_endpoint, target, tenant, time_machine
):
    """An hourly endpoint ran at 12:00. At 12:10 a 30 min interval hint: the next run is
    12:30, start to start from that run, where the explanation and the preview put it
    and the engine runs it. Its hint cleared at 12:40 after that run, the next run is
    13:30, an hour after it, not an hour after the clearing."""
    time_machine.move_to(START, tick=False)
    endpoint = make_endpoint(url=target.url("/"), baseline_interval_ms=3_600_000, next_run_at=START)
    run_on_time(time_machine, endpoint)
    auth = {"Authorization": f"Bearer {make_key(tenant)}"}
    base = f"/api/v1/endpoints/{endpoint.pk}"
    minute = timedelta(minutes=1)

    time_machine.move_to(START + 10 * minute, tick=False)
    hinted = Client().post(
        f"{base}/hint",
        {"interval_ms": 30 * 60_000, "ttl_ms": 3_600_000},
        content_type="application/json",
        headers=auth,
    )
    assert hinted.status_code == 200, hinted.content
    explanation = Client().get(base, headers=auth).json()["explanation"]
    previewed = api_preview(endpoint, tenant, 1)
    endpoint.refresh_from_db()
    assert endpoint.next_run_at == START + 30 * minute
    assert explanation.startswith("Next run in 20 minutes at 2026-11-22 12:30:00 UTC")
    assert previewed == [endpoint.next_run_at]
    assert run_on_time_as_run(time_machine, endpoint).scheduled_for == START + 30 * minute

    time_machine.move_to(START + 40 * minute, tick=False)
    cleared = Client().post(
        f"{base}/clear-hints", {}, content_type="application/json", headers=auth
    )
    assert cleared.status_code == 200, cleared.content
    endpoint.refresh_from_db()
    assert (endpoint.next_run_at, endpoint.next_run_source) == (
        START + 90 * minute,
        "baseline-interval",
    )


def test_the_form_preview_with_a_retry_pending_starts_with_the_retry(
    make_endpoint, target, admin_client, time_machine
):
    """A daily endpoint's 12:00 slot failed with a retry due at 12:01; its change form's
    preview at 12:00:30 starts with that retry, where the engine has the next run."""
    time_machine.move_to(START, tick=False)
    target.reply("/flaky", status=503)
    policy = '{"retry_attempts": 3, "retry_delay_ms": 60000}'
    endpoint = make_endpoint(
        url=target.url("/flaky"),
        baseline_interval_ms=86_400_000,
        run_policy=json.loads(policy),
        next_run_at=START,
    )
    run_on_time_as_run(time_machine, endpoint)
    time_machine.move_to(START + timedelta(seconds=30), tick=False)

    values = endpoint_form(
        endpoint.job,
        name=endpoint.name,
        url=endpoint.url,
        baseline_interval_ms="1d",
        run_policy=policy,
    )
    answer = admin_client.post(
        reverse("admin:endpoints_endpoint_preview", args=[endpoint.pk]), values
    )
    assert answer.status_code == 200, answer.content
    first = answer.json()["runs"][0]
    assert (first["utc"], first["source"]) == ("2026-11-22 12:01:00", "retry")
    assert (endpoint.next_run_at, endpoint.next_run_source) == (
        START + timedelta(minutes=1),
        "retry",
    )
