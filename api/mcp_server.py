"""The MCP server: every API operation as a tool, plus read-only resources (this
project's README and design notes, an endpoint's state).

Tools are built from the operations' registry (api/operations.py): the same names,
parameters and pydantic schemas as the REST routes, and the same ``invoke``, so a tool
is scoped to its key's tenant and write tools need a write key. The key comes from the
``Authorization: Bearer`` header over HTTP, or from ``manage.py mcp --api-key`` /
``CRONICORN_API_KEY`` over stdio.

Tools run on the SDK's event loop; the ORM is synchronous, so every call goes through
``sync_to_async`` (one worker thread, as Django requires for its connections).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from pydantic import TypeAdapter

import api.main  # noqa: F401 - registers every operation
from api.auth import Principal, bearer_key, check_rate, principal_for_key
from api.errors import problem_for
from api.operations import OPERATIONS, Operation, invoke
from api.schemas import Problem

INSTRUCTIONS = (
    "Cronicorn schedules HTTP calls (endpoints, grouped in jobs) and adapts their cadence. "
    "Use list_jobs / list_endpoints to find ids; set_hint tightens or relaxes an endpoint "
    "for a while; list_endpoint_runs shows what happened. Durations are milliseconds."
)
DOCS = {"readme": "README.md", "design": "docs/DESIGN.md"}


def build_server(*, stdio_key: str | None = None) -> MCPServer:
    server: MCPServer = MCPServer(name="cronicorn", instructions=INSTRUCTIONS)
    for op in OPERATIONS:
        server.add_tool(
            _tool(op, stdio_key),
            name=op.name,
            description=op.description,
            annotations=ToolAnnotations(read_only_hint=not op.write),
        )
    for name, relative in DOCS.items():
        server.resource(
            f"cronicorn://docs/{name}",
            name=name,
            mime_type="text/markdown",
            description=f"This project's {relative}.",
        )(_doc_reader(relative))
    get_endpoint = next(op for op in OPERATIONS if op.name == "get_endpoint")

    @server.resource(
        "cronicorn://endpoints/{endpoint_id}",
        name="endpoint",
        mime_type="application/json",
        description="An endpoint's state: schedule, next run and why, hints, pause, failures.",
    )
    async def endpoint_state(endpoint_id: str, ctx: Context) -> str:
        result = await _call(get_endpoint, ctx, stdio_key, {"endpoint_id": int(endpoint_id)})
        return TypeAdapter(get_endpoint.response).dump_json(result).decode()

    return server


def _doc_reader(relative: str) -> Callable[[], str]:
    def read() -> str:
        return (Path(settings.BASE_DIR) / relative).read_text()

    read.__name__ = f"read_{Path(relative).stem.lower()}"
    return read


def _tool(op: Operation, stdio_key: str | None) -> Callable[..., Any]:
    """An async function with the operation's parameters (and a Context), whose
    signature the SDK reads to build the tool's JSON schema."""

    async def tool(ctx: Context, **arguments: Any) -> Any:
        return await _call(op, ctx, stdio_key, arguments)

    context = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in op.params]
    tool.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [context, *params], return_annotation=op.response
    )
    tool.__annotations__ = {
        "ctx": Context,
        **{p.name: p.annotation for p in op.params},
        "return": op.response,
    }
    tool.__name__ = op.name
    return tool


async def _call(
    op: Operation, ctx: Context, stdio_key: str | None, arguments: dict[str, Any]
) -> Any:
    principal = await sync_to_async(_principal)(_authorization(ctx), stdio_key)
    try:
        return await sync_to_async(_invoke)(op, principal, arguments)
    except Exception as exc:
        problem = problem_for(exc)
        if problem is None:
            raise
        raise ToolError(_as_text(problem)) from None


def _invoke(op: Operation, principal: Principal, arguments: dict[str, Any]) -> Any:
    # A tool call is a request: old connections are closed around it, as Django does
    # around each HTTP request (request_started / request_finished).
    close_old_connections()
    try:
        check_rate(principal)
        # Serialised inside the worker thread: a lazy ORM attribute is read where it may be.
        return TypeAdapter(op.response).validate_python(invoke(op, principal, arguments))
    finally:
        close_old_connections()


def _authorization(ctx: Context) -> str | None:
    try:
        headers = ctx.headers
    except ValueError:  # no request context (called outside the SDK)
        return None
    return headers.get("authorization") if headers else None


def _principal(authorization: str | None, stdio_key: str | None) -> Principal:
    raw = bearer_key(authorization) or stdio_key
    principal = principal_for_key(raw) if raw else None
    if principal is None:
        raise ToolError(
            "401 Unauthorized: no usable API key. Over HTTP send 'Authorization: Bearer "
            "<key>'; over stdio pass --api-key or set CRONICORN_API_KEY. The key may be "
            "expired or revoked."
        )
    return principal


def _as_text(problem: Problem) -> str:
    lines = [f"{problem.status} {problem.title}: {problem.detail}"]
    lines += [f"  {field}: {' '.join(msgs)}" for field, msgs in problem.errors.items()]
    return "\n".join(lines)


def http_app(server: MCPServer) -> Any:
    """The streamable HTTP transport as an ASGI app answering at /mcp. The SDK guards
    against DNS rebinding with the Host header; the hosts allowed are Django's."""
    hosts = [h.lstrip(".") for h in settings.ALLOWED_HOSTS if h != "*"]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection="*" not in settings.ALLOWED_HOSTS,
        allowed_hosts=[pattern for host in hosts for pattern in (host, f"{host}:*")],
        allowed_origins=[f"{scheme}://{host}:*" for host in hosts for scheme in ("http", "https")]
        + [f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")],
    )
    # Stateless: each request stands alone (any web process can answer it) and carries
    # its own key; JSON answers instead of an event stream, as nothing is streamed.
    return server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        transport_security=security,
    )
