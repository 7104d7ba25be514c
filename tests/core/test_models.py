"""Invalid configurations are refused twice: by ``full_clean`` with a message a person can
act on (naming the field), and by a named database constraint when written around it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from endpoints.models import Endpoint, Job, Run, Slot, Tenant

pytestmark = pytest.mark.django_db

MakeEndpoint = Callable[..., Endpoint]
SOON = datetime(2026, 11, 22, 13, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Bad:
    """Fields that make a valid endpoint invalid, the field blamed and words of the message.

    ``constraint`` names the database constraint that refuses the same fields written with
    a raw ``update()`` (``None``: only ``full_clean`` guards this one).
    """

    fields: dict[str, Any]
    blamed: str
    fragment: str
    constraint: str | None = field(default=None)


def bad(name: str, fields: dict[str, Any], blamed: str, fragment: str, *, db: str | None) -> Any:
    return pytest.param(Bad(fields, blamed, fragment, db), id=name)


INVALID_ENDPOINTS = [
    bad(
        "both-cron-and-interval",
        {"baseline_cron": "*/5 * * * *", "baseline_interval_ms": 60_000},
        "baseline_cron",
        "either a cron expression or an interval, not both",
        db="endpoints_endpoint_exactly_one_schedule",
    ),
    bad(
        "neither-cron-nor-interval",
        {"baseline_cron": "", "baseline_interval_ms": None},
        "baseline_interval_ms",
        "Give a schedule: a cron expression or an interval",
        db="endpoints_endpoint_exactly_one_schedule",
    ),
    bad(
        "interval-999-ms",
        {"baseline_interval_ms": 999},
        "baseline_interval_ms",
        "at least 1 s (1000 ms); got 999 ms",
        db="endpoints_endpoint_interval_at_least_1s",
    ),
    bad(
        "interval-zero",
        {"baseline_interval_ms": 0},
        "baseline_interval_ms",
        "at least 1 s",
        db="endpoints_endpoint_interval_at_least_1s",
    ),
    bad(
        "interval-negative",
        {"baseline_interval_ms": -60_000},
        "baseline_interval_ms",
        "at least 1 s",
        db="endpoints_endpoint_interval_at_least_1s",
    ),
    bad(
        "cron-with-6-fields",
        {"baseline_cron": "0 */5 * * * *", "baseline_interval_ms": None},
        "baseline_cron",
        "has 6 fields; cron needs 5",
        db=None,
    ),
    bad(
        "cron-minute-61",
        {"baseline_cron": "61 * * * *", "baseline_interval_ms": None},
        "baseline_cron",
        "Bad minute",
        db=None,
    ),
    bad(
        "cron-february-30-never-fires",
        {"baseline_cron": "0 0 30 2 *", "baseline_interval_ms": None},
        "baseline_cron",
        "Bad day-of-month",
        db=None,
    ),
    bad(
        "cron-unknown-shorthand",
        {"baseline_cron": "@fortnightly", "baseline_interval_ms": None},
        "baseline_cron",
        "unknown shorthand; use one of",
        db=None,
    ),
    bad(
        "cron-garbage",
        {"baseline_cron": "every day at noon", "baseline_interval_ms": None},
        "baseline_cron",
        "cron needs 5: minute hour day-of-month month day-of-week",
        db=None,
    ),
    bad(
        "time-zone-unknown",
        {"timezone": "Mars/Olympus"},
        "timezone",
        "is not an IANA time zone; use a name like UTC",
        db=None,
    ),
    bad(
        "timeout-999-ms",
        {"timeout_ms": 999},
        "timeout_ms",
        "between 1 s and 30 min (1000..1800000 ms); got 999",
        db="endpoints_endpoint_timeout_range",
    ),
    bad(
        "timeout-1800001-ms",
        {"timeout_ms": 1_800_001},
        "timeout_ms",
        "got 1800001",
        db="endpoints_endpoint_timeout_range",
    ),
    bad(
        "response-size-0-kb",
        {"max_response_size_kb": 0},
        "max_response_size_kb",
        "must be 1..10000 KB; got 0",
        db="endpoints_endpoint_response_size_range",
    ),
    bad(
        "response-size-10001-kb",
        {"max_response_size_kb": 10_001},
        "max_response_size_kb",
        "got 10001",
        db="endpoints_endpoint_response_size_range",
    ),
    bad(
        "min-above-max",
        {"min_interval_ms": 120_000, "max_interval_ms": 60_000},
        "min_interval_ms",
        "lower the minimum or raise the maximum",
        db="endpoints_endpoint_min_le_max",
    ),
    bad(
        "negative-min",
        {"min_interval_ms": -1},
        "min_interval_ms",
        "cannot be negative",
        db="endpoints_endpoint_min_interval_not_negative",
    ),
    bad(
        "negative-max",
        {"max_interval_ms": -1},
        "max_interval_ms",
        "cannot be negative",
        db="endpoints_endpoint_max_interval_not_negative",
    ),
    bad(
        "method-fetch",
        {"method": "FETCH"},
        "method",
        "'FETCH' is not a valid choice",
        db="endpoints_endpoint_method_valid",
    ),
    bad(
        "url-ftp",
        {"url": "ftp://example.com/file"},
        "url",
        "Only http:// and https:// URLs",
        db=None,
    ),
    bad(
        "url-bad-port",
        {"url": "http://example.com:99999/"},
        "url",
        "Port out of range",
        db=None,
    ),
    bad(
        "url-not-a-url",
        {"url": "not a url"},
        "url",
        "Enter a valid URL",
        db=None,
    ),
    bad(
        "headers-not-an-object",
        {"headers": ["X-Key: v"]},
        "headers",
        "object of names to string values",
        db=None,
    ),
    bad(
        "header-value-not-a-string",
        {"headers": {"X-Retry": 3}},
        "headers",
        "object of names to string values",
        db=None,
    ),
    bad(
        "secret-header-names-not-a-list",
        {"secret_header_names": "Authorization"},
        "secret_header_names",
        "list of strings",
        db=None,
    ),
    bad(
        "hint-interval-below-1-s",
        {"ai_hint_interval_ms": 500, "ai_hint_expires_at": SOON},
        "ai_hint_interval_ms",
        "at least 1 s (1000 ms)",
        db="endpoints_endpoint_hint_interval_at_least_1s",
    ),
    bad(
        "interval-hint-without-expiry",
        {"ai_hint_interval_ms": 30_000},
        "ai_hint_expires_at",
        "A hint needs an expiry time",
        db="endpoints_endpoint_hint_has_expiry",
    ),
    bad(
        "one-shot-hint-without-expiry",
        {"ai_hint_next_run_at": SOON},
        "ai_hint_expires_at",
        "A hint needs an expiry time",
        db="endpoints_endpoint_hint_has_expiry",
    ),
    bad(
        "negative-failure-count",
        {"failure_count": -1},
        "failure_count",
        "greater than or equal to 0",
        db="failure_count",
    ),
    bad(
        "empty-url",
        {"url": ""},
        "url",
        "cannot be blank",
        db=None,
    ),
]


def rejected(instance: Any) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        instance.full_clean()
    return caught.value.message_dict


def unique(name: str) -> str:
    """PostgreSQL names the violated unique constraint; SQLite names only the columns."""
    return rf"endpoints_{name}|UNIQUE constraint failed"


def assert_db_refuses(queryset: Any, constraint: str, **fields: Any) -> None:
    with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
        queryset.update(**fields)


@pytest.mark.parametrize("case", INVALID_ENDPOINTS)
def test_full_clean_refuses_an_invalid_endpoint_naming_the_field(
    make_endpoint: MakeEndpoint, case: Bad
) -> None:
    endpoint = make_endpoint()
    for name, value in case.fields.items():
        setattr(endpoint, name, value)
    errors = rejected(endpoint)
    assert case.blamed in errors, errors
    assert any(case.fragment in message for message in errors[case.blamed]), errors


@pytest.mark.parametrize(
    "case", [param for param in INVALID_ENDPOINTS if param.values[0].constraint is not None]
)
def test_the_database_refuses_the_same_endpoint_written_around_full_clean(
    make_endpoint: MakeEndpoint, case: Bad
) -> None:
    endpoint = make_endpoint()
    queryset = Endpoint.objects.filter(pk=endpoint.pk)
    assert_db_refuses(queryset, case.constraint or "", **case.fields)
    endpoint.refresh_from_db()
    endpoint.full_clean()  # nothing was written


def test_a_tenant_quota_raises_the_shortest_interval(make_endpoint: MakeEndpoint) -> None:
    endpoint = make_endpoint()
    Tenant.objects.filter(pk=endpoint.job.tenant_id).update(min_interval_ms=60_000)
    endpoint = Endpoint.objects.select_related("job__tenant").get(pk=endpoint.pk)
    endpoint.baseline_interval_ms = 30_000
    errors = rejected(endpoint)
    assert "This tenant's plan allows intervals of at least 60000 ms" in " ".join(
        errors["baseline_interval_ms"]
    )


def test_a_tenant_minimum_below_1_s_is_refused(tenant: Tenant) -> None:
    tenant.min_interval_ms = 500
    assert "min_interval_ms" in rejected(tenant)
    assert_db_refuses(
        Tenant.objects.filter(pk=tenant.pk),
        "endpoints_tenant_min_interval_at_least_1s",
        min_interval_ms=500,
    )


def test_a_duplicate_name_in_a_job_is_refused(make_endpoint: MakeEndpoint) -> None:
    first, second = make_endpoint(name="health"), make_endpoint(name="queue")
    second.name = "health"
    errors = rejected(second)
    assert "already has an endpoint named 'health'" in " ".join(errors["name"])
    assert_db_refuses(
        Endpoint.objects.filter(pk=second.pk), unique("endpoint_unique_name"), name=first.name
    )


def test_the_same_name_in_another_job_is_fine(make_endpoint: MakeEndpoint, tenant: Tenant) -> None:
    make_endpoint(name="health")
    other = Job.objects.create(tenant=tenant, name="billing")
    make_endpoint(name="health", job=other)


def test_a_half_set_lease_or_an_unknown_source_is_refused_by_the_database(
    make_endpoint: MakeEndpoint,
) -> None:
    endpoint = make_endpoint()
    queryset = Slot.objects.filter(pk=endpoint.pk)
    assert_db_refuses(queryset, "endpoints_slot_lease_complete", claim_token=uuid.uuid4())
    assert_db_refuses(queryset, "endpoints_slot_lease_complete", locked_until=SOON)
    assert_db_refuses(queryset, "endpoints_slot_source_valid", next_run_source="whenever")
    queryset.update(claim_token=uuid.uuid4(), locked_until=SOON)  # a whole lease is fine


def test_every_endpoint_has_a_slot_that_follows_its_job(
    make_endpoint: MakeEndpoint, job: Job, tenant: Tenant
) -> None:
    """The claim reads only slots, so their copy of the job must never lag."""
    made = make_endpoint(next_run_at=SOON)
    bulk = Endpoint.objects.bulk_create(
        [
            Endpoint(job=job, name=f"bulk-{k}", url="http://x/", baseline_interval_ms=60_000)
            for k in range(3)
        ]
    )
    other = Job.objects.create(tenant=tenant, name="other")

    made.job = other
    made.save(update_fields=["job"])
    bulk[0].job = other
    bulk[0].save()

    slots = {slot.pk: slot for slot in Slot.objects.all()}
    assert set(slots) == {made.pk, *(e.pk for e in bulk)}
    assert slots[made.pk].job_id == other.pk
    assert slots[made.pk].next_run_at == SOON  # kept: the save named no slot field
    assert slots[bulk[0].pk].job_id == other.pk
    assert slots[bulk[1].pk].job_id == job.pk
    made.delete()
    assert not Slot.objects.filter(pk=made.pk).exists()


@pytest.mark.parametrize("value", [0], ids=["zero"])
def test_a_job_max_concurrent_below_1_is_refused(job: Job, value: int) -> None:
    job.max_concurrent = value
    errors = rejected(job)
    assert "at least 1" in " ".join(errors["max_concurrent"])
    assert_db_refuses(
        Job.objects.filter(pk=job.pk), "endpoints_job_max_concurrent_positive", max_concurrent=value
    )


def test_a_job_status_outside_the_choices_is_refused(job: Job) -> None:
    job.status = "sleeping"
    assert "'sleeping' is not a valid choice" in " ".join(rejected(job)["status"])
    assert_db_refuses(
        Job.objects.filter(pk=job.pk), "endpoints_job_status_valid", status="sleeping"
    )


def test_a_duplicate_job_name_in_a_tenant_is_refused(job: Job) -> None:
    twin = Job(tenant=job.tenant, name=job.name)
    assert "already exists" in " ".join(rejected(twin)["__all__"])
    with pytest.raises(IntegrityError, match=unique("job_unique_name")), transaction.atomic():
        Job.objects.create(tenant=job.tenant, name=job.name)


@pytest.fixture
def run(make_endpoint: MakeEndpoint, now: datetime) -> Run:
    return Run.objects.create(endpoint=make_endpoint(), scheduled_for=now, started_at=now)


@pytest.mark.parametrize(
    ("blamed", "value", "fragment", "constraint"),
    [
        ("status", "exploded", "'exploded' is not a valid choice", "endpoints_run_status_valid"),
        ("trigger", "cosmic", "'cosmic' is not a valid choice", "endpoints_run_trigger_valid"),
        ("attempt", 0, "at least 1", "endpoints_run_attempt_positive"),
    ],
    ids=["status", "trigger", "attempt"],
)
def test_a_run_with_an_invalid_value_is_refused(
    run: Run, blamed: str, value: Any, fragment: str, constraint: str
) -> None:
    setattr(run, blamed, value)
    errors = rejected(run)
    assert fragment in " ".join(errors[blamed]), errors
    assert_db_refuses(Run.objects.filter(pk=run.pk), constraint, **{blamed: value})


def test_a_second_scheduled_run_for_the_same_slot_is_refused(run: Run) -> None:
    twin = Run(endpoint=run.endpoint, scheduled_for=run.scheduled_for, started_at=run.started_at)
    errors = rejected(twin)
    assert "already has a scheduled run for this slot" in " ".join(errors["scheduled_for"])
    with pytest.raises(IntegrityError, match=unique("run_one_per_slot")), transaction.atomic():
        Run.objects.create(
            endpoint=run.endpoint, scheduled_for=run.scheduled_for, started_at=run.started_at
        )


@pytest.mark.parametrize("trigger", ["manual", "test", "retry"])
def test_other_triggers_may_share_a_slot(run: Run, trigger: str) -> None:
    twin = Run(
        endpoint=run.endpoint,
        scheduled_for=run.scheduled_for,
        started_at=run.started_at + timedelta(seconds=1),
        trigger=trigger,
    )
    twin.full_clean()
    twin.save()


@pytest.mark.parametrize(
    "fields",
    [
        {"timeout_ms": 1_000},
        {"timeout_ms": 1_800_000},
        {"max_response_size_kb": 1},
        {"max_response_size_kb": 10_000},
        {"baseline_interval_ms": 1_000},
        {"min_interval_ms": 0, "max_interval_ms": 0},
        {"min_interval_ms": 60_000, "max_interval_ms": 60_000},
        {"min_interval_ms": 120_000, "max_interval_ms": 0},
        {"ai_hint_interval_ms": 1_000, "ai_hint_expires_at": SOON},
        {"ai_hint_next_run_at": SOON, "ai_hint_expires_at": SOON},
        {"baseline_cron": "0 9 * * 1-5", "baseline_interval_ms": None, "timezone": "Asia/Kolkata"},
        {"baseline_cron": "0 0 29 2 *", "baseline_interval_ms": None},
        {"url": "https://example.com/hook?x=1", "method": "DELETE"},
        {"url": "http://web:8000/demo/queue/"},
        {"url": "http://[::1]:8080/health"},
        {"headers": {"Authorization": "Bearer x"}, "secret_header_names": ["Authorization"]},
    ],
    ids=lambda fields: ",".join(f"{k}={v}" for k, v in fields.items()),
)
def test_edge_values_inside_the_limits_are_accepted(
    make_endpoint: MakeEndpoint, fields: dict[str, Any]
) -> None:
    endpoint = make_endpoint(**fields)
    endpoint.refresh_from_db()
    for name, value in fields.items():
        assert getattr(endpoint, name) == value


@pytest.mark.parametrize(
    ("written", "stored"),
    [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        (" 0   9 * * 1-5 ", "0 9 * * 1-5"),
    ],
    ids=str,
)
def test_full_clean_stores_cron_in_five_field_form(
    make_endpoint: MakeEndpoint, written: str, stored: str
) -> None:
    endpoint = make_endpoint(baseline_cron=written)
    endpoint.refresh_from_db()
    assert endpoint.baseline_cron == stored
