"""Migrations that move data: run them on rows written by the schema before."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_SLOTS = [("endpoints", "0006_run_indexes_that_pay")]
WITH_SLOTS = [("endpoints", "0007_slots")]
AT = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


@pytest.fixture
def before_slots() -> Iterator[None]:
    MigrationExecutor(connection).migrate(BEFORE_SLOTS)
    yield
    call_command("migrate", verbosity=0)  # the rest of the suite expects the latest schema


def _insert_endpoint(cursor: Any, job_id: int, name: str, **state: Any) -> int:
    columns = {
        "job_id": job_id,
        "name": name,
        "description": "",
        "url": "http://x/",
        "method": "GET",
        "headers": "{}",
        "secret_header_names": "[]",
        "timeout_ms": 4_000,
        "max_response_size_kb": 100,
        "baseline_cron": "",
        "timezone": "UTC",
        "baseline_interval_ms": 60_000,
        "ai_hint_reason": "",
        "pause_reason": "",
        "next_run_source": "",
        "failure_count": 0,
        "analyzed_failure_count": 0,
        "created_at": AT,
        "updated_at": AT,
        **state,
    }
    names = ", ".join(columns)
    marks = ", ".join(["%s"] * len(columns))
    cursor.execute(
        f"INSERT INTO endpoints_endpoint ({names}) VALUES ({marks}) RETURNING id",
        list(columns.values()),
    )
    return cursor.fetchone()[0]


def test_0007_gives_every_endpoint_a_slot_with_its_state(before_slots: None) -> None:
    token = uuid.uuid4()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO endpoints_tenant (name, max_endpoints, min_interval_ms, "
            "monthly_token_budget, hmac_secret, created_at) "
            "VALUES ('t', 10, 1000, 0, '', %s) RETURNING id",
            [AT],
        )
        tenant = cursor.fetchone()[0]
        cursor.execute(
            "INSERT INTO endpoints_job (tenant_id, name, description, status, created_at, "
            "updated_at) VALUES (%s, 'j', '', 'active', %s, %s) RETURNING id",
            [tenant, AT, AT],
        )
        job = cursor.fetchone()[0]
        leased = _insert_endpoint(
            cursor,
            job,
            "leased",
            next_run_at=AT,
            next_run_source="baseline-interval",
            claim_token=token.hex if connection.vendor == "sqlite" else token,
            locked_until=AT,
        )
        archived = _insert_endpoint(
            cursor,
            job,
            "archived",
            next_run_at=AT,
            next_run_source="baseline-interval",
            archived_at=AT,
        )

    MigrationExecutor(connection).migrate(WITH_SLOTS)

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT endpoint_id, job_id, timeout_ms, next_run_at IS NOT NULL, next_run_source, "
            "claim_token, locked_until IS NOT NULL FROM endpoints_slot ORDER BY endpoint_id"
        )
        rows = [(*row[:5], row[5] and uuid.UUID(str(row[5])), bool(row[6])) for row in cursor]
    assert rows == [
        (leased, job, 4_000, True, "baseline-interval", token, True),
        (archived, job, 4_000, False, "", None, False),  # archived: no next run
    ]


def test_0009_strips_the_password_from_urls_that_runs_recorded_before() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([("endpoints", "0008_redelivery_and_short_leases")])
    try:
        # The models as they were at 0008 (later migrations add fields these rows lack).
        old = executor.loader.project_state(("endpoints", "0008_redelivery_and_short_leases")).apps
        tenant = old.get_model("endpoints", "Tenant").objects.create(name="t")
        job = old.get_model("endpoints", "Job").objects.create(tenant=tenant, name="j")
        endpoint = old.get_model("endpoints", "Endpoint").objects.create(
            job=job, name="e", url="http://x/", baseline_interval_ms=60_000
        )
        runs = old.get_model("endpoints", "Run").objects
        for url in ("https://ops:hunter2@example.com/h", "https://example.com/a@b"):
            runs.create(
                endpoint=endpoint, trigger="test", scheduled_for=AT, started_at=AT, request_url=url
            )
        MigrationExecutor(connection).migrate([("endpoints", "0009_strip_url_passwords_from_runs")])
        urls = list(runs.order_by("pk").values_list("request_url", flat=True))
    finally:
        call_command("migrate", verbosity=0)

    assert urls == ["https://example.com/h", "https://example.com/a@b"]


def test_0021_tells_the_breakers_pauses_from_their_text_once() -> None:
    """Who paused is a field from 0021 on; the breaker's pauses before it are found by the
    words it wrote (the last time those words are read), any other pause left blank."""
    before = ("endpoints", "0020_forget_celery_results")
    executor = MigrationExecutor(connection)
    executor.migrate([before])
    try:
        old = executor.loader.project_state(before).apps
        tenant = old.get_model("endpoints", "Tenant").objects.create(name="t")
        job = old.get_model("endpoints", "Job").objects.create(tenant=tenant, name="j")
        endpoints = old.get_model("endpoints", "Endpoint").objects
        reasons = {
            "probe": "Breaker: 2 failed slots in a row (last: 503); a probe run after 1 minute",
            "held": "Breaker: a failure a person must fix (401); resume it once the cause is fixed",
            "person": "maintenance",
        }
        for name, reason in reasons.items():
            endpoints.create(
                job=job, name=name, url="http://x/", baseline_interval_ms=60_000,
                paused_until=AT, pause_reason=reason,
            )  # fmt: skip
        MigrationExecutor(connection).migrate([("endpoints", "0021_pause_source")])
        after = MigrationExecutor(connection).loader.project_state(
            ("endpoints", "0021_pause_source")
        )
        endpoint = after.apps.get_model("endpoints", "Endpoint")
        sources = dict(endpoint.objects.values_list("name", "pause_source"))
    finally:
        call_command("migrate", verbosity=0)

    assert sources == {"probe": "breaker", "held": "breaker-held", "person": ""}
