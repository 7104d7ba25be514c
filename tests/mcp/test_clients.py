"""The MCP server as an assistant meets it, through the official SDK client over stdio
(``manage.py mcp`` as a subprocess) and streamable HTTP (``manage.py mcp --http``):

- every tool is called with valid arguments (flat: no wrapper object) and answers;
- every tool is called with invalid ones (an unknown argument, a missing or mistyped
  one) and answers one readable sentence naming what was wrong: no pydantic text or
  links, no bare "Error executing tool";
- every tool carries the annotations its method and kind give (a GET reads only, a
  DELETE destroys: tests/mcp/test_annotations.py), and its schema
  needs no ``$ref`` and refuses unknown arguments;
- the topic documents, the endpoint resource and the prompts are listed and read; another
  tenant's endpoint reads as not found; the server says its version and teaches its
  concepts in its instructions.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from api.mcp_server import TOPICS
from endpoints.models import Endpoint, Job, JobStatus
from notifications.models import AlertState
from tests.engine_processes import ROOT, child_database_url, process_env
from tests.http_targets import TargetServer
from tests.mcp.serving import http_client
from tests.mcp.test_annotations import assert_annotations_follow_from_method_and_kind
from tests.world import ApiWorld

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

State = dict[str, Any]
Step = tuple[str, Callable[[State], dict[str, Any]], str | None]


@pytest.fixture(autouse=True)
def failing_episode(api_world: ApiWorld) -> None:
    """A failing episode alerts have raised, for acknowledge_alert to acknowledge."""
    AlertState.objects.create(
        endpoint=api_world.a.endpoint, failing=True, failing_since=timezone.now()
    )


@pytest.fixture
def target() -> Iterator[TargetServer]:
    with TargetServer() as server:
        server.reply("/health", status=200, body={"status": "healthy"})
        yield server


def readable(text: str) -> None:
    """One sentence a person (or a model) reads and acts on."""
    assert text, "an empty error"
    assert "\n" not in text, text
    assert "pydantic" not in text.lower(), text
    assert not text.startswith("Error executing tool"), text
    assert "Traceback" not in text and "Input should be a valid dictionary" not in text, text
    assert text.rstrip().endswith((".", ")")), text


def valid_steps(world: ApiWorld, target_url: str) -> list[Step]:
    """Each tool once with valid arguments, in an order that leaves every call sensible
    (what is created is then changed, archived and deleted). The third item names the
    state key the answer's id is kept under."""
    a = world.a
    job = lambda s: {"job_id": s["job"]}  # noqa: E731
    endpoint = lambda s: {"endpoint_id": s["endpoint"]}  # noqa: E731
    channel = lambda s: {"channel_id": s["channel"]}  # noqa: E731
    return [
        ("list_jobs", lambda s: {"status": "active", "limit": 10}, None),
        ("get_job", lambda s: {"job_id": a.job.pk}, None),
        ("create_job", lambda s: {"name": "mcp-job", "description": "made by a tool"}, "job"),
        ("update_job", lambda s: {**job(s), "max_concurrent": 2}, None),
        ("list_endpoints", lambda s: {"job_id": a.job.pk, "search": "orders"}, None),
        ("get_endpoint", lambda s: {"endpoint_id": a.endpoint.pk}, None),
        (
            "create_endpoint",
            lambda s: {
                **job(s),
                "name": "mcp-endpoint",
                "url": target_url,
                "baseline_interval_ms": 60_000,
            },
            "endpoint",
        ),
        ("update_endpoint", lambda s: {**endpoint(s), "timeout_ms": 5_000}, None),
        ("set_hint", lambda s: {**endpoint(s), "interval_ms": 30_000}, None),
        ("list_hints", lambda s: {**endpoint(s), "limit": 5}, None),
        ("get_hint", lambda s: {"hint_id": a.hint.pk}, None),
        ("clear_hints", endpoint, None),
        ("pause_endpoint", lambda s: {**endpoint(s), "for_ms": 60_000, "reason": "mcp"}, None),
        ("resume_endpoint", endpoint, None),
        # The world's endpoint: the new one is tested next, and the tenant's floor refuses
        # a second manual call of one endpoint within a second.
        ("run_endpoint_now", lambda s: {"endpoint_id": a.endpoint.pk}, None),
        ("test_endpoint", endpoint, None),
        ("reset_failures", endpoint, None),
        ("preview_runs", lambda s: {**endpoint(s), "count": 3}, None),
        (
            "preview_change",
            lambda s: {**endpoint(s), "baseline_interval_ms": 120_000, "count": 3},
            None,
        ),
        ("list_audit", lambda s: {"object": f"endpoint:{s['endpoint']}", "limit": 5}, None),
        ("explain_slot", lambda s: {**endpoint(s), "at": "2026-01-01T00:00:00Z"}, None),
        (
            "start_backfill",
            lambda s: {
                **endpoint(s),
                "range_from": "2026-01-01T00:00:00Z",
                "range_to": "2026-01-01T01:00:00Z",
            },
            "backfill",
        ),
        ("get_backfill", lambda s: {"backfill_id": s["backfill"]}, None),
        ("cancel_backfill", lambda s: {"backfill_id": s["backfill"]}, None),
        ("run_job_now", job, None),
        ("endpoint_health", endpoint, None),
        ("list_endpoint_runs", lambda s: {**endpoint(s), "status": "success"}, None),
        ("list_job_runs", job, None),
        ("get_run", lambda s: {"run_id": a.run.pk}, None),
        ("analyze_endpoint", lambda s: {"endpoint_id": a.endpoint.pk, "backend": "rules"}, None),
        ("list_sessions", lambda s: {"endpoint_id": a.endpoint.pk}, None),
        ("get_session", lambda s: {"session_id": a.session.pk}, None),
        ("scheduler_status", lambda s: {}, None),
        ("dashboard_stats", lambda s: {}, None),
        ("list_tenants", lambda s: {}, None),
        ("get_tenant", lambda s: {"tenant_id": a.tenant.pk}, None),
        ("export_config", lambda s: {"format": "json"}, None),
        (
            "import_config",
            lambda s: {
                "text": f"version: 1\ntenants:\n  - name: {a.tenant.name}\n",
                "dry_run": True,
            },
            None,
        ),
        ("list_channels", lambda s: {}, None),
        (
            "create_channel",
            lambda s: {"name": "mcp-hook", "kind": "webhook", "target": target_url},
            "channel",
        ),
        ("get_channel", channel, None),
        ("test_channel", channel, None),
        ("update_channel", lambda s: {**channel(s), "enabled": False}, None),
        ("set_alert_rule", lambda s: {**job(s), "after_failures": 2, "stale_factor": 3}, "rule"),
        ("list_alert_rules", lambda s: {}, None),
        ("remove_alert_rule", lambda s: {"rule_id": s["rule"]}, None),
        ("acknowledge_alert", lambda s: {"endpoint_id": a.endpoint.pk}, None),
        ("delete_channel", channel, None),
        ("archive_endpoint", endpoint, None),
        ("delete_endpoint", endpoint, None),
        ("pause_job", job, None),
        ("resume_job", job, None),
        ("archive_job", job, None),
        ("unarchive_job", job, None),
        ("delete_job", job, None),
        ("pause_tenant", lambda s: {"tenant_id": a.tenant.pk}, None),
        ("resume_tenant", lambda s: {"tenant_id": a.tenant.pk}, None),
        ("rotate_signing_secret", lambda s: {"tenant_id": a.tenant.pk}, None),
    ]


def invalid_arguments(tool: Any) -> list[tuple[dict[str, Any], str]]:
    """Wrong calls of a tool and a word its error must contain."""
    schema = tool.input_schema
    required = schema.get("required", [])
    ids = {name: 1 if name.endswith("_id") else "x" for name in required}
    cases: list[tuple[dict[str, Any], str]] = [
        ({**ids, "colour": "blue"}, "colour"),  # an unknown argument
    ]
    if required:
        first = required[0]
        cases.append(({}, first))  # a missing one
        wrong = "not-a-number" if schema["properties"][first].get("type") == "integer" else 12345
        cases.append(({**ids, first: wrong}, first))  # one of the wrong type
    elif "limit" in schema["properties"]:
        cases.append(({"limit": 0}, "limit"))
    return cases


async def exercise(client: Client, world: ApiWorld, target_url: str) -> dict[str, Any]:
    listed = (await client.list_tools()).tools
    tools = {tool.name: tool for tool in listed}
    seen: dict[str, Any] = {"tools": tools, "answers": {}, "errors": {}}
    state: State = {}
    for name, arguments, keep in valid_steps(world, target_url):
        result = await client.call_tool(name, arguments(state))
        assert not result.is_error, (name, result.content)
        seen["answers"][name] = result.structured_content
        if keep:
            state[keep] = result.structured_content["id"]  # type: ignore[index]
    # A one-shot while an interval hint is active: the answer says the expiry moved.
    other = world.a.endpoint.pk
    await client.call_tool("set_hint", {"endpoint_id": other, "interval_ms": 60_000})
    oneshot = await client.call_tool("set_hint", {"endpoint_id": other, "next_run_in_ms": 600_000})
    seen["notice"] = oneshot.structured_content["notice"]  # type: ignore[index]
    for tool in listed:
        for arguments, word in invalid_arguments(tool):
            result = await client.call_tool(tool.name, arguments)
            assert result.is_error, (tool.name, arguments)
            seen["errors"][(tool.name, json.dumps(arguments))] = (
                result.content[0].text,  # type: ignore[union-attr]
                word,
            )
    semantic = {
        "set_hint": {"endpoint_id": other, "interval_ms": 30_000, "next_run_in_ms": 1_000},
        "create_endpoint": {
            "job_id": world.a.job.pk,
            "name": "slow",
            "url": target_url,
            "baseline_interval_ms": 60_000,
            "timeout_ms": 5,
        },
        "get_endpoint": {"endpoint_id": world.b.endpoint.pk},
        "unarchive_job": {"job_id": world.a.job.pk},
    }
    for name, arguments in semantic.items():
        result = await client.call_tool(name, arguments)
        assert result.is_error, name
        seen["errors"][(name, "semantic")] = (result.content[0].text, "")  # type: ignore[union-attr]
    seen["resources"] = [str(r.uri) for r in (await client.list_resources()).resources]
    seen["documents"] = {
        uri: (await client.read_resource(uri)).contents[0].text  # type: ignore[union-attr]
        for uri in seen["resources"]
    }
    templates = (await client.list_resource_templates()).resource_templates
    seen["templates"] = [t.uri_template for t in templates]
    state_text = (await client.read_resource(f"cronicorn://endpoints/{other}")).contents[0]
    seen["endpoint_state"] = json.loads(state_text.text)  # type: ignore[union-attr]
    try:
        await client.read_resource(f"cronicorn://endpoints/{world.b.endpoint.pk}")
    except MCPError as exc:
        seen["other_tenant"] = (exc.error.code, exc.error.message)
    prompts = (await client.list_prompts()).prompts
    seen["prompts"] = {p.name: [a.name for a in p.arguments or []] for p in prompts}
    monitor = await client.get_prompt("monitor_url", {"url": "https://shop.example.com/health"})
    seen["prompt_text"] = monitor.messages[0].content.text  # type: ignore[union-attr]
    seen["server_info"] = client.server_info
    seen["instructions"] = client.instructions
    return seen


def assert_as_an_assistant_needs(seen: dict[str, Any], world: ApiWorld) -> None:
    tools = seen["tools"]
    # Every tool was called with valid arguments, and answered.
    assert set(seen["answers"]) == set(tools), set(tools) ^ set(seen["answers"])
    for tool in tools.values():
        annotations = tool.annotations
        assert annotations is not None, tool.name
        assert annotations.read_only_hint is not None, tool.name
        assert annotations.destructive_hint is not None, tool.name
        assert annotations.idempotent_hint is not None, tool.name
        schema = json.dumps(tool.input_schema)
        assert "$ref" not in schema and "$defs" not in schema, tool.name
        assert "payload" not in tool.input_schema["properties"], tool.name
        assert tool.input_schema["additionalProperties"] is False, tool.name
        for name, prop in tool.input_schema["properties"].items():
            assert prop.get("description"), (tool.name, name)
    assert_annotations_follow_from_method_and_kind(tools)
    assert tools["create_job"].annotations.idempotent_hint is False
    assert tools["set_hint"].input_schema["required"] == ["endpoint_id"]  # ttl_ms defaults
    # The tool calls did what they say.
    assert seen["answers"]["test_endpoint"]["status_code"] == 200
    assert seen["answers"]["archive_job"]["status"] == JobStatus.ARCHIVED
    assert seen["answers"]["unarchive_job"]["status"] == JobStatus.PAUSED
    assert not Job.objects.filter(name="mcp-job").exists()  # deleted at the end
    assert not Endpoint.objects.filter(name="mcp-endpoint").exists()
    assert seen["answers"]["set_alert_rule"]["after_failures"] == 2
    assert seen["answers"]["analyze_endpoint"]["status"] == "succeeded"
    assert len(seen["answers"]["dashboard_stats"]["series"]) == 24
    assert "now also expires at" in seen["notice"]
    # Every error is one readable sentence naming what was wrong.
    for (tool, arguments), (text, word) in seen["errors"].items():
        readable(text)
        assert word in text, (tool, arguments, text)
    unknown = seen["errors"][("clear_hints", json.dumps({"endpoint_id": 1, "colour": "blue"}))]
    assert "no argument 'colour'" in unknown[0] and "reason" in unknown[0]
    assert seen["errors"][("get_endpoint", "semantic")][0].startswith("404 Not Found: ")
    assert "timeout_ms" in seen["errors"][("create_endpoint", "semantic")][0]
    assert "exactly one of" in seen["errors"][("set_hint", "semantic")][0]
    assert seen["errors"][("unarchive_job", "semantic")][0].startswith("409 Conflict: ")
    # Resources, prompts, the server's own description.
    assert {f"cronicorn://docs/{name}" for name in TOPICS} <= set(seen["resources"])
    for uri, text in seen["documents"].items():
        assert text.startswith("# ") and len(text) > 300, uri
    assert "cronicorn://endpoints/{endpoint_id}" in seen["templates"]
    assert seen["endpoint_state"]["id"] == world.a.endpoint.pk
    code, message = seen["other_tenant"]
    assert code == -32602 and "No endpoint" in message, seen["other_tenant"]
    assert set(seen["prompts"]) >= {"monitor_url", "investigate_endpoint"}
    assert "url" in seen["prompts"]["monitor_url"]
    assert "https://shop.example.com/health" in seen["prompt_text"]
    assert seen["server_info"].version and re.match(r"\d+\.\d+", seen["server_info"].version)
    instructions = seen["instructions"]
    assert instructions and len(instructions) > 500
    for concept in ("job", "endpoint", "baseline", "hint", "governor", "milliseconds"):
        assert concept in instructions, concept


def test_every_tool_over_stdio_with_the_sdk_client(
    api_world: ApiWorld, target: TargetServer
) -> None:
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
            return await exercise(client, api_world, target.url("/health"))

    assert_as_an_assistant_needs(asyncio.run(scenario()), api_world)


def test_every_tool_over_http_with_the_sdk_client(
    api_world: ApiWorld,
    mcp_http: str,
    target: TargetServer,
    tmp_path: Path,
) -> None:
    async def scenario() -> dict[str, Any]:
        async with http_client(mcp_http, api_world.write_key) as client:
            return await exercise(client, api_world, target.url("/health"))

    assert_as_an_assistant_needs(asyncio.run(scenario()), api_world)
