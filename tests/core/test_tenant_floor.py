"""A tenant's shortest interval holds whatever the path: the model refuses a baseline,
a max or a cron that would run more often, and the governor clamps every plan to it
(hints included), over the endpoint's own max."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from endpoints.engine.claiming import claim_due_endpoints
from endpoints.engine.running import execute_claim
from endpoints.governor import EndpointSchedule, plan_next_run
from endpoints.models import Endpoint, Job, Tenant
from endpoints.operations import (
    OperationRefused,
    apply_hint,
    run_job_now,
    run_now,
    test_endpoint,
)

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
FIVE_MIN = 300_000
MS = timedelta(milliseconds=1)
S = timedelta(seconds=1)
MIN = timedelta(minutes=1)


@pytest.fixture
def floored(tenant: Tenant) -> Tenant:
    Tenant.objects.filter(pk=tenant.pk).update(min_interval_ms=FIVE_MIN)
    tenant.refresh_from_db()
    return tenant


def problems(endpoint: Endpoint) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as refused:
        endpoint.full_clean()
    return refused.value.message_dict


@pytest.mark.parametrize(
    ("fields", "blamed", "says"),
    [
        ({"baseline_interval_ms": 60_000}, "baseline_interval_ms", "at least 300000 ms"),
        (
            {"baseline_interval_ms": 600_000, "max_interval_ms": 60_000},
            "max_interval_ms",
            "below this tenant's shortest interval (5m)",
        ),
        (
            {"baseline_cron": "*/2 * * * *"},
            "baseline_cron",
            "fires 2m apart at times, but this tenant's plan allows runs at least 5m apart",
        ),
        (
            {"baseline_cron": "0,1 9 * * *"},
            "baseline_cron",
            "fires 1m apart at times",
        ),
    ],
)
def test_the_model_refuses_a_schedule_that_would_beat_the_tenant_floor(
    job: Job, floored: Tenant, fields: dict[str, Any], blamed: str, says: str
) -> None:
    endpoint = Endpoint(job=job, name="e", url="https://example.com/", **fields)

    found = problems(endpoint)

    assert any(says in message for message in found[blamed]), found


def test_a_new_job_in_a_floored_tenant_is_checked_before_it_is_saved(floored: Tenant) -> None:
    job = Job(tenant=floored, name="new")  # unsaved, as import plans it
    endpoint = Endpoint(job=job, name="e", url="https://example.com/", baseline_cron="* * * * *")

    assert "baseline_cron" in problems(endpoint)


def test_a_sparse_cron_passes_the_floor(job: Job, floored: Tenant) -> None:
    Endpoint(
        job=job, name="e", url="https://example.com/", baseline_cron="*/5 * * * *"
    ).full_clean()


def test_the_governor_clamps_to_the_tenant_floor_over_the_endpoint_max() -> None:
    schedule = EndpointSchedule(
        baseline_interval_ms=600_000, max_interval_ms=60_000, tenant_min_interval_ms=FIVE_MIN
    )

    plan = plan_next_run(NOW, schedule)

    assert (plan.next_run_at, plan.source) == (NOW + timedelta(minutes=5), "clamped-min")


def test_a_hint_below_the_floor_is_stored_as_asked_and_clamped_when_planned(
    make_endpoint: Callable[..., Endpoint], floored: Tenant
) -> None:
    endpoint = make_endpoint(baseline_interval_ms=600_000)
    endpoint = Endpoint.objects.select_related("job__tenant").get(pk=endpoint.pk)

    apply_hint(endpoint, now=NOW, interval_ms=1_000, ttl=timedelta(hours=1), reason="r")

    endpoint.refresh_from_db()
    assert endpoint.ai_hint_interval_ms == 1_000
    assert (endpoint.next_run_at, endpoint.next_run_source) == (
        NOW + timedelta(minutes=5),
        "clamped-min",
    )


def test_manual_runs_and_tests_call_each_target_once_within_the_tenant_floor(
    job: Job,
    floored: Tenant,
    make_endpoint: Callable[..., Endpoint],
    target: Any,
    loopback_allowed: None,
) -> None:
    # The case: with a 5-minute floor, 3 job run-nows and 2 tests called 4
    # targets 14 times in a second.
    endpoints = [
        make_endpoint(name=f"e{n}", url=target.url(f"/e{n}"), baseline_interval_ms=600_000)
        for n in range(4)
    ]
    now = timezone.now()

    made_due = [run_job_now(job, now=now + n * 300 * MS)[0] for n in range(3)]
    refused = []
    for endpoint in endpoints[:2]:
        with pytest.raises(OperationRefused) as caught:
            test_endpoint(endpoint, now=now + S)
        refused.append(str(caught.value))
    for claim in claim_due_endpoints(now=now + S, limit=10, horizon_ms=0):
        execute_claim(claim)

    assert made_due == [4, 0, 0]
    assert len(target.hits()) == 4
    assert refused[0].startswith(
        "ops/e0 has a manual run waiting to start (requested 1 second ago); tenant Acme "
        "allows one call of an endpoint every 5 minutes, by hand too. The next manual run "
        f"or test is allowed at {(now + 5 * MIN).isoformat(timespec='seconds')}"
    )
    later = timezone.now()
    with pytest.raises(OperationRefused, match=r"was called .* ago \(a manual run\)"):
        run_now(endpoints[0], now=later)
    assert test_endpoint(endpoints[0], now=later + 5 * MIN).status_code == 200
    assert len(target.hits()) == 5
