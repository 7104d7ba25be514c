"""``cronicorn mcp``: the MCP server on stdio over the REST API, with no database variable
in its environment, through the official SDK client: the same tools as the in-process
server (one per operation), with their hints, calling the served routes with the key."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from endpoints.models import Endpoint
from tests.cli.conftest import CRONICORN, operator_env
from tests.world import ApiWorld, operations

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def proxy(served: str, key: str, home: Path) -> StdioServerParameters:
    env = operator_env(home, CRONICORN_URL=served, CRONICORN_API_KEY=key)
    return StdioServerParameters(command=str(CRONICORN), args=["mcp"], env=env, cwd=str(home))


def text_of(result: Any) -> str:
    return " ".join(getattr(part, "text", "") for part in result.content)


def test_the_proxy_lists_every_operation_and_calls_the_api_with_the_key(
    served: str, api_world: ApiWorld, tmp_path: Path
) -> None:
    endpoint = api_world.a.endpoint

    async def scenario() -> dict[str, Any]:
        async with Client(
            proxy(served, api_world.write_key, tmp_path), read_timeout_seconds=60
        ) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            got = await client.call_tool("get_endpoint", {"endpoint_id": endpoint.pk})
            hinted = await client.call_tool(
                "set_hint", {"endpoint_id": endpoint.pk, "interval_ms": 30_000, "ttl_ms": 600_000}
            )
            runs = await client.call_tool(
                "list_endpoint_runs", {"endpoint_id": endpoint.pk, "limit": 5}
            )
            tenants = await client.call_tool("list_tenants", {})
            other = await client.call_tool("get_endpoint", {"endpoint_id": api_world.b.endpoint.pk})
            invalid = await client.call_tool(
                "pause_endpoint", {"endpoint_id": endpoint.pk, "until": "tomorrow-ish"}
            )
            typo = await client.call_tool("get_endpoint", {"endpoint": endpoint.pk})
            return locals()

    seen = asyncio.run(scenario())
    tools = seen["tools"]
    assert set(tools) == {op.name for op in operations()}
    assert tools["get_endpoint"].annotations.read_only_hint is True
    assert tools["delete_endpoint"].annotations.destructive_hint is True
    assert tools["test_endpoint"].annotations.open_world_hint is True
    # Flat arguments: the body's fields beside the path's, no $ref left to resolve.
    hint_schema = tools["set_hint"].input_schema
    assert {"endpoint_id", "interval_ms", "ttl_ms", "reason"} <= set(hint_schema["properties"])
    assert "$ref" not in str(tools["create_endpoint"].input_schema)

    assert not seen["got"].is_error and seen["got"].structured_content["name"] == "alpha-orders"
    assert not seen["hinted"].is_error, text_of(seen["hinted"])
    endpoint.refresh_from_db()
    assert endpoint.ai_hint_interval_ms == 30_000
    assert [r["id"] for r in seen["runs"].structured_content["items"]] == [api_world.a.run.pk]
    assert [t["name"] for t in seen["tenants"].structured_content["result"]] == ["Alpha"]

    assert seen["other"].is_error
    assert text_of(seen["other"]).startswith("404 Not Found: No endpoint with id")
    assert seen["invalid"].is_error and "(until: Write the time as ISO 8601" in text_of(
        seen["invalid"]
    )
    assert seen["typo"].is_error and "no argument 'endpoint'" in text_of(seen["typo"])


def test_the_proxy_with_a_read_key_reads_but_is_refused_writes(
    served: str, api_world: ApiWorld, tmp_path: Path
) -> None:
    endpoint = api_world.a.endpoint

    async def scenario() -> tuple[Any, Any]:
        async with Client(
            proxy(served, api_world.read_key, tmp_path), read_timeout_seconds=60
        ) as client:
            read = await client.call_tool("list_endpoints", {})
            write = await client.call_tool("resume_endpoint", {"endpoint_id": endpoint.pk})
            return read, write

    read, write = asyncio.run(scenario())
    assert [e["id"] for e in read.structured_content["items"]] == [endpoint.pk]
    assert write.is_error and text_of(write).startswith("403 Forbidden: This API key is read-only")
    assert Endpoint.objects.get(pk=endpoint.pk).paused_until is None
