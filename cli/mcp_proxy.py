"""``cronicorn mcp``: an MCP server on stdio whose tools are the REST API's operations,
called over HTTP with the profile's key. No database, no Django: an assistant on a laptop
gets the same tools as ``manage.py mcp`` with a URL and a key.

The tools come from the served OpenAPI document (``/api/v1/openapi.json``), which the
in-process server's registry (api/operations.py) generates: one tool per operation, with
its name (the operationId), description and flat arguments (path and query parameters
beside the body's fields, ``$ref``s inlined), and its hints (``x-mcp-hints``). A call is
split back into path, query and body and sent to the route; an error answer comes back as
one sentence from its problem details. The topic documents and prompts of the in-process
server are not proxied.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from cli.client import Client, Refused, Unreachable

INSTRUCTIONS = (
    "Cronicorn calls HTTP endpoints on a schedule and adapts the cadence. These tools are "
    "its REST API's operations, scoped to one API key's tenant. Durations are "
    "milliseconds, times ISO 8601 UTC; find ids with list_jobs and list_endpoints; "
    "get_endpoint explains the next run."
)


@dataclass(frozen=True)
class RemoteTool:
    tool: types.Tool
    method: str
    path: str
    path_names: frozenset[str]
    query_names: frozenset[str]
    has_body: bool


def tools_from(document: dict[str, Any]) -> dict[str, RemoteTool]:
    schemas = document.get("components", {}).get("schemas", {})
    found: dict[str, RemoteTool] = {}
    for path, item in document.get("paths", {}).items():
        for method, operation in item.items():
            if not isinstance(operation, dict) or "operationId" not in operation:
                continue
            remote = _tool(path, method, operation, schemas)
            found[remote.tool.name] = remote
    return found


def _tool(path: str, method: str, operation: dict[str, Any], schemas: dict[str, Any]) -> RemoteTool:
    properties: dict[str, Any] = {}
    required: list[str] = []
    where: dict[str, set[str]] = {"path": set(), "query": set()}
    for parameter in operation.get("parameters", []):
        if parameter.get("in") not in where:
            continue  # a header (Idempotency-Key): not a tool argument
        name = parameter["name"]
        where[parameter["in"]].add(name)
        schema = _inline(parameter.get("schema", {}), schemas)
        if parameter.get("description"):
            schema = {**schema, "description": parameter["description"]}
        properties[name] = schema
        if parameter.get("required"):
            required.append(name)
    body = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if body is not None:
        schema = _inline(body.get("schema", {}), schemas)
        properties.update(schema.get("properties", {}))
        required += [name for name in schema.get("required", []) if name not in required]
    hints = operation.get("x-mcp-hints", {})
    tool = types.Tool(
        name=operation["operationId"],
        title=operation.get("summary"),
        description=operation.get("description") or operation.get("summary"),
        input_schema={
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(title=operation.get("summary"), **hints),
    )
    return RemoteTool(
        tool,
        method.upper(),
        path.removeprefix("/api/v1"),
        frozenset(where["path"]),
        frozenset(where["query"]),
        body is not None,
    )


def _inline(schema: Any, schemas: dict[str, Any]) -> Any:
    """``schema`` with every ``$ref`` to the components replaced by its definition."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            target = _inline(schemas[schema["$ref"].rsplit("/", 1)[-1]], schemas)
            rest = {k: _inline(v, schemas) for k, v in schema.items() if k != "$ref"}
            return {**target, **rest}
        return {k: _inline(v, schemas) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_inline(item, schemas) for item in schema]
    return schema


def call(client: Client, remote: RemoteTool, arguments: dict[str, Any]) -> types.CallToolResult:
    """The route's answer as the tool's result; a refusal or an unreachable server as an
    error result in one sentence."""
    known = set(remote.tool.input_schema.get("properties", {}))
    unknown = sorted(set(arguments) - known)
    missing = [n for n in remote.tool.input_schema.get("required", []) if n not in arguments]
    if unknown or missing:
        return _error(
            f"{remote.tool.name}: "
            + "; ".join(
                [f"no argument {n!r}" for n in unknown] + [f"{n!r} is required" for n in missing]
            )
            + f". Its arguments are {', '.join(sorted(known)) or 'none'}."
        )
    path = remote.path.format(**{n: arguments[n] for n in remote.path_names})
    query = {n: v for n, v in arguments.items() if n in remote.query_names}
    body = {n: v for n, v in arguments.items() if n not in remote.path_names | remote.query_names}
    try:
        answer = client.request(
            remote.method, path, query=query, body=body if remote.has_body else None
        )
    except Refused as exc:
        return _error(_sentence(exc))
    except Unreachable as exc:
        return _error(f"The Cronicorn server could not be reached: {exc}.")
    structured = answer if isinstance(answer, dict) else {"result": answer}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=_json(answer))],
        structured_content=structured,
    )


def _sentence(exc: Refused) -> str:
    problem = exc.problem
    detail = str(problem.get("detail", "")).rstrip(".")
    text = f"{exc.status} {problem.get('title', 'Error')}: {detail}"
    errors = problem.get("errors") or {}
    if isinstance(errors, dict) and errors:
        text += (
            " ("
            + "; ".join(
                f"{field}: {' '.join(map(str, messages)).rstrip('.')}"
                for field, messages in errors.items()
            )
            + ")"
        )
    if exc.status == 429 and exc.retry_after:
        text += f"; retry after {exc.retry_after} s"
    return " ".join(text.split()) + "."


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def build_server(client: Client, document: dict[str, Any]) -> Server[Any]:
    tools = tools_from(document)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[remote.tool for remote in tools.values()])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        remote = tools.get(params.name)
        if remote is None:
            return _error(f"No tool {params.name!r}; list the tools to see their names.")
        # urllib blocks: the call waits in a thread, the event loop keeps reading stdin.
        return await asyncio.to_thread(call, client, remote, dict(params.arguments or {}))

    info = document.get("info", {})
    return Server(
        "cronicorn",
        version=str(info.get("version", "")),
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def serve(client: Client) -> int:
    """Read the server's OpenAPI document, then serve MCP on stdin/stdout until EOF. Exit
    codes as the other verbs': 1 when the server refuses the key, 3 when unreachable."""
    try:
        document = client.request("GET", "/openapi.json")
    except Refused as exc:
        print(
            f"cronicorn mcp: the server refused to list its operations: {_sentence(exc)}",
            file=sys.stderr,
        )
        return 1
    except Unreachable as exc:
        print(f"cronicorn mcp: cannot reach the server: {exc}", file=sys.stderr)
        return 3
    server = build_server(client, document)

    async def run() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    asyncio.run(run())
    return 0
