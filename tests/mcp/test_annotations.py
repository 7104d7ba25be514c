"""Every MCP tool's annotations follow from its HTTP method and kind (api/operations.py,
``Operation.annotations``), as an assistant reads them from tools/list: a GET only reads,
any other method writes; a DELETE destroys, and so do the POSTs with no way back; the
same call twice changes nothing more for GET, PATCH and DELETE; only the tools that call
the tenant's own URLs reach an open world."""

from __future__ import annotations

import asyncio

from mcp import Client
from mcp.types import Tool

from api.mcp_server import build_server
from api.operations import OPERATIONS

# Not a DELETE, yet nothing brings back what they end: an archived endpoint never runs
# again; a rotated secret is gone.
DESTRUCTIVE_POSTS = {"archive_endpoint", "rotate_signing_secret"}
# POSTs that save nothing: their body is a proposal too large for a query.
READING_POSTS = {"preview_change"}


def listed_tools() -> dict[str, Tool]:
    async def tools() -> list[Tool]:
        async with Client(build_server(stdio_key="unused")) as client:
            return (await client.list_tools()).tools

    return {tool.name: tool for tool in asyncio.run(tools())}


def assert_annotations_follow_from_method_and_kind(tools: dict[str, Tool]) -> None:
    """Over every tool listed (tests/mcp/test_clients.py reads them from ``manage.py mcp
    --http``, as deployed)."""
    assert set(tools) == {op.name for op in OPERATIONS}
    for op in OPERATIONS:
        hints = tools[op.name].annotations
        assert hints is not None, op.name
        assert hints.title == op.summary, op.name
        assert hints.read_only_hint is (op.method == "get" or op.name in READING_POSTS), op.name
        destructive = op.method == "delete" or op.name in DESTRUCTIVE_POSTS
        assert hints.destructive_hint is destructive, op.name
        if op.method in ("get", "patch", "delete") or op.name in READING_POSTS:
            assert hints.idempotent_hint is True, op.name
        calls_out = ("test_endpoint", "test_channel", "start_backfill")  # the tenant's URLs
        assert hints.open_world_hint is (op.name in calls_out), op.name
    # The deletes, one by one: each is destructive.
    deletes = [name for name in tools if name.startswith(("delete_", "remove_"))]
    assert sorted(deletes) == [
        "delete_channel",
        "delete_endpoint",
        "delete_job",
        "remove_alert_rule",
    ]
    assert all(tools[name].annotations.destructive_hint for name in deletes)  # type: ignore[union-attr]


def test_every_tools_annotations_follow_from_its_method_and_kind() -> None:
    assert_annotations_follow_from_method_and_kind(listed_tools())
