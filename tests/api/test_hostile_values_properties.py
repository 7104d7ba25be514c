"""Property: whatever numbers and text a client sends to any write operation, over REST
or MCP, the answer is never a 500 (a problem or a success), and afterwards every
endpoint of the tenant still reads and plans. Extreme integers (beyond 64 bits),
floats (1e300, Infinity), negatives and huge or hostile strings go to every numeric and
text field of every write operation's body, and to its path ids.

Left out: test_endpoint and test_channel (they call out over the network, which the
guard's own tests cover) and the deletes (they would remove what is checked after)."""

from __future__ import annotations

import asyncio
import json
import re
import types
import typing
from datetime import datetime
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client as McpClient
from pydantic import BaseModel

from api.mcp_server import build_server
from api.operations import OPERATIONS, Operation
from endpoints.governor import EndpointSchedule, plan_next_run
from endpoints.models import Endpoint
from tests.world import ApiWorld, ids_of

SKIPPED = {"test_endpoint", "test_channel", "delete_endpoint", "delete_job", "delete_channel"}
WRITES = [op for op in OPERATIONS if op.write and op.name not in SKIPPED]

EXTREME_INTS = st.one_of(
    st.sampled_from(
        [
            *(0, -1, 1, -(2**63), 2**63 - 1, 2**63, 2**64, 2**62, 10**17, 26 * 10**13, 10**30),
            *(31_536_000_000, 31_536_000_001, 2**31, 2**31 - 1, -(2**31) - 1),
        ]
    ),
    st.integers(min_value=-(2**70), max_value=2**70),
)
EXTREME_FLOATS = st.one_of(
    st.sampled_from([1e300, -1e300, 1.5, 0.1, 2.6e14, float("inf"), float("nan")]),
    st.floats(),
)
EXTREME_TEXT = st.one_of(
    st.sampled_from(
        [
            *("", " ", "x" * 70_000, "a\x00b", "on\r\ncall", "\t\x1b[31m", "\ud800", "🦄" * 5000),
            *("Infinity", "1e400", "-1", "9" * 400, "[" * 3000, "http://[::1]/"),
        ]
    ),
    st.text(max_size=40),
)
EXTREME_TIMES = st.sampled_from(
    ["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "2026-13-45T00:00:00Z", "now", ""]
)


def payload_model(op: Operation) -> type[BaseModel] | None:
    for param in op.params:
        if isinstance(param.annotation, type) and issubclass(param.annotation, BaseModel):
            return param.annotation
    return None


def field_values(annotation: Any) -> st.SearchStrategy[Any]:
    """Extreme values for a field of this type (unions: any of their kinds)."""
    kinds = set(typing.get_args(annotation)) if _is_union(annotation) else {annotation}
    # Strict and bounded types (api/schemas.py: Int, Id, Name...) are their base type here.
    kinds = {
        typing.get_args(k)[0] if typing.get_origin(k) is typing.Annotated else k for k in kinds
    }
    choices: list[st.SearchStrategy[Any]] = []
    if int in kinds or bool in kinds:
        choices += [EXTREME_INTS, EXTREME_FLOATS]
    if str in kinds or typing.get_origin(annotation) is typing.Literal:
        choices += [EXTREME_TEXT, EXTREME_INTS]
    if datetime in kinds:
        choices += [EXTREME_TIMES, EXTREME_INTS]
    if not choices:  # dicts, lists, Any: text and numbers where they do not belong
        choices += [EXTREME_TEXT, EXTREME_INTS, st.just({"X-A": "x" * 70_000})]
    return st.one_of(st.none(), *choices, *choices)  # None now and then


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


@st.composite
def calls(draw: st.DrawFn, op: Operation) -> tuple[Operation, dict[str, Any], dict[str, Any]]:
    """``op``, its path ids (mostly valid, sometimes extreme) and a hostile body."""
    path_ids = {
        p.name: draw(st.one_of(st.just("valid"), st.just("valid"), st.just("valid"), EXTREME_INTS))
        for p in op.params
    }
    model = payload_model(op)
    body: dict[str, Any] = {}
    if model is not None:
        for name, info in model.model_fields.items():
            if info.is_required() or draw(st.integers(0, 3)) > 0:
                body[name] = draw(field_values(info.annotation))
    return op, path_ids, body


def url_of(op: Operation, ids: dict[str, Any], valid: dict[str, int]) -> str:
    values = {k: valid[k] if v == "valid" else v for k, v in ids.items() if k in valid}
    return "/api/v1" + op.path.format(**values)


def raw_json(body: dict[str, Any]) -> str:
    # Python's json writes Infinity/NaN, which is not JSON: exactly what a careless client
    # might send.
    return json.dumps(body)


def assert_every_endpoint_still_reads_and_plans(api: Client, api_world: ApiWorld) -> None:
    now = timezone.now()
    for endpoint in Endpoint.objects.filter(job__tenant=api_world.a.tenant).select_related(
        "job__tenant"
    ):
        response = api.get(f"/api/v1/endpoints/{endpoint.pk}")
        assert response.status_code == 200, (endpoint.pk, response.content[:300])
        assert "Next run" in response.json()["explanation"]
        plan_next_run(now, EndpointSchedule.from_endpoint(endpoint))


@pytest.mark.parametrize("op", WRITES, ids=lambda op: op.name)
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_rest_write_answers_500_and_every_endpoint_still_plans(
    api_world: ApiWorld, op: Operation, data: st.DataObject
) -> None:
    _, ids, body = data.draw(calls(op))
    api = Client(headers={"Authorization": f"Bearer {api_world.write_key}"})
    url = url_of(op, ids, ids_of(api_world.a))
    response = api.generic(op.method.upper(), url, raw_json(body), "application/json")
    assert response.status_code < 500, (op.name, body, response.content[:300])
    if response.status_code >= 400:
        assert response["Content-Type"] == "application/problem+json", response.content[:300]
    assert_every_endpoint_still_reads_and_plans(api, api_world)


# A problem ("422 Unprocessable Entity: ...") or the server's refusal of ill-typed or
# unknown arguments (api/mcp_server.py); "... failed on the server" is an exception.
PROBLEM_TEXT = re.compile(
    r"^(\d{3} [A-Z]|\w+ was called with invalid arguments|\w+ has no argument)"
)


@pytest.mark.django_db(transaction=True)
@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_mcp_tool_call_fails_but_as_a_problem_and_every_endpoint_still_plans(
    api_world: ApiWorld, data: st.DataObject
) -> None:
    op = data.draw(st.sampled_from(WRITES))
    _, ids, body = data.draw(calls(op))
    valid = ids_of(api_world.a)
    arguments: dict[str, Any] = {
        k: (valid[k] if v == "valid" else v) for k, v in ids.items() if k in valid
    }
    arguments.update(body)  # MCP tools take their arguments flat (no payload object)

    async def scenario() -> tuple[bool, str]:
        async with McpClient(build_server(stdio_key=api_world.write_key)) as client:
            result = await client.call_tool(op.name, arguments)
        await sync_to_async(connections.close_all)()
        text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
        return result.is_error, text

    is_error, text = asyncio.run(scenario())
    assert not is_error or PROBLEM_TEXT.match(text), (op.name, body, text[:300])
    api = Client(headers={"Authorization": f"Bearer {api_world.write_key}"})
    assert_every_endpoint_still_reads_and_plans(api, api_world)
