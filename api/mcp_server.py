"""The MCP server: every API operation as a tool, plus short topic documents, an
endpoint's state as a resource, and prompts for common tasks.

Tools are built from the operations' registry (api/operations.py): the same names,
parameters and pydantic schemas as the REST routes, and the same ``invoke``, so a tool
is scoped to its key's tenant and write tools need a write key. A tool's arguments are
flat: the request body's fields sit beside the path and query parameters, each with its
description, bounds and default, and the schema has no ``$ref`` to resolve. The key
comes from the ``Authorization: Bearer`` header over HTTP, or from ``manage.py mcp
--api-key`` / ``CRONICORN_API_KEY`` over stdio.

Every failure comes back as one readable sentence (what was wrong, how to fix it): the
same problem the REST API would answer, without pydantic's raw text.

Tools run on the SDK's event loop; the ORM is synchronous, so each call runs whole in a
worker thread of its own (``ToolCalls``): one tenant's slow call (test_endpoint waits up
to its endpoint's timeout, analyze_endpoint on a model) holds its own thread, never one
that other tenants' calls queue behind. At most CRONICORN_MCP_CALLS_PER_KEY calls of one
key and CRONICORN_MCP_THREADS in all run at once; a call beyond either waits
CRONICORN_MCP_CALL_WAIT_SECONDS for a place, then is refused in one sentence.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings
from django.db import connections
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, func_metadata
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from pydantic import ConfigDict, TypeAdapter, ValidationError, create_model
from pydantic.fields import FieldInfo

import api.main  # noqa: F401 - registers every operation
from api.auth import Principal, bearer_key, check_rate, principal_for_key
from api.errors import problem_for, readable_errors
from api.fair_share import cpu_budget
from api.models import hash_key
from api.operations import OPERATIONS, Operation, invoke
from api.parameters import parameter_field
from api.schemas import Problem
from endpoints.version import cronicorn_version

logger = logging.getLogger(__name__)
T = TypeVar("T")

INSTRUCTIONS = """\
Cronicorn calls HTTP endpoints on a schedule and adapts the cadence. An endpoint (a URL, \
method, headers, body) belongs to a job; a job groups endpoints that pause, archive and \
share a concurrency limit together. Each endpoint has a baseline (a cron expression or \
an interval in milliseconds) and optional bounds (min/max interval). Hints change the \
baseline for a while: set_hint with interval_ms runs it at a new cadence, with \
next_run_in_ms or next_run_at runs it once; a hint lasts ttl_ms (default 60 minutes for \
an interval, 30 for a one-shot; a one-shot must come before it expires) and both \
kinds share one expiry. The governor picks the \
next run from the baseline, hints, pause, failure backoff and bounds; get_endpoint \
explains its choice. Every run is recorded (list_endpoint_runs, get_run). Durations are \
milliseconds, times ISO 8601 UTC. Find ids with list_jobs and list_endpoints. Archive \
(archive_job, archive_endpoint) stops things but keeps their history; delete_* removes \
them for good. Read the resources cronicorn://docs/concepts and cronicorn://docs/reference \
for more.\
"""

# Short topic documents kept beside the project's docs (docs/mcp/*.md).
TOPICS = {
    "concepts": "Jobs, endpoints, baselines, hints, runs and how the next run is chosen.",
    "hints": "Interval and one-shot hints: what they do, how long they last, how to clear.",
    "governor": "The governor's rules, in the order it applies them.",
    "troubleshooting": "Why an endpoint does not run, fails, or runs late; what to check.",
    "recipes": "Common tasks step by step: monitor a URL, tighten during an incident, ...",
    "reference": "One page of defaults, limits and a glossary.",
}
TOPICS_DIR = Path(__file__).resolve().parent.parent / "docs" / "mcp"


def build_server(*, stdio_key: str | None = None) -> MCPServer:
    calls = ToolCalls()
    tools = [operation_tool(op, calls, stdio_key) for op in OPERATIONS]
    server: MCPServer = MCPServer(
        name="cronicorn",
        title="Cronicorn",
        instructions=INSTRUCTIONS,
        version=cronicorn_version(),
        tools=tools,  # type: ignore[arg-type]
    )
    for name, description in TOPICS.items():
        server.resource(
            f"cronicorn://docs/{name}",
            name=name,
            title=name.capitalize(),
            mime_type="text/markdown",
            description=description,
        )(_doc_reader(name))
    get_endpoint = next(op for op in OPERATIONS if op.name == "get_endpoint")

    @server.resource(
        "cronicorn://endpoints/{endpoint_id}",
        name="endpoint",
        mime_type="application/json",
        description="An endpoint's state: schedule, next run and why, hints, pause, failures.",
    )
    async def endpoint_state(endpoint_id: str, ctx: Context) -> str:
        if not endpoint_id.isdecimal():
            raise ResourceNotFoundError(
                f"cronicorn://endpoints/{endpoint_id}: the endpoint id is a number, e.g. "
                "cronicorn://endpoints/12 (find ids with list_endpoints)."
            )
        try:
            arguments = {"endpoint_id": int(endpoint_id)}
            result = await _call(get_endpoint, ctx, calls, stdio_key, arguments)
        except ToolError as exc:
            if "404" in str(exc):
                raise ResourceNotFoundError(str(exc)) from None
            raise ResourceError(str(exc)) from None
        return TypeAdapter(get_endpoint.response).dump_json(result).decode()

    _add_prompts(server)
    return server


def _doc_reader(name: str) -> Callable[[], str]:
    def read() -> str:
        return (TOPICS_DIR / f"{name}.md").read_text()

    read.__name__ = f"read_{name}"
    return read


def _add_prompts(server: MCPServer) -> None:
    @server.prompt(
        name="monitor_url",
        title="Set up monitoring for a URL",
        description="Create a job (if needed) and an endpoint that checks a URL, then test it.",
    )
    def monitor_url(url: str, every: str = "5 minutes", job: str = "monitoring") -> str:
        return (
            f"Set up monitoring for {url} with Cronicorn.\n"
            f"1. Call list_jobs and look for a job named {job!r}; if there is none, call "
            f"create_job with name={job!r}.\n"
            f"2. Call create_endpoint with that job_id, a short name for the URL, url={url!r}, "
            f"method GET and baseline_interval_ms for every {every} (in milliseconds, e.g. "
            "300000 for 5 minutes). Keep timeout_ms at its default unless the URL is slow.\n"
            "3. Call test_endpoint with the new endpoint_id and report the status code and "
            "duration; if it failed, say why (the run's error) and suggest a fix.\n"
            "4. Call list_alert_rules; if the job has no rule and list_channels shows a "
            "channel, offer to call set_alert_rule so failures reach someone.\n"
            "5. Finish with get_endpoint's explanation of when the next run is."
        )

    @server.prompt(
        name="investigate_endpoint",
        title="Investigate a failing or late endpoint",
        description="Read an endpoint's state, health and recent runs; explain and propose a fix.",
    )
    def investigate_endpoint(endpoint_id: str) -> str:
        return (
            f"Investigate Cronicorn endpoint {endpoint_id}.\n"
            f"1. get_endpoint endpoint_id={endpoint_id}: note the next run, its source and "
            "the explanation, any pause, hint and failure count.\n"
            f"2. endpoint_health endpoint_id={endpoint_id}: success rate and durations over "
            "1 h, 24 h and 7 d.\n"
            f"3. list_endpoint_runs endpoint_id={endpoint_id} status=failure limit=10, then "
            "get_run on the newest to read its error, status code and response body.\n"
            "4. Read cronicorn://docs/troubleshooting and say in a few sentences what is "
            "wrong and what to do (reset_failures once fixed, clear_hints, resume_endpoint); "
            "change nothing without asking."
        )


# --- tools --------------------------------------------------------------------------------


class _Arguments(ArgModelBase):
    # Unknown arguments are refused (a typo would otherwise be a silent no-op).
    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")


class OperationTool(Tool):
    """A tool whose arguments are refused in one readable sentence, not pydantic's text,
    and whose own failures are not prefixed with "Error executing tool"."""

    body_fields: tuple[str, ...] = ()

    async def run(
        self, arguments: dict[str, Any], context: Any, convert_result: bool = False
    ) -> Any:
        known = self.parameters.get("properties", {})
        unknown = sorted(set(arguments) - set(known))
        if unknown:
            raise ToolError(
                f"{self.name} has no argument {_names(unknown)}; its arguments are "
                f"{', '.join(known) or 'none'}."
            )
        try:
            validated = self.fn_metadata.validate_arguments(arguments)
        except ValidationError as exc:
            raise ToolError(arguments_sentence(self.name, exc)) from None
        # Only what the caller gave: an update changes the fields given, nothing else.
        given = {name: value for name, value in validated.items() if name in arguments}
        result = await self.fn(context, given)
        return self.fn_metadata.convert_result(result) if convert_result else result


def operation_tool(op: Operation, calls: ToolCalls, stdio_key: str | None) -> OperationTool:
    fields: dict[str, Any] = {}
    for param in op.params:
        if op.body is not None and param.annotation is op.body:
            for name, field in op.body.model_fields.items():
                fields[name] = (field.annotation, _copy(field))
        else:
            fields[param.name] = (param.annotation, parameter_field(param, op))
    arg_model = create_model(f"{op.name}_arguments", __base__=_Arguments, **fields)
    parameters = inline_refs(arg_model.model_json_schema())
    parameters.pop("title", None)

    async def returns() -> op.response:  # type: ignore[name-defined]
        """Only its return annotation is read: the output schema."""

    returns.__annotations__ = {"return": op.response}
    metadata = func_metadata(returns)
    metadata.arg_model = arg_model
    if metadata.output_schema is not None:
        metadata.output_schema = inline_refs(metadata.output_schema)

    async def call(ctx: Context, given: dict[str, Any]) -> Any:
        arguments = {k: v for k, v in given.items() if k in {p.name for p in op.params}}
        if op.body is not None:
            body_name = next(p.name for p in op.params if p.annotation is op.body)
            values = {k: v for k, v in given.items() if k in op.body.model_fields}
            try:
                arguments[body_name] = op.body.model_validate(values)
            except ValidationError as exc:
                raise ToolError(arguments_sentence(op.name, exc)) from None
        return await _call(op, ctx, calls, stdio_key, arguments)

    return OperationTool(
        fn=call,
        name=op.name,
        title=op.summary,
        description=op.description,
        parameters=parameters,
        fn_metadata=metadata,
        is_async=True,
        context_kwarg="ctx",
        annotations=ToolAnnotations(**op.annotations),
    )


def _copy(field: FieldInfo) -> FieldInfo:
    return FieldInfo.merge_field_infos(field)


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with every ``$ref`` to its ``$defs`` replaced by the definition itself:
    a client reads one self-contained object (the API's schemas are not recursive)."""
    defs = schema.get("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                target = resolve(defs[node["$ref"].rsplit("/", 1)[-1]])
                return {**target, **{k: resolve(v) for k, v in node.items() if k != "$ref"}}
            return {k: resolve(v) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    result: dict[str, Any] = resolve(schema)
    return result


def _names(names: list[str]) -> str:
    quoted = [f"'{name}'" for name in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def arguments_sentence(tool: str, exc: ValidationError) -> str:
    """One sentence naming each wrong argument and what it needs."""
    problems = "; ".join(
        f"{field}: {' '.join(m.rstrip('.') for m in messages)}"
        for field, messages in readable_errors(exc.errors()).items()
    )
    return f"{tool} was called with invalid arguments ({problems}); fix them and call again."


async def _call(
    op: Operation,
    ctx: Context,
    calls: ToolCalls,
    stdio_key: str | None,
    arguments: dict[str, Any],
) -> Any:
    raw = bearer_key(_authorization(ctx)) or stdio_key
    try:
        return await calls.run(raw, _invoke, op, raw, arguments)
    except ToolError:
        raise
    except ValidationError as exc:
        raise ToolError(arguments_sentence(op.name, exc)) from None
    except Exception as exc:
        problem = problem_for(exc)
        if problem is None:
            logger.exception("The tool %s failed", op.name)
            raise ToolError(
                f"{op.name} failed on the server (an internal error, logged there); "
                "retry, and report it if it persists."
            ) from None
        raise ToolError(sentence(problem)) from None


def _invoke(op: Operation, raw_key: str | None, arguments: dict[str, Any]) -> Any:
    """The whole call, in its worker thread: who calls, the rate limit, the operation."""
    principal = _principal(raw_key)
    check_rate(principal)
    with cpu_budget(principal):
        # Serialised in the worker thread too: a lazy ORM attribute is read where it may be.
        return TypeAdapter(op.response).validate_python(invoke(op, principal, arguments))


class ToolCalls:
    """Where tool calls run: each in a worker thread of its own, from a pool of
    CRONICORN_MCP_THREADS, at most CRONICORN_MCP_CALLS_PER_KEY of one key at once.

    A call first takes a place (a free thread, and room under its key's bound), waiting
    up to CRONICORN_MCP_CALL_WAIT_SECONDS; without one it is refused in a sentence that
    says which bound and how to get past it. No more calls are submitted than the pool
    has threads, so a call never queues in the pool behind a slow one.

    Why this is safe for Django's database connections: ``django.db.connections`` is
    per thread, and a connection may be used only in the thread that opened it. A call
    runs whole in one thread (its key's lookup, the rate check, the operation and the
    serialisation of its answer, where lazy ORM attributes are read), and hands the event
    loop plain pydantic data, so every connection it opens is used in that thread alone;
    it is closed there when the call ends, so a pool thread waits for its next call
    holding no connection (at most CRONICORN_MCP_THREADS are open, none idle).
    """

    def __init__(self) -> None:
        self.per_key: int = settings.CRONICORN_MCP_CALLS_PER_KEY
        self.threads: int = settings.CRONICORN_MCP_THREADS
        self.wait: float = settings.CRONICORN_MCP_CALL_WAIT_SECONDS
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="mcp-call")
        # Calls running, per key (its hash; "" for none). Touched on the event loop only.
        self._running: Counter[str] = Counter()
        self._changed = asyncio.Condition()

    async def run(self, key: str | None, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread, once a place is free; its result."""
        bucket = hash_key(key) if key else ""
        async with self._changed:
            try:
                async with asyncio.timeout(self.wait):
                    await self._changed.wait_for(lambda: self._has_room(bucket))
            except TimeoutError:
                raise ToolError(self._refusal(bucket)) from None
            self._running[bucket] += 1
        loop = asyncio.get_running_loop()
        work = self._pool.submit(contextvars.copy_context().run, _closing, fn, *args)
        # The place is given back when the thread is done with the call, not when the
        # caller stops waiting: a client that hangs up does not free a busy thread.
        work.add_done_callback(
            lambda _: asyncio.run_coroutine_threadsafe(self._finished(bucket), loop)
        )
        return await asyncio.wrap_future(work)

    def _has_room(self, bucket: str) -> bool:
        return self._running[bucket] < self.per_key and self._running.total() < self.threads

    async def _finished(self, bucket: str) -> None:
        async with self._changed:
            self._running[bucket] -= 1
            if self._running[bucket] <= 0:
                del self._running[bucket]
            self._changed.notify_all()

    def _refusal(self, bucket: str) -> str:
        if self._running[bucket] >= self.per_key:
            return (
                f"429 Too Many Requests: this API key already has {self.per_key} tool calls "
                "running, the most one key may run at once (CRONICORN_MCP_CALLS_PER_KEY); "
                "wait for one to finish and call again, or raise CRONICORN_MCP_CALLS_PER_KEY "
                "on the server."
            )
        return (
            f"503 Service Unavailable: this MCP server is already running {self.threads} tool "
            "calls, the most it runs at once (CRONICORN_MCP_THREADS); call again in a "
            "moment, or raise CRONICORN_MCP_THREADS on the server."
        )


def _closing(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, then this thread's database connections closed (see ToolCalls)."""
    try:
        return fn(*args)
    finally:
        connections.close_all()


def _authorization(ctx: Context) -> str | None:
    try:
        headers = ctx.headers
    except ValueError:  # no request context (called outside the SDK)
        return None
    return headers.get("authorization") if headers else None


def _principal(raw: str | None) -> Principal:
    principal = principal_for_key(raw) if raw else None
    if principal is None:
        raise ToolError(
            "401 Unauthorized: no usable API key; over HTTP send 'Authorization: Bearer "
            "<key>', over stdio pass --api-key or set CRONICORN_API_KEY (the key may be "
            "expired or revoked)."
        )
    return principal


def sentence(problem: Problem) -> str:
    """The problem on one line: its status, what was wrong, and each field's message."""
    text = f"{problem.status} {problem.title}: {problem.detail.rstrip('.')}"
    if problem.errors:
        fields = "; ".join(
            f"{field}: {' '.join(messages).rstrip('.')}"
            if field != "__all__"
            else " ".join(messages).rstrip(".")
            for field, messages in problem.errors.items()
        )
        text += f" ({fields})"
    return " ".join(text.split()) + "."


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
