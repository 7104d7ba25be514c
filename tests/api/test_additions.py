"""What issue 22 added to the API and the commands, over a live server: unknown query
parameters refused, the document's error types, set_hint's defaults, relative one-shot
and notice, job archive and unarchive (REST and commands), alert rules, analyse-now, the
dashboard's series, source mix and top failing endpoints, and runs --status/--body with
retry_of (command and API)."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from endpoints.models import Endpoint, Job, JobStatus, Run, Tenant
from notifications.models import AlertRule, Channel, ChannelKind

pytestmark = pytest.mark.django_db(transaction=True)

JSON = {"Content-Type": "application/json"}


@pytest.fixture
def endpoint(job: Job) -> Endpoint:
    endpoint = Endpoint(
        job=job, name="orders", url="https://example.com/orders", baseline_interval_ms=60_000
    )
    endpoint.save()
    return endpoint


def add_run(endpoint: Endpoint, minutes_ago: int, **fields: Any) -> Run:
    started = timezone.now() - timedelta(minutes=minutes_ago)
    values: dict[str, Any] = {
        "endpoint": endpoint,
        "scheduled_for": started,
        "started_at": started,
        "finished_at": started + timedelta(milliseconds=50),
        "duration_ms": 50,
        "status": "success",
        "status_code": 200,
        "source": "baseline-interval",
        **fields,
    }
    return Run.objects.create(**values)


def command(name: str, *args: str) -> str:
    out = io.StringIO()
    call_command(name, *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_an_unknown_query_parameter_is_refused_naming_it(http: httpx.Client, job: Job) -> None:
    response = http.get("/jobs", params={"stauts": "paused"})
    assert response.status_code == 422
    assert response.headers["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert "stauts" in problem["errors"]
    assert "list_jobs takes cursor, limit, status" in problem["errors"]["stauts"][0]
    # The filter the caller meant exists and works.
    Job.objects.create(tenant=job.tenant, name="quiet", status=JobStatus.PAUSED)
    paused = http.get("/jobs", params={"status": "paused"}).json()["items"]
    assert [j["name"] for j in paused] == ["quiet"]


def test_the_document_says_what_is_served(http: httpx.Client) -> None:
    document = http.get("/openapi.json").json()
    hint = document["paths"]["/api/v1/endpoints/{endpoint_id}/hint"]["post"]
    # 413, 414 and 431: the web server's limits (tests/api/test_web_limits.py).
    assert set(hint["responses"]) == {
        *("200", "400", "401", "403", "404", "409", "413", "414", "422", "429", "431")
    }
    for code, response in hint["responses"].items():
        if code != "200":
            assert list(response["content"]) == ["application/problem+json"], code
            assert response["content"]["application/problem+json"]["example"]["status"] == int(code)
    assert hint["requestBody"]["content"]["application/json"]["example"]
    assert "example" in hint["responses"]["200"]["content"]["application/json"]
    jobs = document["paths"]["/api/v1/jobs"]
    assert "403" not in jobs["get"]["responses"]  # a read never needs the write scope
    limit = next(p for p in jobs["get"]["parameters"] if p["name"] == "limit")
    assert limit["schema"]["minimum"] == 1 and limit["schema"]["maximum"] == 500
    headers = [p for p in jobs["post"]["parameters"] if p["in"] == "header"]
    assert [h["name"] for h in headers] == ["Idempotency-Key"]
    schemas = document["components"]["schemas"]
    endpoint_in = schemas["EndpointIn"]
    assert len(endpoint_in["oneOf"]) == 2
    assert endpoint_in["properties"]["timeout_ms"]["maximum"] == 1_800_000
    assert schemas["JobIn"]["properties"]["max_concurrent"]["anyOf"][0]["minimum"] == 1
    assert schemas["ChannelIn"]["properties"]["kind"]["enum"] == ["email", "webhook", "apprise"]
    # A body that is not JSON: the 400 the document lists, as a problem.
    response = http.post(
        "/jobs", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert response.headers["Content-Type"] == "application/problem+json"


def test_set_hint_defaults_its_ttl_takes_a_relative_one_shot_and_says_what_it_moved(
    http: httpx.Client, endpoint: Endpoint
) -> None:
    before = timezone.now()
    interval = http.post(f"/endpoints/{endpoint.pk}/hint", json={"interval_ms": 30_000})
    assert interval.status_code == 200, interval.text
    assert interval.json()["notice"] == ""
    endpoint.refresh_from_db()
    assert endpoint.ai_hint_expires_at is not None
    assert timedelta(minutes=59) < endpoint.ai_hint_expires_at - before < timedelta(minutes=61)

    oneshot = http.post(f"/endpoints/{endpoint.pk}/hint", json={"next_run_in_ms": 600_000})
    assert oneshot.status_code == 200, oneshot.text
    notice = oneshot.json()["notice"]
    assert "The active interval hint (30000 ms) now also expires at" in notice
    endpoint.refresh_from_db()
    assert endpoint.ai_hint_next_run_at is not None
    assert timedelta(minutes=9) < endpoint.ai_hint_next_run_at - before < timedelta(minutes=11)
    assert timedelta(minutes=29) < endpoint.ai_hint_expires_at - before < timedelta(minutes=31)

    both = http.post(
        f"/endpoints/{endpoint.pk}/hint", json={"interval_ms": 30_000, "next_run_in_ms": 5}
    )
    assert both.status_code == 422
    assert "exactly one of" in both.json()["errors"]["interval_ms"][0]


def test_a_job_is_archived_and_unarchived_by_api_and_command(
    http: httpx.Client, job: Job, endpoint: Endpoint
) -> None:
    archived = http.post(f"/jobs/{job.pk}/archive")
    assert archived.status_code == 200 and archived.json()["status"] == "archived"
    assert http.post(f"/jobs/{job.pk}/archive").status_code == 200  # again: no change
    assert http.post(f"/jobs/{job.pk}/resume").status_code == 409
    assert Run.objects.count() == 0 and Endpoint.objects.filter(pk=endpoint.pk).exists()
    unarchived = http.post(f"/jobs/{job.pk}/unarchive")
    assert unarchived.json()["status"] == "paused"
    refused = http.post(f"/jobs/{job.pk}/unarchive")
    assert refused.status_code == 409 and "not archived" in refused.json()["detail"]

    out = command("archive", "--job", job.name)
    assert "archived" in out and "unarchive --job" in out
    job.refresh_from_db()
    assert job.status == JobStatus.ARCHIVED
    with pytest.raises(CommandError, match="already archived"):
        command("archive", "--job", job.name)
    assert "paused" in command("unarchive", "--job", job.name)
    job.refresh_from_db()
    assert job.status == JobStatus.PAUSED
    with pytest.raises(CommandError, match="not archived"):
        command("unarchive", "--job", job.name)


def test_alert_rules_are_listed_set_and_removed(
    http: httpx.Client, job: Job, endpoint: Endpoint
) -> None:
    assert http.get("/alert-rules").json() == []
    rule = http.post("/alert-rules", json={"job_id": job.pk, "after_failures": 2})
    assert rule.status_code == 200, rule.text
    again = http.post("/alert-rules", json={"job_id": job.pk, "stale_factor": 4})
    assert again.json()["id"] == rule.json()["id"]  # replaced, not added
    assert again.json()["after_failures"] == 3 and again.json()["stale_factor"] == 4
    override = http.post(
        "/alert-rules",
        json={"endpoint_id": endpoint.pk, "on_pause": False, "quiet_from": "22:00"},
    )
    assert override.status_code == 422  # quiet hours need both ends
    assert override.json()["errors"]
    override = http.post(
        "/alert-rules",
        json={
            "endpoint_id": endpoint.pk,
            "on_pause": False,
            "quiet_from": "22:00",
            "quiet_until": "07:00",
        },
    )
    assert override.status_code == 200, override.text
    assert len(http.get("/alert-rules").json()) == 2
    neither = http.post("/alert-rules", json={"after_failures": 2})
    assert neither.status_code == 422 and "exactly one" in neither.json()["errors"]["job_id"][0]
    removed = http.delete(f"/alert-rules/{rule.json()['id']}")
    assert removed.status_code == 200
    assert list(AlertRule.objects.values_list("endpoint_id", flat=True)) == [endpoint.pk]
    assert http.delete(f"/alert-rules/{rule.json()['id']}").status_code == 404


def test_analyze_runs_the_planner_on_one_endpoint_now(
    http: httpx.Client, endpoint: Endpoint
) -> None:
    add_run(endpoint, 1, status_code=503, status="failure", response_body={"status": "critical"})
    session = http.post(f"/endpoints/{endpoint.pk}/analyze", json={"backend": "rules"})
    assert session.status_code == 200, session.text
    body = session.json()
    assert body["endpoint_id"] == endpoint.pk and body["backend"] == "rules"
    assert body["status"] == "succeeded"
    listed = http.get(f"/endpoints/{endpoint.pk}/sessions").json()["items"]
    assert [s["id"] for s in listed] == [body["id"]]


def test_the_dashboard_has_series_source_mix_and_top_failing(
    http: httpx.Client, job: Job, endpoint: Endpoint
) -> None:
    other = Endpoint(
        job=job, name="quiet", url="https://example.com/q", baseline_interval_ms=60_000
    )
    other.save()
    for minutes in (5, 6, 7):
        add_run(endpoint, minutes, status="failure", status_code=500)
    add_run(endpoint, 65, source="ai-interval")
    add_run(other, 8, status="timeout", status_code=None)
    stats = http.get("/dashboard").json()
    assert stats["runs_last_24h"] == 5 and stats["failures_last_24h"] == 4
    assert len(stats["series"]) == 24
    assert sum(hour["runs"] for hour in stats["series"]) == 5
    assert stats["series"][-1]["failures"] + stats["series"][-2]["failures"] == 4
    assert stats["source_mix"] == {"baseline-interval": 4, "ai-interval": 1}
    top = stats["top_failing"]
    assert [(t["ref"], t["failures_last_24h"]) for t in top] == [
        (endpoint.ref, 3),
        (other.ref, 1),
    ]


def test_runs_filters_by_status_shows_bodies_and_names_the_retried_run(
    http: httpx.Client, endpoint: Endpoint
) -> None:
    failed = add_run(endpoint, 3, status="failure", status_code=503, response_body={"err": "down"})
    retry = add_run(endpoint, 2, trigger="retry", retry_of=failed, attempt=2)
    add_run(endpoint, 1)

    table = command("runs", endpoint.ref, "--status", "failure", "--body")
    assert f"{endpoint.ref}: latest 1 failure run" in table
    assert f"--- run {failed.pk} response body ---" in table and '"err": "down"' in table
    listed = json.loads(command("runs", endpoint.ref, "--json"))
    assert [item["retry_of"] for item in listed] == [None, failed.pk, None]
    assert "response_body" not in listed[0]
    with_bodies = json.loads(command("runs", endpoint.ref, "--json", "--body"))
    assert with_bodies[2]["response_body"] == {"err": "down"}
    shown = command("runs", endpoint.ref)
    assert "RETRY OF" in shown.splitlines()[1]

    api_runs = http.get(f"/endpoints/{endpoint.pk}/runs").json()["items"]
    assert [r["retry_of"] for r in api_runs] == [None, failed.pk, None]
    assert http.get(f"/runs/{retry.pk}").json()["retry_of"] == failed.pk
    assert http.get(f"/endpoints/{endpoint.pk}/runs", params={"until": "0.5"}).status_code == 422


def test_an_alert_rule_sets_reminders_and_escalation_to_a_channel_of_its_own_tenant(
    http: httpx.Client, job: Job
) -> None:
    mine = Channel.objects.create(
        tenant=job.tenant, name="oncall", kind=ChannelKind.WEBHOOK, target="https://e.com/h"
    )
    other = Tenant.objects.create(name="Other")
    theirs = Channel.objects.create(
        tenant=other, name="theirs", kind=ChannelKind.WEBHOOK, target="https://e.com/t"
    )
    rule = http.post(
        "/alert-rules",
        json={
            "job_id": job.pk,
            "remind_every_minutes": 60,
            "escalate_after_minutes": 30,
            "escalate_to_channel_id": mine.pk,
        },
    )
    assert rule.status_code == 200, rule.text
    body = rule.json()
    assert (body["remind_every_minutes"], body["escalate_after_minutes"]) == (60, 30)
    assert body["escalate_to_channel_id"] == mine.pk
    stored = AlertRule.objects.get(pk=body["id"])
    assert (stored.remind_every_minutes, stored.escalate_to_id) == (60, mine.pk)

    # Another tenant's channel reads as one that does not exist; a year is the longest.
    for value, field in (
        (
            {"escalate_after_minutes": 30, "escalate_to_channel_id": theirs.pk},
            "escalate_to_channel_id",
        ),
        ({"escalate_after_minutes": 30, "escalate_to_channel_id": 2**40}, "escalate_to_channel_id"),
        ({"remind_every_minutes": 366 * 24 * 60}, "remind_every_minutes"),
    ):
        refused = http.post("/alert-rules", json={"job_id": job.pk, **value})
        assert refused.status_code == 422, refused.text
        assert list(refused.json()["errors"]) == [
            field + ("_channel_id" if field == "escalate_to" else "")
        ]
    messages = {
        http.post(
            "/alert-rules",
            json={"job_id": job.pk, "escalate_after_minutes": 30, "escalate_to_channel_id": i},
        ).json()["errors"]["escalate_to_channel_id"][0]
        for i in (theirs.pk, 2**40)
    }
    assert len(messages) == 1  # the same words: no tenant's channel ids show through


def test_a_body_over_the_limit_is_a_413_problem_and_nothing_is_written(
    http: httpx.Client, settings: Any
) -> None:
    name = "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)
    answer = http.post("/jobs", content=json.dumps({"name": name}), headers=JSON)

    assert answer.status_code == 413, answer.text
    assert answer.headers["Content-Type"] == "application/problem+json"
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert f"over the {limit} bytes the API reads" in answer.json()["detail"]
    assert not Job.objects.exists()
