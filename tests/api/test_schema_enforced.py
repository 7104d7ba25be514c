"""The server refuses what the OpenAPI document says it refuses, over REST and MCP alike.

For every field of every request body, each value the field's schema rules out (one past
its maximum or minimum, a character or an item too many or too few, true where it says
integer, 1 where it says boolean, null where it has no null, a word outside its enum) is a
422 (REST) or a refused tool call (MCP) naming that field, whatever else the body holds.
And a PATCH takes null exactly where its schema says (api/schemas.py, ``optional``)."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from django.test import Client
from mcp import Client as McpClient

from api.main import api
from api.mcp_server import build_server
from api.operations import OPERATIONS, Operation
from tests.world import ApiWorld, ids_of

BODIES = [op for op in OPERATIONS if op.body is not None]
# Beside a null schedule, the other one (an endpoint has exactly one).
COMPANIONS = {"baseline_interval_ms": {"baseline_cron": "@hourly"}}


def components() -> dict[str, Any]:
    return api.get_openapi_schema(path_prefix="/api/v1/")["components"]["schemas"]  # type: ignore[no-any-return]


def body_schema(op: Operation) -> dict[str, Any]:
    assert op.body is not None
    return components()[op.body.__name__]  # type: ignore[no-any-return]


def nullable(schema: dict[str, Any]) -> bool:
    """Null is allowed: the schema has no type (any JSON) or a null branch."""
    if "type" not in schema and "anyOf" not in schema:
        return True
    return any(branch.get("type") == "null" for branch in schema.get("anyOf", []))


def ruled_out(schema: dict[str, Any]) -> list[tuple[str, Any]]:
    """(what, value) for each value the field's schema rules out."""
    values: list[tuple[str, Any]] = [] if nullable(schema) else [("null", None)]
    for s in [b for b in schema.get("anyOf", [schema]) if b.get("type") != "null"]:
        kind = s.get("type")
        if kind == "integer":
            values.append(("true", True))
        if kind == "boolean":
            values.append(("1", 1))
        if "maximum" in s:
            values.append(("maximum + 1", s["maximum"] + 1))
        if "minimum" in s:
            values.append(("minimum - 1", s["minimum"] - 1))
        if "maxLength" in s:
            values.append(("maxLength + 1", "x" * (s["maxLength"] + 1)))
        if s.get("minLength"):
            values.append(("minLength - 1", "x" * (s["minLength"] - 1)))
        if "enum" in s:
            values.append(("not in enum", "NOT-ONE-OF-THEM"))
        if "pattern" in s or s.get("format") == "date-time":
            values.append(("not its format", "soon"))
        if "maxItems" in s:
            values.append(("maxItems + 1", ["x"] * (s["maxItems"] + 1)))
        if "maxProperties" in s:
            values.append(
                ("maxProperties + 1", {f"X-{i}": "v" for i in range(s["maxProperties"] + 1)})
            )
        extra = s.get("additionalProperties")
        if isinstance(extra, dict) and "maxLength" in extra:
            too_long = "x" * (extra["maxLength"] + 1)
            values.append(("a value's maxLength + 1", {"X-A": too_long}))
        if s.get("items", {}).get("type") == "string":
            values.append(("an item not a string", [1]))
    return values


def cases(op: Operation) -> list[tuple[str, str, Any]]:
    """(field, what, value) for every value ``op``'s body schema rules out."""
    return [
        (field, what, value)
        for field, schema in body_schema(op)["properties"].items()
        for what, value in ruled_out(schema)
    ]


def blamed(field: str, errors: dict[str, list[str]]) -> bool:
    return any(name == field or name.startswith(field + ".") for name in errors)


@pytest.mark.parametrize("op", BODIES, ids=lambda op: op.name)
def test_rest_refuses_each_value_the_schema_rules_out_naming_its_field(
    api_world: ApiWorld, op: Operation
) -> None:
    client = Client(headers={"Authorization": f"Bearer {api_world.write_key}"})
    url = "/api/v1" + op.path.format(**ids_of(api_world.a))
    passed = []
    for field, what, value in cases(op):
        answer = client.generic(
            op.method.upper(), url, json.dumps({field: value}), "application/json"
        )
        if answer.status_code != 422 or not blamed(field, answer.json()["errors"]):
            passed.append((field, what, answer.status_code, answer.content[:200]))
    assert not passed, passed
    # Every field the schema constrains has a case (run_policy and body are free JSON,
    # checked by the validation path).
    covered = {field for field, _, _ in cases(op)}
    assert covered >= set(body_schema(op)["properties"]) - {"run_policy", "body"}


@pytest.mark.parametrize("op", BODIES, ids=lambda op: op.name)
def test_mcp_refuses_each_value_the_schema_rules_out_naming_its_field(op: Operation) -> None:
    # Refused before any key is looked up: no database is needed.
    arguments = {p.name: 1 for p in op.params if "{" + p.name + "}" in op.path}

    async def calls() -> list[tuple[str, str, str]]:
        passed = []
        async with McpClient(build_server(stdio_key="unused")) as client:
            for field, what, value in cases(op):
                result = await client.call_tool(op.name, {**arguments, field: value})
                text = result.content[0].text  # type: ignore[union-attr]
                if not result.is_error or not re.search(rf"\b{field}[.:]", text):
                    passed.append((field, what, text[:200]))
        return passed

    passed = asyncio.run(calls())
    assert not passed, passed


PATCHES = [op for op in BODIES if op.method == "patch"]


@pytest.mark.parametrize("op", PATCHES, ids=lambda op: op.name)
def test_a_patch_takes_null_exactly_where_its_schema_says(
    api_world: ApiWorld, op: Operation
) -> None:
    client = Client(headers={"Authorization": f"Bearer {api_world.write_key}"})
    url = "/api/v1" + op.path.format(**ids_of(api_world.a))
    for field, schema in body_schema(op)["properties"].items():
        body = {field: None, **COMPANIONS.get(field, {})}
        answer = client.patch(url, json.dumps(body), content_type="application/json")
        if nullable(schema):
            assert answer.status_code == 200, (field, answer.content[:300])
        else:
            assert answer.status_code == 422, (field, answer.content[:300])
            assert blamed(field, answer.json()["errors"]), answer.json()["errors"]
