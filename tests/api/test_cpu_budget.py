"""A key's requests may use CRONICORN_API_CPU_PER_KEY of a core (issue 32: within its rate
limit, a key of costly requests kept every web worker busy, and the scheduler beside
them): counted across gunicorn's processes in Redis, a key over its share is refused in
words with Retry-After until its window ends while another tenant's key is answered;
MCP tool calls and the admin's live run preview count the same way."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import caches
from django.db import connections
from django.urls import reverse
from mcp import Client

from api.fair_share import CPU_WINDOW_SECONDS
from api.mcp_server import build_server
from tests.api.serving import gunicorn_serving
from tests.world import ApiWorld, World, endpoint_form, make_key

pytestmark = [pytest.mark.django_db(transaction=True)]

REFUSAL = "requests have used the server CPU one key may use"


@pytest.mark.slow
def test_a_key_over_its_share_of_a_core_is_refused_and_another_tenant_is_answered(
    api_world: ApiWorld, tmp_path: Path
) -> None:
    cache = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    for name in cache.scan_iter("*cpu:key:*"):  # an earlier run's windows
        cache.delete(name)
    a = {"Authorization": f"Bearer {api_world.write_key}"}
    b = {"Authorization": f"Bearer {make_key(api_world.b.tenant)}"}
    preview = f"/endpoints/{api_world.a.endpoint.pk}/preview"

    with gunicorn_serving(
        tmp_path,
        WEB_CONCURRENCY="2",
        CRONICORN_API_CPU_PER_KEY="0.002",  # 20 ms of CPU per 10 s window
        CRONICORN_API_CACHE_URL=settings.CELERY_BROKER_URL,
    ) as base_url:
        api = httpx.Client(base_url=f"{base_url}/api/v1", timeout=30)
        answers: list[httpx.Response] = []
        deadline = time.monotonic() + 2 * CPU_WINDOW_SECONDS
        while time.monotonic() < deadline and len(answers) < 300:
            answers.append(api.get(preview, params={"count": 100}, headers=a))
            if answers[-1].status_code != 200:
                break
        refused = answers[-1]
        others = [api.get("/jobs", headers=b).status_code for _ in range(3)]

    assert refused.status_code == 429, [r.status_code for r in answers]
    assert len(answers) > 1  # the first requests were within the share
    assert refused.headers["Content-Type"] == "application/problem+json"
    assert REFUSAL in refused.json()["detail"]
    assert "0.002 of a core over 10 s, CRONICORN_API_CPU_PER_KEY" in refused.json()["detail"]
    assert 1 <= int(refused.headers["Retry-After"]) <= CPU_WINDOW_SECONDS
    assert others == [200, 200, 200]


def test_tool_calls_count_against_the_keys_share_of_a_core(
    api_world: ApiWorld, settings: Any
) -> None:
    settings.CRONICORN_API_CPU_PER_KEY = 0.0001  # 1 ms per window: the first call spends it
    caches["api"].clear()

    async def scenario() -> list[Any]:
        async with Client(build_server(stdio_key=api_world.read_key)) as client:
            results = [await client.call_tool("list_jobs", {}) for _ in range(3)]
            await sync_to_async(connections.close_all)()
        return results

    first, *later = asyncio.run(scenario())
    assert not first.is_error
    assert later[-1].is_error
    text = later[-1].content[0].text  # type: ignore[union-attr]
    assert text.startswith("429 Too Many Requests: ") and REFUSAL in text


def test_the_admins_live_preview_counts_against_the_users_share(
    world: World, settings: Any
) -> None:
    settings.CRONICORN_API_CPU_PER_KEY = 0.0001
    caches["api"].clear()
    client = world.client_for(world.alice)
    values = endpoint_form(world.a.job, baseline_interval_ms="5m")
    url = reverse("admin:endpoints_endpoint_preview")

    answers = [client.post(url, values) for _ in range(3)]

    assert answers[0].status_code == 200 and answers[0].json()["runs"]
    assert answers[-1].status_code == 429
    assert REFUSAL in answers[-1].json()["busy"]
    assert 1 <= int(answers[-1]["Retry-After"]) <= CPU_WINDOW_SECONDS
    # Another user's previews are not held back by Alice's.
    bob = world.client_for(world.bob)
    assert bob.post(url, endpoint_form(world.b.job, baseline_interval_ms="5m")).status_code == 200
