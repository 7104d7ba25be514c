"""Limits that hold when many requests arrive at once: the API rate limit (counted in a
real Redis), the endpoint quota (a lock on the tenant row in PostgreSQL, moves between
tenants counted, through the API and the admin form), and the channel and recipient
caps. Threads against a live server; what got through is counted."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from django.test import Client
from django.urls import reverse
from ninja.errors import Throttled

from api.auth import Principal, check_rate
from endpoints.models import Endpoint, Job, Tenant
from notifications.models import Channel
from tests.world import ApiWorld, endpoint_form, make_key

THREADS = 40
RATE_WINDOW_SECONDS = 3600  # "10/h"
BURST_SECONDS = 60  # the longest the forty requests take on a busy machine, and a margin


def all_at_once(count: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(i)`` on ``count`` threads released together; their results."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(i)
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


@pytest.fixture
def redis_api_cache(settings: Any) -> None:
    """The API's counter in the real Redis (this test run's own key prefix)."""
    url = settings.CELERY_BROKER_URL
    settings.CACHES = {
        **settings.CACHES,
        "api": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": url,
            "KEY_PREFIX": f"ratetest-{uuid.uuid4().hex}",
        },
    }
    settings.CRONICORN_API_RATE = "10/h"
    settings.CRONICORN_API_CALLS_PER_KEY = THREADS  # the rate alone decides here
    # The count is per fixed window (the clock's hours here): a burst that straddles the
    # hour's end is counted in two windows and passes twice. Start it inside one.
    left = RATE_WINDOW_SECONDS - time.time() % RATE_WINDOW_SECONDS
    if left < BURST_SECONDS:
        time.sleep(left + 0.1)


@pytest.mark.usefixtures("redis_api_cache")
def test_forty_concurrent_calls_pass_a_limit_of_ten_exactly_ten_times() -> None:
    principal = Principal(tenant_ids=(1,), can_write=True, api_key_id=424242)

    def call(_: int) -> bool:
        try:
            check_rate(principal)
        except Throttled:
            return False
        return True

    results = all_at_once(THREADS, call)
    assert Counter(results) == {True: 10, False: THREADS - 10}


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_api_cache")
def test_forty_concurrent_rest_requests_with_one_key_get_ten_answers(live_server: Any) -> None:
    tenant = Tenant.objects.create(name="Busy")
    key = make_key(tenant)
    url = f"{live_server.url}/api/v1/jobs"

    def call(_: int) -> int:
        response = httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        return response.status_code

    statuses = Counter(all_at_once(THREADS, call))
    assert statuses == {200: 10, 429: THREADS - 10}


@pytest.fixture
def api_url(live_server: Any, api_world: ApiWorld, settings: Any) -> Iterator[str]:
    # One key's requests all at once: the quota and caps decide here, not the key's bound
    # on requests in flight (tests/api/test_in_flight.py).
    settings.CRONICORN_API_CALLS_PER_KEY = THREADS
    yield f"{live_server.url}/api/v1"


def test_twenty_concurrent_creates_leave_the_quota_of_endpoints(
    api_world: ApiWorld, api_url: str
) -> None:
    tenant = api_world.a.tenant
    Tenant.objects.filter(pk=tenant.pk).update(max_endpoints=3)
    before = Endpoint.objects.live().filter(job__tenant=tenant).count()
    assert before < 3

    def create(i: int) -> int:
        body = {
            "job_id": api_world.a.job.pk,
            "name": f"burst-{i}",
            "url": "https://example.com/burst",
            "baseline_interval_ms": 60_000,
        }
        headers = {"Authorization": f"Bearer {api_world.write_key}"}
        return httpx.post(
            f"{api_url}/endpoints", json=body, headers=headers, timeout=60
        ).status_code

    statuses = Counter(all_at_once(20, create))
    assert statuses[201] == 3 - before, statuses
    assert statuses[422] == 20 - (3 - before), statuses
    assert Endpoint.objects.live().filter(job__tenant=tenant).count() == 3


def full_tenant(api_world: ApiWorld) -> Job:
    """Tenant B at its quota; its job."""
    b = api_world.b.tenant
    used = Endpoint.objects.live().filter(job__tenant=b).count()
    Tenant.objects.filter(pk=b.pk).update(max_endpoints=used)
    return api_world.b.job


def test_moving_an_endpoint_into_a_full_tenant_through_the_api_is_counted(
    api_world: ApiWorld, live_server: Any
) -> None:
    job_b = full_tenant(api_world)
    root = Client()
    root.force_login(api_world.world.root)
    endpoint = api_world.a.endpoint
    response = root.patch(
        f"/api/v1/endpoints/{endpoint.pk}",
        {"job_id": job_b.pk},
        content_type="application/json",
    )
    assert response.status_code == 422, response.content
    assert "job_id" in response.json()["errors"]
    endpoint.refresh_from_db()
    assert endpoint.job_id == api_world.a.job.pk
    # A move within a tenant is no new place.
    other = Job.objects.create(tenant=api_world.a.tenant, name="other")
    Tenant.objects.filter(pk=api_world.a.tenant.pk).update(max_endpoints=1)
    moved = root.patch(
        f"/api/v1/endpoints/{endpoint.pk}", {"job_id": other.pk}, content_type="application/json"
    )
    assert moved.status_code == 200, moved.content


def test_moving_an_endpoint_into_a_full_tenant_through_the_admin_form_is_counted(
    api_world: ApiWorld,
) -> None:
    job_b = full_tenant(api_world)
    root = Client()
    root.force_login(api_world.world.root)
    endpoint = api_world.a.endpoint
    url = reverse("admin:endpoints_endpoint_change", args=[endpoint.pk])
    data = endpoint_form(job_b, name=endpoint.name, url=endpoint.url)
    response = root.post(url, data)
    assert response.status_code == 200  # the form again, with the error
    assert "archive one" in str(response.context["adminform"].form.errors["job"])
    endpoint.refresh_from_db()
    assert endpoint.job_id == api_world.a.job.pk


def test_a_tenant_holds_at_most_the_channel_cap_even_under_concurrent_creates(
    api_world: ApiWorld, api_url: str, settings: Any
) -> None:
    settings.CRONICORN_MAX_CHANNELS_PER_TENANT = 4
    tenant = api_world.a.tenant
    existing = Channel.objects.filter(tenant=tenant).count()

    def create(i: int) -> int:
        body = {"name": f"c{i}", "kind": "email", "target": f"ops{i}@example.com"}
        headers = {"Authorization": f"Bearer {api_world.write_key}"}
        return httpx.post(f"{api_url}/channels", json=body, headers=headers, timeout=60).status_code

    statuses = Counter(all_at_once(12, create))
    assert statuses[201] == 4 - existing, statuses
    assert Channel.objects.filter(tenant=tenant).count() == 4


def test_a_channel_names_at_most_the_recipient_cap(api_world: ApiWorld, settings: Any) -> None:
    settings.CRONICORN_MAX_RECIPIENTS_PER_CHANNEL = 5
    api = Client(headers={"Authorization": f"Bearer {api_world.write_key}"})
    many = ",".join(f"ops{i}@example.com" for i in range(6))
    cases = [
        ("email", many),
        ("apprise", "mailto://u:p@example.com?to=" + many),
        ("apprise", "mailto://u:p@example.com?to=a@example.com&bcc=" + many),
    ]
    for kind, target in cases:
        response = api.post(
            "/api/v1/channels",
            {"name": "big", "kind": kind, "target": target},
            content_type="application/json",
        )
        assert response.status_code == 422, (kind, response.content)
        assert "CRONICORN_MAX_RECIPIENTS_PER_CHANNEL" in str(response.json()["errors"])
    assert not Channel.objects.filter(name="big").exists()


def test_a_channel_name_with_control_characters_is_refused(api_world: ApiWorld) -> None:
    api = Client(headers={"Authorization": f"Bearer {api_world.write_key}"})
    for name in ("on\rcall", "on\ncall", "on\tcall", "on\x1b[31mcall"):
        response = api.post(
            "/api/v1/channels",
            {"name": name, "kind": "email", "target": "ops@example.com"},
            content_type="application/json",
        )
        assert response.status_code == 422, response.content
        assert "name" in response.json()["errors"]
