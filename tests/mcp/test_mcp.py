"""The MCP server end to end with the SDK's own client: over stdio (``manage.py mcp``
as a subprocess) and over streamable HTTP (``manage.py mcp --http``, a live uvicorn
serving cronicorn_site.asgi). Tools are the API's operations, scoped to the key."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from api.mcp_server import build_server
from endpoints.models import Endpoint, HintHistory, Run
from tests.engine_processes import ROOT, child_database_url, process_env
from tests.mcp.serving import http_client
from tests.world import (
    ApiWorld,
    TenantWorld,
    ids_of,
    names_objects,
    operations,
    sample_body,
    sample_query,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def tool_arguments(name: str, side: TenantWorld) -> dict[str, Any]:
    op = next(op for op in operations() if op.name == name)
    arguments: dict[str, Any] = {k: v for k, v in ids_of(side).items() if "{" + k + "}" in op.path}
    arguments.update(sample_query(op, side))
    arguments.update(sample_body(op, side) or {})  # the tools' arguments are flat
    return arguments


async def walk_through(client: Client, api_world: ApiWorld) -> dict[str, Any]:
    """List tools, create an endpoint, set a hint, read its runs and a doc resource."""
    tools = {tool.name for tool in (await client.list_tools()).tools}
    created = await client.call_tool(
        "create_endpoint",
        {
            "job_id": api_world.a.job.pk,
            "name": "from-mcp",
            "url": "https://example.com/mcp",
            "baseline_interval_ms": 120_000,
        },
    )
    assert not created.is_error, created.content
    endpoint_id = created.structured_content["id"]
    hinted = await client.call_tool(
        "set_hint",
        {"endpoint_id": endpoint_id, "interval_ms": 30_000, "ttl_ms": 600_000},
    )
    assert not hinted.is_error, hinted.content
    runs = await client.call_tool("list_endpoint_runs", {"endpoint_id": api_world.a.endpoint.pk})
    readme = await client.read_resource("cronicorn://docs/concepts")
    state = await client.read_resource(f"cronicorn://endpoints/{endpoint_id}")
    return {
        "tools": tools,
        "endpoint_id": endpoint_id,
        "hint": hinted.structured_content,
        "runs": runs.structured_content,
        "readme": readme.contents[0].text,  # type: ignore[union-attr]
        "state": json.loads(state.contents[0].text),  # type: ignore[union-attr]
    }


def assert_walk_through(seen: dict[str, Any], api_world: ApiWorld) -> None:
    assert {"create_endpoint", "set_hint", "list_endpoint_runs", "get_run"} <= seen["tools"]
    assert len(seen["tools"]) == len(operations())
    endpoint = Endpoint.objects.get(pk=seen["endpoint_id"])
    assert endpoint.job_id == api_world.a.job.pk and endpoint.next_run_at is not None
    assert endpoint.ai_hint_interval_ms == 30_000
    assert seen["hint"]["ai_hint_interval_ms"] == 30_000
    assert HintHistory.objects.filter(endpoint=endpoint, kind="interval").exists()
    assert [r["id"] for r in seen["runs"]["items"]] == [api_world.a.run.pk]
    assert (
        seen["runs"]["items"][0]["status_code"]
        == Run.objects.get(pk=api_world.a.run.pk).status_code
    )
    assert "Cronicorn" in seen["readme"]
    assert seen["state"]["name"] == "from-mcp" and "explanation" in seen["state"]


def test_mcp_over_stdio_with_the_sdk_client(api_world: ApiWorld) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp"],
        env={
            **process_env(DATABASE_URL=child_database_url()),
            "CRONICORN_API_KEY": api_world.write_key,
        },
        cwd=ROOT,
    )

    async def scenario() -> dict[str, Any]:
        async with Client(params, read_timeout_seconds=60) as client:
            return await walk_through(client, api_world)

    assert_walk_through(asyncio.run(scenario()), api_world)


def test_mcp_over_http_with_the_sdk_client(api_world: ApiWorld, mcp_http: str) -> None:
    async def scenario() -> dict[str, Any]:
        async with http_client(mcp_http, api_world.write_key) as client:
            return await walk_through(client, api_world)

    assert_walk_through(asyncio.run(scenario()), api_world)


def test_mcp_over_http_refuses_a_request_without_a_usable_key(
    api_world: ApiWorld, mcp_http: str
) -> None:
    for key in (None, api_world.revoked_key, api_world.expired_key):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        response = httpx.post(mcp_http, json={}, headers=headers)
        assert response.status_code == 401
        assert response.headers["Content-Type"] == "application/problem+json"


def test_every_tool_answers_404_for_the_other_tenants_objects_and_403_to_a_read_key(
    api_world: ApiWorld,
) -> None:
    async def scenario(key: str, side: TenantWorld, write: bool | None) -> dict[str, str]:
        errors = {}
        async with Client(build_server(stdio_key=key)) as client:
            for op in operations(write=write):
                if write is None and not names_objects(op):
                    continue
                result = await client.call_tool(op.name, tool_arguments(op.name, side))
                assert result.is_error, op.name
                errors[op.name] = result.content[0].text  # type: ignore[union-attr]
        # The tools' ORM thread keeps its connection; close it so the test database can go.
        await sync_to_async(connections.close_all)()
        return errors

    not_found = asyncio.run(scenario(api_world.write_key, api_world.b, None))
    assert len(not_found) >= 25
    assert all(text.startswith("404 Not Found: ") for text in not_found.values()), not_found
    forbidden = asyncio.run(scenario(api_world.read_key, api_world.a, True))
    assert all(text.startswith("403 Forbidden: ") for text in forbidden.values()), forbidden
    assert len(forbidden) == len(operations(write=True))


def test_tool_calls_count_against_the_keys_rate_limit(api_world: ApiWorld, settings: Any) -> None:
    settings.CRONICORN_API_RATE = "3/m"

    async def scenario() -> list[str]:
        async with Client(build_server(stdio_key=api_world.read_key)) as client:
            results = [await client.call_tool("list_jobs", {}) for _ in range(4)]
            await sync_to_async(connections.close_all)()
        return ["error" if r.is_error else "ok" for r in results] + [
            results[-1].content[0].text  # type: ignore[union-attr]
        ]

    *outcomes, last = asyncio.run(scenario())
    assert outcomes == ["ok", "ok", "ok", "error"]
    assert "429 Too Many Requests" in last
