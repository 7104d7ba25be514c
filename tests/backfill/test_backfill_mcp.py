"""The backfill as MCP tools (the API's operations): a dry run lists the slots, a start
records the backfill and who asked (the key), its progress reads back, a cancel stops
it, and a range over the cap is refused in words."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from mcp import Client

from api.mcp_server import build_server
from endpoints.backfill_models import Backfill
from endpoints.models import Endpoint
from tests.backfill.slots import CRON, the_range
from tests.world import ApiWorld

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_backfill_tools_plan_start_show_and_cancel(api_world: ApiWorld) -> None:
    job = api_world.a.job
    endpoint = Endpoint.objects.create(
        job=job, name="nightly", url="https://a.example.com/n", baseline_cron=CRON
    )
    start, end = the_range()
    span = {
        "endpoint_id": endpoint.pk,
        "range_from": start.isoformat(),
        "range_to": end.isoformat(),
    }

    async def scenario() -> dict[str, Any]:
        async with Client(build_server(stdio_key=api_world.write_key)) as client:
            seen = {
                "dry": await client.call_tool("start_backfill", {**span, "dry_run": True}),
                "made": await client.call_tool("start_backfill", {**span, "rate": 2}),
            }
            backfill_id = seen["made"].structured_content["id"]
            seen["shown"] = await client.call_tool("get_backfill", {"backfill_id": backfill_id})
            seen["cancelled"] = await client.call_tool(
                "cancel_backfill", {"backfill_id": backfill_id}
            )
            seen["over"] = await client.call_tool(
                "start_backfill",
                {**span, "range_from": (end - timedelta(days=40)).isoformat()},
            )
        await sync_to_async(connections.close_all)()
        return seen

    seen = asyncio.run(scenario())
    dry = seen["dry"].structured_content
    assert (dry["status"], dry["total"], len(dry["slots"])) == ("dry run", 48, 48)
    shown = seen["shown"].structured_content
    assert (shown["status"], shown["total"]) == ("queued", 48)
    assert shown["requested_by"].startswith("API key ")
    assert seen["cancelled"].structured_content["status"] == "cancelled"
    assert seen["over"].is_error
    assert "holds more than 10 000 slots" in seen["over"].content[0].text  # type: ignore[union-attr]
    assert Backfill.objects.filter(endpoint=endpoint).count() == 1
