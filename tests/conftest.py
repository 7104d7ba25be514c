"""Shared fixtures: small factories for tenants, jobs and endpoints.

Keep fixtures that only one behaviour needs inside that behaviour's test file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from endpoints.models import Endpoint, Job, Tenant
from tests.http_targets import TargetServer


@pytest.fixture
def tenant(db: None) -> Tenant:
    return Tenant.objects.create(name="Acme")


@pytest.fixture
def job(tenant: Tenant) -> Job:
    return Job.objects.create(tenant=tenant, name="ops")


@pytest.fixture
def make_endpoint(job: Job) -> Callable[..., Endpoint]:
    """Create a valid endpoint (1 minute interval unless told otherwise), full_clean'ed."""
    counter = iter(range(1, 1_000_000))

    def make(**fields: Any) -> Endpoint:
        values: dict[str, Any] = {
            "job": job,
            "name": f"endpoint-{next(counter)}",
            "url": "http://127.0.0.1:9/health",
        }
        values.update(fields)
        if "baseline_cron" not in fields and "baseline_interval_ms" not in fields:
            values["baseline_interval_ms"] = 60_000
        endpoint = Endpoint(**values)
        endpoint.full_clean()
        endpoint.save()
        return endpoint

    return make


@pytest.fixture
def now() -> datetime:
    return datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


@pytest.fixture
def loopback_allowed(settings: Any) -> None:
    """Let the executor call the test servers on 127.0.0.1 (the SSRF guard refuses it)."""
    settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = True


@pytest.fixture
def target() -> Iterator[TargetServer]:
    """A recording HTTP server on 127.0.0.1 (see tests/http_targets.py)."""
    with TargetServer() as server:
        yield server
