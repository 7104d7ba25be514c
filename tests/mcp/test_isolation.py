"""One tenant's MCP tool calls do not make another's late (issue 32): a live ``manage.py
mcp --http`` and the SDK's client, two tenants calling at once.

- tenant A's slow ``test_endpoint`` (its target answers after 3 s) holds its own thread:
  tenant B's ``list_jobs``, called while A's is at the target, answers first;
- one key runs at most CRONICORN_MCP_CALLS_PER_KEY calls at once and the process at most
  CRONICORN_MCP_THREADS: a call beyond either is refused in words after a short wait,
  while another tenant's calls still run as long as there is a thread for them;
- a call's thread closes its database connections when the call ends.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from mcp import Client
from mcp.types import CallToolResult

from endpoints.models import Endpoint
from tests.http_targets import TargetServer
from tests.mcp.serving import http_client, mcp_over_http
from tests.world import ApiWorld, make_key

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def slow_endpoint(world: ApiWorld, target: TargetServer, path: str, name: str = "") -> Endpoint:
    """Tenant A's endpoint at ``path`` of the target (the test sets how it answers)."""
    name = name or f"slow-{path.strip('/')}"
    return world.world.add_endpoint(world.a.job, name, url=target.url(path))


async def reached(target: TargetServer, path: str, count: int) -> None:
    """Until ``count`` requests have arrived at ``path`` (at most 20 s), without blocking
    the event loop the calls run on."""
    for _ in range(2000):
        if len(target.hits(path)) >= count:
            return
        await asyncio.sleep(0.01)
    assert len(target.hits(path)) >= count, target.hits(path)


def server_connections() -> int:
    """Connections to the test database other than this test's own: the server's."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend'"
        )
        return int(cursor.fetchone()[0])


def text(result: CallToolResult) -> str:
    return result.content[0].text  # type: ignore[union-attr]


def test_a_slow_tool_of_one_tenant_does_not_delay_another_tenants_call(
    api_world: ApiWorld, mcp_http: str, target: TargetServer
) -> None:
    target.reply("/slow", delay=3.0)
    endpoint = slow_endpoint(api_world, target, "/slow")
    b_key = make_key(api_world.b.tenant)
    finished: list[str] = []

    async def call(client: Client, who: str, tool: str, **arguments: Any) -> CallToolResult:
        result = await client.call_tool(tool, arguments)
        finished.append(who)
        return result

    async def scenario() -> tuple[CallToolResult, CallToolResult]:
        async with (
            http_client(mcp_http, api_world.write_key) as a,
            http_client(mcp_http, b_key) as b,
        ):
            slow = asyncio.create_task(call(a, "A", "test_endpoint", endpoint_id=endpoint.pk))
            await reached(target, "/slow", 1)  # A's call is in its thread, waiting
            quick = await call(b, "B", "list_jobs")
            return await slow, quick

    slow, quick = asyncio.run(scenario())
    assert finished == ["B", "A"]
    assert not slow.is_error and slow.structured_content["status_code"] == 200  # type: ignore[index]
    assert not quick.is_error, text(quick)
    assert [job["name"] for job in quick.structured_content["items"]] == ["beta-secret-job"]  # type: ignore[index]


@pytest.fixture
def bounded_mcp(api_world: ApiWorld, tmp_path: Path) -> Iterator[str]:
    with mcp_over_http(
        tmp_path / "mcp-http.log",
        CRONICORN_MCP_CALLS_PER_KEY="2",
        CRONICORN_MCP_THREADS="3",
        CRONICORN_MCP_CALL_WAIT_SECONDS="0.5",
    ) as url:
        yield url


def test_calls_are_bounded_per_key_and_per_process_refused_in_words_and_close_connections(
    api_world: ApiWorld, bounded_mcp: str, target: TargetServer
) -> None:
    release = threading.Event()
    target.reply("/held", hold=release)
    # One endpoint per call: a second manual call of an endpoint within its tenant's floor
    # is refused before it reaches any thread.
    held = [
        {"endpoint_id": slow_endpoint(api_world, target, "/held", f"held-{n}").pk} for n in range(3)
    ]
    a_other_key = make_key(api_world.a.tenant)
    b_key = make_key(api_world.b.tenant)

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with (
            http_client(bounded_mcp, api_world.write_key) as a,
            http_client(bounded_mcp, a_other_key) as a_other,
            http_client(bounded_mcp, b_key) as b,
        ):
            # A's key runs its two calls, both held at the target.
            running = [asyncio.create_task(a.call_tool("test_endpoint", held[n])) for n in (0, 1)]
            await reached(target, "/held", 2)
            seen["a_third"] = await a.call_tool("list_jobs", {})
            seen["b_beside_a"] = await b.call_tool("list_jobs", {})
            # A's other key takes the process's last thread.
            running.append(asyncio.create_task(a_other.call_tool("test_endpoint", held[2])))
            await reached(target, "/held", 3)
            seen["b_no_thread"] = await b.call_tool("list_jobs", {})
            release.set()
            seen["held"] = await asyncio.gather(*running)
            seen["a_after"] = await a.call_tool("list_jobs", {})
        return seen

    seen = asyncio.run(scenario())
    # The key's third call: refused, saying which bound and how to get past it.
    assert seen["a_third"].is_error
    assert text(seen["a_third"]) == (
        "429 Too Many Requests: this API key already has 2 tool calls running, the most "
        "one key may run at once (CRONICORN_MCP_CALLS_PER_KEY); wait for one to finish and "
        "call again, or raise CRONICORN_MCP_CALLS_PER_KEY on the server."
    )
    # Tenant B is not held to A's key's bound.
    assert not seen["b_beside_a"].is_error, text(seen["b_beside_a"])
    # With every thread busy, a call of anyone is refused, not left hanging.
    assert seen["b_no_thread"].is_error
    assert text(seen["b_no_thread"]).startswith("503 Service Unavailable: ")
    assert "CRONICORN_MCP_THREADS" in text(seen["b_no_thread"])
    # The held calls ran to their end; then the key has its places back.
    for result in seen["held"]:
        assert not result.is_error, text(result)
        assert result.structured_content["status_code"] == 200
    assert not seen["a_after"].is_error, text(seen["a_after"])
    # Three threads ran calls at once; none keeps a connection once its call ended. One
    # may stay open: the key check before the MCP layer (cronicorn_site/asgi.py) keeps its.
    target.wait_for(lambda: server_connections() <= 1, timeout=10)
    assert server_connections() <= 1
