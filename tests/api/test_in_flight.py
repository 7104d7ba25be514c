"""One tenant's slow REST requests hold at most CRONICORN_API_CALLS_PER_KEY of the web
server's workers (issue 32, REST fairness), counted across gunicorn's processes in Redis:
while tenant A's test call waits at its target, A's next request is refused in words with
Retry-After, tenant B's requests are answered, and A has its place back once the first
answers."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
import redis
from django.conf import settings

from tests.api.serving import gunicorn_serving
from tests.http_targets import TargetServer
from tests.world import ApiWorld, make_key

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_keys_requests_in_flight_are_bounded_across_web_processes_and_others_still_answered(
    api_world: ApiWorld, target: TargetServer, tmp_path: Path
) -> None:
    release = threading.Event()
    target.reply("/held", hold=release)
    world = api_world.world
    held = world.add_endpoint(api_world.a.job, "held", url=target.url("/held"))
    other = world.add_endpoint(api_world.a.job, "other", url=target.url("/held"))
    b_key = make_key(api_world.b.tenant)
    a = {"Authorization": f"Bearer {api_world.write_key}"}
    b = {"Authorization": f"Bearer {b_key}"}

    cache = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    for name in cache.scan_iter("*in-flight:*"):  # a place an earlier, killed run held
        cache.delete(name)

    with gunicorn_serving(
        tmp_path,
        WEB_CONCURRENCY="3",  # A's held request takes one; A's next and B's find others
        CRONICORN_API_CALLS_PER_KEY="1",
        CRONICORN_API_CACHE_URL=settings.CELERY_BROKER_URL,
    ) as base_url:
        api = f"{base_url}/api/v1"
        first: dict[str, httpx.Response] = {}
        slow = threading.Thread(
            target=lambda: first.update(
                test=httpx.post(f"{api}/endpoints/{held.pk}/test", headers=a, timeout=60)
            )
        )
        slow.start()
        try:
            assert target.wait_for(lambda: len(target.hits("/held")) == 1, timeout=30)

            refused = httpx.get(f"{api}/jobs", headers=a, timeout=30)
            assert refused.status_code == 429, refused.text
            assert refused.headers["Retry-After"] == "1"
            assert refused.headers["Content-Type"] == "application/problem+json"
            assert "already has 1 requests in flight" in refused.json()["detail"]
            assert "CRONICORN_API_CALLS_PER_KEY" in refused.json()["detail"]

            for _ in range(3):  # B is served whichever worker takes its request
                answered = httpx.get(f"{api}/jobs", headers=b, timeout=30)
                assert answered.status_code == 200, answered.text
        finally:
            release.set()
            slow.join(60)
        assert first["test"].status_code == 200, first["test"].text

        # The place is given back when the request answers.
        again = httpx.post(f"{api}/endpoints/{other.pk}/test", headers=a, timeout=60)
        assert again.status_code == 200, again.text
