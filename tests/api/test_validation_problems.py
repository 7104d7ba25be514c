"""Hostile values through the API: the same cases as the import's invalid-file tests
(tests/config_io/test_import_export.py), each a 422 application/problem+json naming the field,
never a 500, and nothing written."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from endpoints.models import Endpoint, Job, Tenant
from endpoints.secrets import MASK

pytestmark = pytest.mark.django_db(transaction=True)

NO_INTERVAL = {"baseline_interval_ms": None}
# (case, fields over a valid endpoint, field blamed, fragment of its message)
INVALID: list[tuple[str, dict[str, Any], str, str]] = [
    ("cron-out-of-range", {**NO_INTERVAL, "baseline_cron": "61 * * * *"}, "baseline_cron", "cron"),
    ("cron-four-fields", {**NO_INTERVAL, "baseline_cron": "* * * *"}, "baseline_cron", "5"),
    (
        "cron-unknown-shorthand",
        {**NO_INTERVAL, "baseline_cron": "@sometimes"},
        "baseline_cron",
        "shorthand",
    ),
    ("cron-never-fires", {**NO_INTERVAL, "baseline_cron": "0 0 30 2 *"}, "baseline_cron", "cron"),
    # A bound the document states is pydantic's own check (api/schemas.py), said as the forms
    # say it: a duration in words with its ms, a size with its unit (api/errors.py).
    (
        "interval-below-1s",
        {"baseline_interval_ms": 500},
        "baseline_interval_ms",
        "at least 1 second (1000 ms)",
    ),
    (
        "interval-zero",
        {"baseline_interval_ms": 0},
        "baseline_interval_ms",
        "at least 1 second (1000 ms)",
    ),
    (
        "interval-unknown-unit",
        {"baseline_interval_ms": "5 parsecs"},
        "baseline_interval_ms",
        "integer",
    ),
    ("interval-wrong-type", {"baseline_interval_ms": 1.5}, "baseline_interval_ms", "integer"),
    ("both-cron-and-interval", {"baseline_cron": "@hourly"}, "baseline_cron", "not both"),
    ("no-schedule", NO_INTERVAL, "baseline_interval_ms", "Give a schedule"),
    (
        "min-above-max",
        {"min_interval_ms": 600_000, "max_interval_ms": 60_000},
        "min_interval_ms",
        "above the maximum",
    ),
    ("unknown-method", {"method": "FETCH"}, "method", "GET"),
    ("non-http-url", {"url": "ftp://example.com/file"}, "url", "Only http:// and https://"),
    ("not-a-url", {"url": "example dot com"}, "url", "valid URL"),
    ("url-wrong-type", {"url": ["https://example.com"]}, "url", "string"),
    ("url-too-long", {"url": "https://e.com/" + "a" * 3000}, "url", "at most 2000"),
    (
        "timeout-too-long",
        {"timeout_ms": 2_700_000},
        "timeout_ms",
        "at most 30 minutes (1800000 ms)",
    ),
    ("timeout-too-short", {"timeout_ms": 200}, "timeout_ms", "at least 1 second (1000 ms)"),
    (
        "response-cap-zero",
        {"max_response_size_kb": 0},
        "max_response_size_kb",
        "at least 1 KB",
    ),
    ("response-cap-text", {"max_response_size_kb": "big"}, "max_response_size_kb", "integer"),
    ("response-cap-huge", {"max_response_size_kb": 10**30}, "max_response_size_kb", ""),
    (
        "bad-timezone",
        {**NO_INTERVAL, "baseline_cron": "@daily", "timezone": "Mars/Olympus"},
        "timezone",
        "IANA",
    ),
    ("headers-a-list", {"headers": ["X-Key: v"]}, "headers", "dictionary"),
    ("header-value-a-number", {"headers": {"X-Count": 5}}, "headers.X-Count", "string"),
    ("secret-names-not-strings", {"secret_header_names": [1]}, "secret_header_names.0", "string"),
    ("timeout-a-boolean", {"timeout_ms": True}, "timeout_ms", "integer"),
    ("masked-header-without-value", {"headers": {"X-Other": MASK}}, "headers", "mask"),
    ("description-a-list", {"description": ["a", "b"]}, "description", "string"),
    ("unknown-endpoint-key", {"intervall": 300_000}, "intervall", "Unknown field"),
    ("duplicate-endpoint-name", {"name": "taken"}, "name", "already has an endpoint"),
    ("empty-name", {"name": "  "}, "name", "required"),
    ("nul-in-name", {"name": "a\x00b"}, "name", "Null characters"),
    (
        "below-tenant-floor",
        {"baseline_interval_ms": 2_000},
        "baseline_interval_ms",
        "plan allows intervals of at least",
    ),
]


@pytest.fixture
def existing(job: Job, tenant: Tenant) -> Endpoint:
    Tenant.objects.filter(pk=tenant.pk).update(min_interval_ms=10_000)
    endpoint = Endpoint(job=job, name="taken", url="https://e.com/", baseline_interval_ms=60_000)
    endpoint.save()
    return endpoint


def snapshot() -> list[dict[str, Any]]:
    return list(Endpoint.objects.order_by("pk").values())


def problem(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 422, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["status"] == 422 and body["title"] == "Unprocessable Entity"
    return body


@pytest.mark.parametrize(
    ("fields", "field", "fragment"),
    [pytest.param(fields, field, fragment, id=name) for name, fields, field, fragment in INVALID],
)
def test_a_hostile_create_is_a_field_level_problem_and_writes_nothing(
    http: httpx.Client, existing: Endpoint, fields: dict[str, Any], field: str, fragment: str
) -> None:
    before = snapshot()
    values = {"job_id": existing.job_id, "name": "new", "url": "https://e.com/x"}
    values["baseline_interval_ms"] = 60_000
    response = http.post("/endpoints", json={**values, **fields})
    errors = problem(response)["errors"]
    assert field in errors, errors
    assert any(fragment in message for message in errors[field]), errors
    assert snapshot() == before


@pytest.mark.parametrize(
    ("fields", "field", "fragment"),
    [
        pytest.param(fields, field, fragment, id=name)
        for name, fields, field, fragment in INVALID
        if name not in ("duplicate-endpoint-name", "no-schedule", "empty-name")
    ],
)
def test_a_hostile_update_is_a_field_level_problem_and_changes_nothing(
    http: httpx.Client, existing: Endpoint, fields: dict[str, Any], field: str, fragment: str
) -> None:
    before = snapshot()
    response = http.patch(f"/endpoints/{existing.pk}", json=fields)
    errors = problem(response)["errors"]
    assert field in errors and any(fragment in m for m in errors[field]), errors
    assert snapshot() == before


def test_creating_past_the_tenants_endpoint_quota_is_refused(
    http: httpx.Client, existing: Endpoint, tenant: Tenant
) -> None:
    Tenant.objects.filter(pk=tenant.pk).update(max_endpoints=1)
    response = http.post(
        "/endpoints",
        json={
            "job_id": existing.job_id,
            "name": "n",
            "url": "https://e.com",
            "baseline_interval_ms": 60_000,
        },
    )
    assert (
        "would have 2 endpoints but max_endpoints is 1" in problem(response)["errors"]["job_id"][0]
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "j", "max_concurrent": 0}, "max_concurrent"),
        ({"name": ""}, "name"),
        ({"name": "j", "schedule": "5m"}, "schedule"),
        ({"name": "x" * 300}, "name"),
    ],
)
def test_a_hostile_job_is_a_field_level_problem(
    http: httpx.Client, tenant: Tenant, body: dict[str, Any], field: str
) -> None:
    assert field in problem(http.post("/jobs", json=body))["errors"]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("content", "content_type"),
    [
        (b'{"name": "x",}', "application/json"),
        (b"[1, 2]", "application/json"),
        (b"\xff\xfe", "application/json"),
        (b"name=x", "application/x-www-form-urlencoded"),
        (b"", "application/json"),
    ],
)
def test_a_malformed_body_is_a_problem_not_a_500(
    http: httpx.Client, job: Job, content: bytes, content_type: str
) -> None:
    response = http.post("/endpoints", content=content, headers={"Content-Type": content_type})
    assert 400 <= response.status_code < 500, response.text
    assert response.headers["Content-Type"] == "application/problem+json"


@pytest.mark.parametrize(
    "query",
    [
        {"cursor": "not-a-cursor"},
        {"cursor": "WzEsMl0"},
        {"limit": 0},
        {"limit": 100_000},
        {"status": "sideways"},
        {"since": "yesterday"},
    ],
)
def test_hostile_list_parameters_are_problems(
    http: httpx.Client, existing: Endpoint, query: dict[str, Any]
) -> None:
    response = http.get(f"/endpoints/{existing.pk}/runs", params=query)
    # A cursor this API did not give out is a bad request (400); a bad filter a 422.
    assert response.status_code == (400 if "cursor" in query else 422), response.text
    assert response.headers["Content-Type"] == "application/problem+json"
