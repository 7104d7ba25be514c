"""The REST API's operations over a real HTTP server: what each one does to the
endpoint, through the same validation and scheduling functions as the admin."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import httpx
import psycopg
import pytest
from django.db import connection
from django.db.models import Model
from django.utils import timezone

from endpoints.engine.claiming import claim_due_endpoints
from endpoints.engine.running import start_claims
from endpoints.models import Endpoint, HintHistory, Job, Run, RunStatus, Slot, Source, Tenant
from endpoints.secrets import MASK
from notifications.alerts import notify_cycle
from notifications.models import (
    Alert,
    AlertState,
    Channel,
    ChannelKind,
    Delivery,
    DeliveryAttempt,
    DeliveryStatus,
)
from planner.analysis import analyze_endpoint
from planner.models import AnalysisSession, Backend, SessionStatus
from tests.engine_processes import wait_until
from tests.http_targets import TargetServer

pytestmark = pytest.mark.django_db(transaction=True)


def new_endpoint(job: Job, **fields: Any) -> dict[str, Any]:
    return {
        "job_id": job.pk,
        "name": "orders",
        "url": "https://example.com/orders",
        "baseline_interval_ms": 60_000,
        **fields,
    }


def created(http: httpx.Client, job: Job, **fields: Any) -> dict[str, Any]:
    response = http.post("/endpoints", json=new_endpoint(job, **fields))
    assert response.status_code == 201, response.text
    return dict(response.json())


def test_creating_an_endpoint_plans_it_and_get_explains_the_next_run(
    http: httpx.Client, job: Job
) -> None:
    body = created(http, job)
    assert body["next_run_source"] == "baseline-interval"
    endpoint = Endpoint.objects.get(pk=body["id"])
    assert endpoint.next_run_at is not None
    detail = http.get(f"/endpoints/{endpoint.pk}").json()
    assert detail["next_run_at"] is not None
    assert "baseline" in detail["explanation"].lower()


def test_secret_headers_are_masked_and_a_masked_value_sent_back_keeps_the_secret(
    http: httpx.Client, job: Job
) -> None:
    body = created(http, job, headers={"Authorization": "Bearer s3cret", "X-Team": "ops"})
    assert body["headers"] == {"Authorization": MASK, "X-Team": "ops"}
    patched = http.patch(
        f"/endpoints/{body['id']}", json={"headers": {**body["headers"], "X-Team": "dev"}}
    )
    assert patched.status_code == 200, patched.text
    endpoint = Endpoint.objects.get(pk=body["id"])
    assert endpoint.headers == {"Authorization": "Bearer s3cret", "X-Team": "dev"}


def test_a_partial_update_changes_only_the_fields_given_and_replans_a_new_schedule(
    http: httpx.Client, job: Job
) -> None:
    body = created(http, job, description="before")
    http.patch(f"/endpoints/{body['id']}", json={"description": "after"}).raise_for_status()
    endpoint = Endpoint.objects.get(pk=body["id"])
    assert (endpoint.description, endpoint.baseline_interval_ms) == ("after", 60_000)
    replanned = http.patch(
        f"/endpoints/{body['id']}", json={"baseline_interval_ms": None, "baseline_cron": "@daily"}
    )
    assert replanned.status_code == 200, replanned.text
    assert replanned.json()["next_run_source"] == "baseline-cron"


def test_pause_for_a_while_resume_hint_clear_reset_and_archive(
    http: httpx.Client, job: Job
) -> None:
    endpoint_id = created(http, job)["id"]
    base = f"/endpoints/{endpoint_id}"
    paused = http.post(f"{base}/pause", json={"for_ms": 3_600_000, "reason": "deploy"}).json()
    assert paused["paused_until"] is not None and paused["pause_reason"] == "deploy"
    assert paused["next_run_source"] == "paused"
    assert http.post(f"{base}/resume").json()["paused_until"] is None
    hinted = http.post(f"{base}/hint", json={"interval_ms": 5_000, "ttl_ms": 600_000}).json()
    assert hinted["ai_hint_interval_ms"] == 5_000
    one_shot = (timezone.now() + timedelta(minutes=3)).isoformat()
    http.post(f"{base}/hint", json={"next_run_at": one_shot, "ttl_ms": 600_000})
    assert http.post(f"{base}/clear-hints", json={}).json()["ai_hint_expires_at"] is None
    Endpoint.objects.filter(pk=endpoint_id).update(failure_count=3)
    assert http.post(f"{base}/reset-failures").json()["failure_count"] == 0
    kinds = list(
        HintHistory.objects.filter(endpoint_id=endpoint_id)
        .order_by("created_at")
        .values_list("kind", flat=True)
    )
    assert kinds == ["pause", "resume", "interval", "oneshot", "clear"]
    hints = http.get(f"{base}/hints").json()["items"]
    assert [h["kind"] for h in hints] == list(reversed(kinds))
    assert http.get(f"/hints/{hints[0]['id']}").json()["kind"] == "clear"
    archived = http.post(f"{base}/archive").json()
    assert archived["archived_at"] is not None and archived["next_run_at"] is None
    refused = http.post(f"{base}/run")
    assert refused.status_code == 409
    assert "archived" in refused.json()["detail"]


def test_pause_needs_exactly_one_of_until_or_for(http: httpx.Client, job: Job) -> None:
    endpoint_id = created(http, job)["id"]
    response = http.post(f"/endpoints/{endpoint_id}/pause", json={})
    assert response.status_code == 422
    assert "until" in response.json()["errors"]


def test_run_now_makes_the_endpoint_due_and_test_calls_it_once(
    http: httpx.Client, job: Job, target: TargetServer, loopback_allowed: None
) -> None:
    endpoint_id = created(http, job, url=target.url("/ping"))["id"]
    tested = http.post(f"/endpoints/{endpoint_id}/test")
    assert tested.status_code == 200, tested.text
    run = tested.json()
    assert (run["trigger"], run["status"], run["status_code"]) == ("test", "success", 200)
    assert len(target.hits("/ping")) == 1
    detail = http.get(f"/runs/{run['id']}").json()
    assert detail["request_url"] == target.url("/ping")
    assert "response_body" in detail and detail["duration_ms"] is not None
    # The test was longer ago than the tenant's floor (1 s).
    Run.objects.filter(pk=run["id"]).update(started_at=timezone.now() - timedelta(seconds=2))
    due = http.post(f"/endpoints/{endpoint_id}/run")
    assert due.status_code == 202, due.text
    assert due.json()["next_run_source"] == "manual"


def test_a_second_manual_call_within_the_tenant_floor_is_refused_with_when_it_is_allowed(
    http: httpx.Client, job: Job, tenant: Tenant, target: TargetServer, loopback_allowed: None
) -> None:
    tenant.min_interval_ms = 300_000
    tenant.save(update_fields=["min_interval_ms"])
    endpoint_id = created(http, job, url=target.url("/ping"), baseline_interval_ms=600_000)["id"]

    due = http.post(f"/endpoints/{endpoint_id}/run")
    again = http.post(f"/endpoints/{endpoint_id}/run")
    tested = http.post(f"/endpoints/{endpoint_id}/test")
    job_run = http.post(f"/jobs/{job.pk}/run")

    assert due.status_code == 202, due.text
    assert again.status_code == tested.status_code == 409
    for refused in (again.json()["detail"], tested.json()["detail"], job_run.json()["detail"]):
        assert "ops/orders has a manual run waiting to start (requested " in refused
        assert "tenant Acme allows one call of an endpoint every 5 minutes, by hand too" in refused
        assert re.search(r"The next manual run or test is allowed at \S+ \(in 5 minutes\)", refused)
    assert job_run.json()["detail"].startswith("0 endpoints of ops due now. Left out:")
    assert target.hits("/ping") == []


def test_jobs_are_created_listed_changed_paused_resumed_and_deleted(
    http: httpx.Client, tenant: Tenant
) -> None:
    job = http.post("/jobs", json={"name": "billing", "max_concurrent": 2})
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    assert job.json()["tenant_id"] == tenant.pk
    assert [j["name"] for j in http.get("/jobs").json()["items"]] == ["billing"]
    assert http.get(f"/jobs/{job_id}").json()["max_concurrent"] == 2
    changed = http.patch(f"/jobs/{job_id}", json={"description": "invoices"}).json()
    assert (changed["description"], changed["max_concurrent"]) == ("invoices", 2)
    assert http.post(f"/jobs/{job_id}/pause").json()["status"] == "paused"
    assert http.post(f"/jobs/{job_id}/resume").json()["status"] == "active"
    assert http.get(f"/jobs/{job_id}/runs").json() == {"items": [], "next_cursor": None}
    assert http.delete(f"/jobs/{job_id}").status_code == 200
    assert not Job.objects.filter(pk=job_id).exists()
    http.post("/jobs", json={"name": "x"}).raise_for_status()
    duplicate = http.post("/jobs", json={"name": "x"})
    assert duplicate.status_code == 422
    assert "already exists" in str(duplicate.json()["errors"])


def test_an_endpoint_is_deleted_even_when_a_run_starts_while_its_history_goes(
    http: httpx.Client, make_endpoint: Any
) -> None:
    """Deleting an endpoint deletes its runs first (a long history takes a while): a run
    the scheduler starts meanwhile goes with it, instead of failing the delete (a 500,
    nothing deleted, the endpoint still running)."""
    endpoint = make_endpoint()
    now = timezone.now()
    old = Run.objects.create(
        endpoint=endpoint, scheduled_for=now, started_at=now, status=RunStatus.SUCCESS
    )
    Slot.objects.filter(pk=endpoint.pk).update(
        next_run_at=now, next_run_source=Source.BASELINE_INTERVAL
    )
    [claim] = claim_due_endpoints(now=now, limit=1, horizon_ms=0)  # before the delete
    with _deleting_while_held(http, f"/endpoints/{endpoint.pk}", old) as answers:
        [started] = start_claims([claim])  # the scheduler records the claim's run
        assert started is not None
    assert [answer.status_code for answer in answers] == [200], answers[0].text
    assert not Endpoint.objects.filter(pk=endpoint.pk).exists()
    assert not Run.objects.filter(pk__in=[old.pk, started.run.pk]).exists()


def test_an_endpoint_is_deleted_even_when_the_planner_analyses_it_while_its_history_goes(
    http: httpx.Client, make_endpoint: Any
) -> None:
    """The planner's session of an endpoint being deleted goes with it, instead of failing
    the delete (a 500, nothing deleted)."""
    endpoint = make_endpoint()
    now = timezone.now()
    old = Run.objects.create(
        endpoint=endpoint, scheduled_for=now, started_at=now, status=RunStatus.SUCCESS
    )
    with _deleting_while_held(http, f"/endpoints/{endpoint.pk}", old) as answers:
        session = analyze_endpoint(endpoint, now=now, backend=Backend.RULES)
    assert [answer.status_code for answer in answers] == [200], answers[0].text
    assert not Endpoint.objects.filter(pk=endpoint.pk).exists()
    assert not AnalysisSession.objects.filter(pk=session.pk).exists()


def test_a_job_is_deleted_even_when_its_endpoint_alerts_while_its_history_goes(
    http: httpx.Client, make_endpoint: Any, target: TargetServer, settings: Any
) -> None:
    """What the notify cycle writes meanwhile (the alert state, the alert, its delivery
    and the attempt to send it) goes with the job, instead of failing the delete."""
    settings.CRONICORN_ALERT_DIGEST_SECONDS = 0
    settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = True
    endpoint = make_endpoint()
    hook = Channel.objects.create(
        tenant=endpoint.job.tenant, name="hook", kind=ChannelKind.WEBHOOK, target=target.url("/h")
    )
    now = timezone.now()
    old = Run.objects.create(
        endpoint=endpoint, scheduled_for=now, started_at=now, status=RunStatus.FAILURE
    )
    Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=3)
    with _deleting_while_held(http, f"/jobs/{endpoint.job_id}", old) as answers:
        told = notify_cycle(now=now, wait=10)
        assert (told.alerts, told.deliveries, told.sent) == (1, 1, 1)
    assert [answer.status_code for answer in answers] == [200], answers[0].text
    assert not Job.objects.filter(pk=endpoint.job_id).exists()
    assert not Alert.objects.exists()
    assert not AlertState.objects.exists()
    assert list(Delivery.objects.filter(channel=hook).values_list("alerts", flat=True)) == [None]


def test_a_channel_is_deleted_even_when_the_notify_cycle_sends_to_it_while_it_goes(
    http: httpx.Client, make_endpoint: Any, target: TargetServer, settings: Any
) -> None:
    """A delivery the notify cycle makes and sends to a channel being deleted goes with
    it (with its attempt), instead of failing the delete."""
    settings.CRONICORN_ALERT_DIGEST_SECONDS = 0
    settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = True
    endpoint = make_endpoint()
    hook = Channel.objects.create(
        tenant=endpoint.job.tenant, name="hook", kind=ChannelKind.WEBHOOK, target=target.url("/h")
    )
    now = timezone.now()
    sent = Delivery.objects.create(
        channel=hook,
        subject="earlier",
        body="",
        payload={},
        status=DeliveryStatus.SENT,
        next_attempt_at=now,
        created_at=now,
    )
    Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=3)
    with _deleting_while_held(http, f"/channels/{hook.pk}", sent) as answers:
        told = notify_cycle(now=now, wait=10)
        assert (told.alerts, told.deliveries, told.sent) == (1, 1, 1)
    assert [answer.status_code for answer in answers] == [200], answers[0].text
    assert not Channel.objects.filter(pk=hook.pk).exists()
    assert not Delivery.objects.exists()
    assert not DeliveryAttempt.objects.exists()
    assert len(target.hits("/h")) == 1


@contextmanager
def _deleting_while_held(http: httpx.Client, path: str, row: Model) -> Iterator[list[Any]]:
    """Delete ``path`` through the API; the block runs while the delete waits where it
    deletes ``row``'s table (another statement holds ``row``), its lists already made.
    Yields the list the answer is put in once the delete is let go, after the block."""
    db = connection.settings_dict
    holder = psycopg.connect(
        dbname=db["NAME"], user=db["USER"], host=db["HOST"], port=db["PORT"] or 5432
    )
    answers: list[httpx.Response] = []
    table = row._meta.db_table
    try:
        holder.execute(f"SELECT id FROM {table} WHERE id = %s FOR UPDATE", [row.pk])
        deleting = threading.Thread(target=lambda: answers.append(http.delete(path)), daemon=True)
        deleting.start()
        waiting = f'DELETE FROM "{table}"'
        assert wait_until(lambda: _waits_for_a_lock(holder, waiting), timeout=5)
        yield answers
        holder.rollback()
        deleting.join(timeout=10)
    finally:
        holder.close()


def _waits_for_a_lock(observer: psycopg.Connection, statement: str) -> bool:
    observer.execute("SELECT pg_stat_clear_snapshot()")  # kept per transaction otherwise
    row = observer.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND query LIKE %s AND pid <> pg_backend_pid()",
        [f"{statement}%"],
    ).fetchone()
    return bool(row and row[0])


def test_export_delete_and_recreate_through_the_api_round_trips(
    http: httpx.Client, job: Job
) -> None:
    fields = {
        "description": "the orders queue",
        "method": "POST",
        "headers": {"X-Team": "ops"},
        "secret_header_names": [],
        "body": {"depth": [1, 2, {"deep": None}]},
        "timeout_ms": 12_000,
        "max_response_size_kb": 64,
        "baseline_interval_ms": None,
        "baseline_cron": "*/5 * * * *",
        "timezone": "Europe/Berlin",
        "min_interval_ms": 60_000,
        "max_interval_ms": 3_600_000,
    }
    original = created(http, job, **fields)
    exported = http.get(f"/endpoints/{original['id']}").json()
    definition = {key: exported[key] for key in new_endpoint(job, **fields)}
    assert http.delete(f"/endpoints/{original['id']}").status_code == 200
    assert http.get(f"/endpoints/{original['id']}").status_code == 404
    recreated = http.post("/endpoints", json=definition)
    assert recreated.status_code == 201, recreated.text
    again = http.get(f"/endpoints/{recreated.json()['id']}").json()
    assert {key: again[key] for key in definition} == definition
    assert again["next_run_at"] is not None


def test_an_idempotency_key_makes_a_retried_create_or_run_now_happen_once(
    http: httpx.Client, job: Job
) -> None:
    headers = {"Idempotency-Key": "create-orders-1"}
    first = http.post("/endpoints", json=new_endpoint(job), headers=headers)
    again = http.post("/endpoints", json=new_endpoint(job), headers=headers)
    assert (first.status_code, again.status_code) == (201, 201)
    assert first.json() == again.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert Endpoint.objects.filter(job=job).count() == 1
    other = http.post("/endpoints", json=new_endpoint(job, name="other"), headers=headers)
    assert other.status_code == 422
    assert "different request" in other.json()["detail"]
    run_key = {"Idempotency-Key": "run-1"}
    url = f"/endpoints/{first.json()['id']}/run"
    assert http.post(url, headers=run_key).status_code == 202
    assert http.post(url, headers=run_key).status_code == 202  # replayed, not "already due"


def test_a_failed_request_does_not_use_up_its_idempotency_key(http: httpx.Client, job: Job) -> None:
    headers = {"Idempotency-Key": "k"}
    bad = http.post("/endpoints", json=new_endpoint(job, url="ftp://x"), headers=headers)
    assert bad.status_code == 422
    assert http.post("/endpoints", json=new_endpoint(job), headers=headers).status_code == 201
    too_long = http.post(
        "/endpoints", json=new_endpoint(job), headers={"Idempotency-Key": "k" * 201}
    )
    assert too_long.status_code == 422 and "at most 200" in too_long.json()["detail"]


def test_requests_over_the_rate_limit_get_429_with_retry_after(
    http: httpx.Client, settings: Any
) -> None:
    settings.CRONICORN_API_RATE = "5/m"
    statuses = [http.get("/jobs").status_code for _ in range(7)]
    assert statuses[:5] == [200] * 5
    assert statuses[5:] == [429, 429]
    limited = http.get("/jobs")
    assert limited.headers["Content-Type"] == "application/problem+json"
    assert int(limited.headers["Retry-After"]) > 0


def test_health_dashboard_and_tenant_count_the_keys_tenant(
    http: httpx.Client, job: Job, tenant: Tenant
) -> None:
    endpoint_id = created(http, job)["id"]
    health = http.get(f"/endpoints/{endpoint_id}/health").json()
    assert [w["window"] for w in health["windows"]] == ["1h", "24h", "7d"]
    assert health["windows"][0]["runs"] == 0 and health["windows"][0]["success_rate"] is None
    assert "due_backlog" in http.get("/health/scheduler").json()
    assert http.get("/dashboard").json()["endpoints"] == 1
    me = http.get(f"/tenants/{tenant.pk}").json()
    assert (me["name"], me["endpoints_used"], me["signs_requests"]) == ("Acme", 1, False)
    assert [t["id"] for t in http.get("/tenants").json()] == [tenant.pk]
    assert http.get(f"/endpoints/{endpoint_id}/sessions").json()["items"] == []


def test_the_tenant_shows_tokens_spent_and_reserved_by_analyses_running_now(
    http: httpx.Client, job: Job, tenant: Tenant
) -> None:
    endpoint = Endpoint.objects.get(pk=created(http, job)["id"])
    now = timezone.now()
    session = dict(endpoint=endpoint, backend=Backend.LLM, started_at=now)
    AnalysisSession.objects.create(**session, status=SessionStatus.SUCCEEDED, total_tokens=700)
    AnalysisSession.objects.create(  # running: 1 000 spent of the 50 000 it reserved
        **session,
        total_tokens=1_000,
        reserved_tokens=50_000,
        reserved_until=now + timedelta(minutes=5),
    )
    AnalysisSession.objects.create(  # its process died: the reservation lapsed
        **session,
        total_tokens=300,
        reserved_tokens=50_000,
        reserved_until=now - timedelta(seconds=1),
    )
    me = http.get(f"/tenants/{tenant.pk}").json()
    assert (me["tokens_used_this_month"], me["tokens_reserved_now"]) == (2_000, 49_000)
